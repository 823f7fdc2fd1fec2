"""P20–P23: the proxy's audit — a write-ahead, keyed, complete chain per session.

Pattern: end to end with the real SDK client through ``McpProxy`` to a
         FastMCP upstream in process; the audit stream is read back from the
         store and verified with ``verify_chain`` under the derived key.
Role:    unit tests for ``gateway/proxy/_audit.py``.
Emits:   nothing.

Laws: P18 (a manifest at every session end, after the calls in flight are
drained or recorded cut off), P20, P21, P22 (the first broken position),
P23 (a sealed payload opens only at its own position).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import httpx2 as httpx
import msgspec
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp.shared.exceptions import MCPError

from helmlog import ToolMiddleware, deny
from helmlog.events import (
    MemoryEventStore,
    ProxyCallFinished,
    StoredEvent,
    verify_chain,
)
from helmlog.events.lowlevel import canonical_json
from helmlog.gateway import (
    McpProxy,
    ProxyAudit,
    open_payload,
    verify_manifest,
)
from helmlog.gateway.proxy._audit import chain_key, merkle_root

from ...polling import until
from .http_helpers import HEADERS, INITIALIZE
from .proxy_helpers import proxied
from .upstream_server import CALLS, CANCELLED, UPSTREAM

SECRET = b"operator secret"


class FailingStore(MemoryEventStore):
    """A memory store that refuses appends while ``failing`` (an outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.fail_after = 0

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if self.failing:
            if self.fail_after <= 0:
                raise OSError("disk full")
            self.fail_after -= 1
        return await super().append_sealed(session_id, records, expected_seq)


def _proxy(store: MemoryEventStore, **kw: Any) -> McpProxy:
    return McpProxy(UPSTREAM, audit=ProxyAudit(SECRET, "k1", store), **kw)


async def _records(store: MemoryEventStore) -> list[StoredEvent]:
    (sid,) = await store.sessions()
    return await store.read(sid)


async def test_p20_every_route_is_recorded_before_and_after() -> None:
    """P20: started then finished for routed, hidden and denied calls; digests."""
    store = MemoryEventStore()
    ceiling = ToolMiddleware(name="ceiling", on_tool_call=lambda c: deny("too big"))
    proxy = _proxy(
        store,
        hidden_tools=["delete_everything"],
        governance=[ceiling],
        pass_through_tools=["echo"],
        sensitivity=lambda t, i, a: "low",
    )
    async with proxied(proxy) as client:
        await client.call_tool("echo", {"word": "x"})
        with pytest.raises(MCPError):
            await client.call_tool("delete_everything", {})
        await client.call_tool("refund", {"amount": 1})
    events = [r.decode() for r in await _records(store)]
    calls = [e for e in events if e.type.startswith("proxy.call")]
    assert ["proxy.call_started", "proxy.call_finished"] * 3 == [e.type for e in calls]
    finished = [e for e in calls if e.type == "proxy.call_finished"]
    assert [
        ("pass-through", "echo", "success", None),
        ("hidden", None, "rejected", "TOOL_HIDDEN"),
        ("pipeline", "refund", "rejected", "POLICY_DENIED"),
    ] == [(e.route, e.forwarded_tool, e.outcome, e.rejection_reason) for e in finished]
    assert {"word": "x"} == finished[0].input_raw
    assert all(len(e.input_digest) == 64 == len(e.output_digest) for e in finished)
    assert "proxy.session_closed" == events[-1].type


async def test_p20_a_failed_first_append_routes_nothing() -> None:
    """P20: LEDGER_UNAVAILABLE and the upstream is never contacted."""
    CALLS.clear()
    store = FailingStore()
    async with proxied(_proxy(store)) as client:
        store.failing = True
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "x"})
        store.failing = False
    assert "LEDGER_UNAVAILABLE" == raised.value.error.data["rejection_reason"]
    assert [] == CALLS


