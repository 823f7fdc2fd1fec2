"""P20–P23: the proxy's audit — a write-ahead, keyed, complete chain per session.

Pattern: end to end with the real SDK client through ``McpProxy`` to a
         FastMCP upstream in process; the audit stream is read back from the
         store and verified with ``verify_chain`` under the derived key.
Role:    unit tests for ``gateway/_proxy_audit.py``.
Emits:   nothing.

Laws: P18 (a manifest at every session end), P20, P21, P22, P23.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import msgspec
import pytest
from mcp.shared.exceptions import McpError

from helmlog import ToolMiddleware, deny
from helmlog.events import MemoryEventStore, StoredEvent, verify_chain
from helmlog.gateway import (
    McpProxy,
    ProxyAudit,
    merkle_root,
    open_payload,
    verify_manifest,
)
from helmlog.gateway._proxy_audit import chain_key

from .proxy_helpers import proxied
from .upstream_server import CALLS, UPSTREAM

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
        with pytest.raises(McpError):
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
        with pytest.raises(McpError) as raised:
            await client.call_tool("echo", {"word": "x"})
        store.failing = False
    assert {"rejection_reason": "LEDGER_UNAVAILABLE"} == raised.value.error.data
    assert [] == CALLS


async def test_p20_a_failed_second_append_withholds_the_response() -> None:
    """P20: the call ran, but its result does not leave unrecorded."""
    CALLS.clear()
    store = FailingStore()
    async with proxied(_proxy(store)) as client:
        store.failing, store.fail_after = True, 1
        with pytest.raises(McpError) as raised:
            await client.call_tool("echo", {"word": "x"})
        store.failing = False
    assert {"rejection_reason": "LEDGER_UNAVAILABLE"} == raised.value.error.data
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
        with pytest.raises(McpError) as raised:
            await client.call_tool("echo", {"word": "x"})
        await client.call_tool("echo", {"word": "y"})
    assert {"rejection_reason": "LEDGER_UNAVAILABLE"} == raised.value.error.data
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
    (sid,) = await store.sessions()
    started = [
        r.decode() for r in await store.read(sid) if r.type == "proxy.call_started"
    ]
    assert [{"helmlog/tool_call_id": "c7"}] == [e.caller_meta for e in started]


async def test_an_upstream_that_dies_mid_call_is_audited_as_an_error() -> None:
    """Bad input: the client gets an MCP error and the audit records the outcome."""
    import sys

    store = MemoryEventStore()
    upstream = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]
    proxy = McpProxy(upstream, audit=ProxyAudit(SECRET, "k1", store))
    async with proxied(proxy) as client:
        with pytest.raises(McpError):
            await client.call_tool("die", {})
    (sid,) = await store.sessions()
    finished = [
        r.decode() for r in await store.read(sid) if r.type == "proxy.call_finished"
    ]
    assert [("die", "error")] == [(e.tool, e.outcome) for e in finished]