async def test_p20_a_failed_second_append_withholds_the_response() -> None:
    """P20: the call ran, but its result does not leave unrecorded."""
    CALLS.clear()
    store = FailingStore()
    async with proxied(_proxy(store)) as client:
        store.failing, store.fail_after = True, 1
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "x"})
        store.failing = False
    assert "LEDGER_UNAVAILABLE" == raised.value.error.data["rejection_reason"]
    assert ["echo"] == CALLS


async def test_p21_the_chain_is_keyed_and_an_edit_of_any_field_fails() -> None:
    """P21, P22: verify_chain under the derived key names the edited position."""
    store = MemoryEventStore()
    async with proxied(_proxy(store, sensitivity=lambda t, i, a: "medium")) as client:
        await client.call_tool("echo", {"word": "x"})
    records = await _records(store)
    key = chain_key(SECRET)
    assert None is verify_chain(records, key)
    assert 1 == verify_chain(records, None)  # not a bare SHA-256 chain
    finished = records[1]
    data = msgspec.json.decode(finished.data)
    for field, value in (
        ("outcome", "error"),
        ("tool", "refund"),
        ("sensitivity", "low"),
        ("input_digest", "0" * 64),
        ("identity", "mallory"),
        ("input_raw", {"word": "y"}),
    ):
        edited = msgspec.json.encode({**data, field: value})
        forged = [
            *records[:1],
            msgspec.structs.replace(finished, data=edited),
            *records[2:],
        ]
        assert 2 == verify_chain(forged, key), field


async def test_p21_a_stdio_session_is_chained_with_distinct_positions() -> None:
    """P21: one stdio-<uuid4> session; concurrent calls get consecutive seqs."""
    store = MemoryEventStore()
    proxy = _proxy(store)
    async with proxied(proxy) as client, anyio.create_task_group() as tg:
        for word in "abcde":
            tg.start_soon(client.call_tool, "echo", {"word": word})
    (sid,) = await store.sessions()
    records = await store.read(sid)
    assert sid == proxy.stdio_session_id and sid.startswith("stdio-")
    assert list(range(1, len(records) + 1)) == [r.seq for r in records]
    assert 11 == len(records)
    assert None is verify_chain(records, chain_key(SECRET))


async def test_p21_a_failed_key_derivation_is_retried_not_cached() -> None:
    """P21: the secret function fails once; that call is refused, the next passes."""
    attempts: list[int] = []

    def secret() -> bytes:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("KMS unreachable")
        return SECRET

    store = MemoryEventStore()
    proxy = McpProxy(UPSTREAM, audit=ProxyAudit(secret, "kms", store))
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "x"})
        await client.call_tool("echo", {"word": "y"})
    assert "LEDGER_UNAVAILABLE" == raised.value.error.data["rejection_reason"]
    assert 2 == len(attempts)


async def test_p22_every_session_end_has_a_signed_manifest() -> None:
    """P22: the manifest's fields, root and signature; on_manifest gets it."""
    store = MemoryEventStore()
    got: list[dict[str, Any]] = []
    proxy = _proxy(store, on_manifest=got.append, resolve_identity=lambda h: "ann")
    async with proxied(proxy) as client:
        await client.call_tool("echo", {"word": "x"})
    records = await _records(store)
    (manifest,) = got
    assert records[-1].decode().manifest == manifest
    assert (proxy.stdio_session_id, "ann", 2, "k1") == (
        manifest["session_id"],
        manifest["identity"],
        manifest["event_count"],
        manifest["key_id"],
    )
    assert merkle_root([r.hash for r in records[:2]]) == manifest["merkle_root"]
    assert verify_manifest(manifest, SECRET)
    for field, value in (
        ("identity", "mallory"),
        ("event_count", 1),
        ("closed_at", 0),
        ("session_id", "other"),
    ):
        assert not verify_manifest({**manifest, field: value}, SECRET), field


async def test_p22_a_session_without_calls_still_gets_a_manifest() -> None:
    """P22: event_count 0."""
    store = MemoryEventStore()
    got: list[dict[str, Any]] = []
    async with proxied(_proxy(store, on_manifest=got.append)) as client:
        await client.list_tools()
    assert [0] == [m["event_count"] for m in got]


def test_p22_merkle_leaves_and_nodes_are_domain_separated() -> None:
    """P22: a node hash is never a leaf hash: two leaves differ from their node."""
    a, b = "aa" * 32, "bb" * 32
    assert merkle_root([a, b]) != merkle_root([merkle_root([a, b])])
    assert merkle_root([a, b]) != merkle_root([b, a])


async def test_p23_high_stores_payloads_only_sealed() -> None:
    """P23: high: no raw payload, AES-GCM sealed, decryptable; low: raw. Digests."""
    store = MemoryEventStore()
    tiers = {"lookup_customer": "high", "echo": "low"}
    proxy = _proxy(store, sensitivity=lambda t, i, a: tiers.get(t, "nonsense"))
    async with proxied(proxy) as client:
        await client.call_tool("lookup_customer", {"name": "ann"})
        await client.call_tool("echo", {"word": "x"})
        await client.call_tool("refund", {"amount": 1})
    finished = [
        r.decode() for r in await _records(store) if r.type == "proxy.call_finished"
    ]
    high, low, unknown = finished
    assert ("high", None, None) == (high.sensitivity, high.input_raw, high.output_raw)
    assert b"123-45-6789" not in (await _records(store))[1].data
    assert {"name": "ann"} == open_payload(high, SECRET, "input")
    assert "ann: ssn 123-45-6789" in str(open_payload(high, SECRET, "output"))
    assert ("low", {"word": "x"}) == (low.sensitivity, low.input_raw)
    assert ("high", None) == (unknown.sensitivity, unknown.input_raw)
    assert high.input_sealed != unknown.input_sealed


async def test_p22_a_deleted_audit_stream_is_reported_as_truncated() -> None:
    """P22, R19: no records, but a head that says there were: broken at seq 1."""
    store = MemoryEventStore()
    async with proxied(_proxy(store)) as client:
        await client.call_tool("echo", {"word": "x"})
    (sid,) = await store.sessions()
    head = await store.read_head(sid)
    assert head is not None
    assert 1 == verify_chain([], chain_key(SECRET), head, session_id=sid)


async def test_an_agent_call_through_the_proxy_can_be_correlated() -> None:
    """Item 4: the agent's tool_call_id reaches the proxy's audit in _meta."""
    from helmlog import Agent
    from helmlog.gateway import mcp_client
    from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

    store = MemoryEventStore()
    proxy = _proxy(store)
    async with (
        proxy,
        proxy.http_server() as url,
        mcp_client("gate", url=url) as tools,
    ):
        echo = next(t for t in tools if t.name == "echo")
        model = scripted(
            [
                Reply(
                    tool_calls=[
                        ToolCallRequest(id="c7", name="echo", args={"word": "a"})
                    ]
                ),
                "done",
            ]
        )
        agent = Agent.create(provider=model, model="m").tool(echo).build()
        assert "done" == await agent.run("go")
    # a 2026-era client's requests are sessions of their own (issue 26)
    started = [
        r.decode()
        for sid in await store.sessions()
        for r in await store.read(sid)
        if r.type == "proxy.call_started"
    ]
    assert [{"helmlog/tool_call_id": "c7"}] == [e.caller_meta for e in started]


async def test_an_upstream_that_dies_mid_call_is_audited_as_an_error() -> None:
    """Bad input: the client gets an MCP error and the audit records the outcome."""
    import sys

    store = MemoryEventStore()
    upstream = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]
    proxy = McpProxy(upstream, audit=ProxyAudit(SECRET, "k1", store))
    async with proxied(proxy) as client:
        with pytest.raises(MCPError):
            await client.call_tool("die", {})
    (sid,) = await store.sessions()
    finished = [
        r.decode() for r in await store.read(sid) if r.type == "proxy.call_finished"
    ]
    assert [("die", "error")] == [(e.tool, e.outcome) for e in finished]


async def _three_calls(store: MemoryEventStore, **kw: Any) -> list[StoredEvent]:
    """Three audited calls through a real proxy: seqs 1-6, the manifest at 7."""
    async with proxied(_proxy(store, **kw)) as client:
        for word in "abc":
            await client.call_tool("echo", {"word": word})
    records = await _records(store)
    assert list(range(1, 8)) == [r.seq for r in records]
    return records


async def test_p22_verify_chain_names_the_first_broken_position() -> None:
    """P22: seq 2 deleted unrenumbered, 2 and 3 swapped, seq i set to i+5:
    each breaks at its position (2, 2, i), never at a seq the attacker chose."""
    records = await _three_calls(MemoryEventStore())
    key = chain_key(SECRET)
    assert None is verify_chain(records, key)
    deleted = [records[0], *records[2:]]
    swapped = [records[0], records[2], records[1], *records[3:]]
    assert (2, 2) == (verify_chain(deleted, key), verify_chain(swapped, key))
    for i in range(1, 8):
        renumbered = list(records)
        renumbered[i - 1] = msgspec.structs.replace(records[i - 1], seq=i + 5)
        assert i == verify_chain(renumbered, key), i
        # Renumbered in its body too (and re-hashed): still its position.
        body = msgspec.json.decode(records[i - 1].data)
        data = msgspec.json.encode({**body, "seq": i + 5})
        resealed = msgspec.structs.replace(
            records[i - 1],
            seq=i + 5,
            data=data,
            hash=hmac.new(key, data, hashlib.sha256).hexdigest(),
        )
        renumbered[i - 1] = resealed
        assert i == verify_chain(renumbered, key), i


def _high(records: list[StoredEvent]) -> list[ProxyCallFinished]:
    finished = [r.decode() for r in records if r.type == "proxy.call_finished"]
    assert all(isinstance(e, ProxyCallFinished) for e in finished)
    return finished  # type: ignore[return-value]


async def test_p23_a_sealed_payload_opens_only_at_its_own_position() -> None:
    """P23: a ciphertext moved to another event, given the same request id,
    does not open there (the key binds the seq); at home it opens."""
    records = await _three_calls(MemoryEventStore(), sensitivity=lambda t, i, a: "high")
    first, second, _third = _high(records)
    assert {"word": "a"} == open_payload(first, SECRET, "input")
    assert {"word": "b"} == open_payload(second, SECRET, "input")
    for field in ("input", "output"):
        moved = msgspec.structs.replace(
            second,
            request_id=first.request_id,
            input_sealed=first.input_sealed,
            output_sealed=first.output_sealed,
        )
        with pytest.raises(ValueError, match="does not open"):
            open_payload(moved, SECRET, field)
    # Stripping the position mark does not help: the older key is another key.
    assert first.input_sealed is not None
    unmarked = msgspec.structs.replace(
        first, input_sealed=first.input_sealed.removeprefix("v2:")
    )
    with pytest.raises(ValueError, match="does not open"):
        open_payload(unmarked, SECRET, "input")


def test_p23_a_payload_sealed_before_positions_still_opens() -> None:
    """P23: a value sealed with the older key (session and request id, no
    mark) opens as it did: old audit streams stay readable."""
    info = b"helmlog/v1/payload|s-1|r-1"
    key = hmac.new(SECRET, info, hashlib.sha256).digest()
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, canonical_json({"word": "x"}), b"input")
    event = ProxyCallFinished(
        session_id="s-1",
        seq=4,
        request_id="r-1",
        route="pipeline",
        tool="echo",
        outcome="success",
        input_digest="0" * 64,
        output_digest="0" * 64,
        input_sealed=base64.b64encode(nonce + sealed).decode(),
    )
    assert {"word": "x"} == open_payload(event, SECRET, "input")


async def _ended_mid_call(
    end: Callable[[str, str], Any], **options: Any
) -> tuple[list[StoredEvent], list[dict[str, Any]]]:
    """A call to ``sleepy_noted`` in flight over HTTP when ``end(url, sid)``
    ends its session; the session's records and the manifests handed out.

    The client is raw HTTP: the call's own request is answered with an error
    once its session is gone, which the SDK's client raises out of its
    transport, not out of the call.
    """
    CALLS.clear()
    CANCELLED.clear()
    store = MemoryEventStore()
    got: list[dict[str, Any]] = []
    proxy = _proxy(store, on_manifest=got.append, **options)
    async with (
        proxy,
        proxy.http_server() as url,
        httpx.AsyncClient(timeout=60) as http,
        anyio.create_task_group() as tg,
    ):
        opened = await http.post(url, json=INITIALIZE, headers=HEADERS)
        sid = opened.headers["mcp-session-id"]
        session = {**HEADERS, "mcp-session-id": sid}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        told = await http.post(url, json=initialized, headers=session)
        assert 202 == told.status_code
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "sleepy_noted", "arguments": {"seconds": 30}},
        }
        tg.start_soon(functools.partial(http.post, url, json=call, headers=session))
        await until("the upstream call", lambda: "sleepy_noted" in CALLS, 20.0)
        await end(url, sid)
        await until("the manifest", lambda: bool(got), 20.0)
        tg.cancel_scope.cancel()
    return await _records(store), got


async def _delete(url: str, sid: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.delete(url, headers={"mcp-session-id": sid})
    assert 200 == answer.status_code


async def _wait_for_ttl(url: str, sid: str) -> None:
    return None  # the session's TTL ends it


@pytest.mark.parametrize("end", ["delete", "ttl"])
async def test_p18_a_session_ended_mid_call_records_its_finish_before_the_manifest(
    end: str,
) -> None:
    """P18, P20: a DELETE or TTL with a call in flight: the manifest is
    written after the call's ``call_finished`` (cut off), none is left open."""
    if end == "delete":
        records, manifests = await _ended_mid_call(_delete)
    else:
        records, manifests = await _ended_mid_call(_wait_for_ttl, session_ttl_s=1.0)
    events: list[Any] = [r.decode() for r in records]
    types = [e.type for e in events]
    assert [
        "proxy.call_started",
        "proxy.call_finished",
        "proxy.session_closed",
    ] == types
    started, finished, closed = events
    assert (started.request_id, "sleepy_noted") == (finished.request_id, finished.tool)
    assert "cut_off" == finished.outcome
    (manifest,) = manifests
    assert (2, manifest) == (manifest["event_count"], closed.manifest)
    assert None is verify_chain(records, chain_key(SECRET))


async def test_p18_a_call_past_the_drain_bound_is_cut_off_and_withheld() -> None:
    """P18, P20: a close waits ``drain_s`` for a call in flight, then records
    it cut off before the manifest; its late finish appends nothing more and
    its response is withheld (``LEDGER_UNAVAILABLE``)."""
    from helmlog.gateway.proxy._calls import CallState

    store = MemoryEventStore()
    proxy = McpProxy(UPSTREAM, audit=ProxyAudit(SECRET, "k1", store, drain_s=0.05))
    ledger = proxy.ledger
    assert ledger is not None
    session = proxy.open_session(transport="stdio", session_id=None)
    ctx = session.fresh_context()
    state = CallState("echo", {"word": "x"})
    stream = await ledger.started(
        session.audit_session, ctx, "echo", {"word": "x"}, None, state
    )
    manifest = await ledger.close_session(session.audit_session)
    assert manifest is not None
    with pytest.raises(MCPError) as raised:
        await ledger.finished(
            session.audit_session,
            ctx,
            stream,
            "echo",
            state,
            "success",
            {"content": []},
            None,
            1.0,
        )
    assert "LEDGER_UNAVAILABLE" == raised.value.error.data["rejection_reason"]
    events: list[Any] = [r.decode() for r in await _records(store)]
    assert ["proxy.call_started", "proxy.call_finished", "proxy.session_closed"] == [
        e.type for e in events
    ]
    assert ("cut_off", ctx.request_id) == (events[1].outcome, events[1].request_id)
    assert 2 == manifest["event_count"]
    with pytest.raises(MCPError):  # nothing follows the manifest
        await ledger.started(
            session.audit_session, session.fresh_context(), "echo", {}, None
        )
    assert 3 == len(await _records(store))
