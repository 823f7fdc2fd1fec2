"""P14, S10 — a governance link's ``ask`` in the proxy waits as a durable pause.

Pattern: ``McpProxy(governance=[an asking rule, ...])`` in front of real
         upstreams (the SDK's MCPServer in process, counting its runs; the
         FastMCP 4 server as a stdio child), reached by the ``mcp`` 2.x
         client in memory (handshake era), over Streamable HTTP (2026-07-28,
         declaring the tasks extension) and through ``helmlog mcp-proxy`` as
         a stdio child over Redis, by FastMCP 4's client and the MCP
         Inspector's CLI; a person decides with ``decide_pending`` (what the
         page and ``helmlog approve`` call) or the real CLI.
Role:    unit tests for ``gateway/proxy/_asks.py`` and the ask paths of
         ``_governance.py``, ``_session.py`` and ``McpProxy.resume``.
Emits:   nothing.

Laws: P14 (the proxy's governance has S2–S4 and S10), S4 (a tool error
naming the ask; ``_meta`` ``helmlog/ask`` reads the outcome back), S10 (a
task; the pause is the store's, so it outlives the proxy process), G62/G64,
R9 (a pause is decided once), R18 (the asks index lists it), P20, P27.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from helmlog import ToolMiddleware, allow, ask
from helmlog._asks import pending_questions
from helmlog.events import CheckpointError, EventStore, MemoryEventStore
from helmlog.gateway import McpProxy, ProxyAudit
from helmlog.gateway._tasks import ASK_META
from helmlog.runtime.lowlevel import decide_pending

from .http_helpers import http_client
from .proxy_ask_desk import POLICY, UPSTREAM
from .proxy_helpers import proxied, text_of
from .task_client import TASKS, TaskHandle, Tasks, client, get_task, wait_task
from .test_serve_clients import _inspector, needs_npx
from .upstream_server import CALLS
from .upstream_server import UPSTREAM as IN_PROCESS

ROOT = Path(__file__).resolve().parents[3]
SCRUBBED = {"name": "ann", "ssn": "***-**-****", "tier": "gold"}


def _refunds(call: Any) -> Any:
    if call.tool_name == "refund" and float(call.args.get("amount", 0)) > 100:
        return ask(f"approve a refund of {call.args['amount']}?")
    return allow()


#: Asks a person about refunds over 100 (the in-process upstream's tool).
FOUR_EYES = ToolMiddleware(name="four-eyes", on_tool_call=_refunds)


def _ask_id(text: str) -> str:
    return text.split("The call waits as ask '", 1)[1].split("'", 1)[0]


async def _when_asked(store: EventStore) -> str:
    with anyio.fail_after(20):
        while not (found := await pending_questions(store)):
            await anyio.sleep(0.01)
    return found[0].session_id


async def _types(store: EventStore, session_id: str) -> list[str]:
    return [r.decode().type for r in await store.read(session_id)]


# -- a client without tasks (S4 through P14) ----------------------------------


async def test_p14_s4_an_ask_is_a_durable_pause_named_in_the_tool_error() -> None:
    """P14, S4, S10, R18: the asking call is not forwarded; its pause is in a
    stream of its own (the proxy session goes on), listed by the asks index;
    the client is told the ask id and how to read the outcome."""
    CALLS.clear()
    store = MemoryEventStore()
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], store=store)
    async with proxied(proxy) as c:
        out = await c.call_tool("refund", {"amount": 250})
        small = await c.call_tool("refund", {"amount": 5})
    assert out.is_error
    text = text_of(out)
    assert text.startswith(
        "middleware 'four-eyes' asked a person to decide: approve a refund of 250?"
    )
    ask_id = _ask_id(text)
    session_id, _, call_id = ask_id.partition("/")
    assert session_id.startswith("mcp-desk-") and call_id == "mcp-desk-1"
    assert f"helmlog approve {session_id}" in text
    assert ("refunded 5.0", False) == (text_of(small), small.is_error)
    assert ["refund"] == CALLS  # the small one only
    [question] = await pending_questions(store)
    assert (session_id, "refund", "four-eyes") == (
        question.session_id,
        question.tool_name,
        question.middleware,
    )
    assert ["decision.filed", "pause.request"] == await _types(store, session_id)


async def test_p14_s4_the_decided_outcome_is_read_back_with_meta_and_runs_once() -> (
    None
):
    """S4, G62, R9: before the decision the read-back says it waits; approved,
    the upstream tool runs once and the repeated call with ``_meta``
    ``helmlog/ask`` returns its result, every time, never forwarding again;
    a second decision of the same pause is refused."""
    CALLS.clear()
    store = MemoryEventStore()
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], store=store)
    meta: dict[str, Any] = {}
    async with proxied(proxy) as c:
        ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 250})))
        meta = {"helmlog/ask": ask_id}
        early = await c.call_tool("refund", {"amount": 250}, meta=meta)
        session_id = ask_id.partition("/")[0]
        seen: list[Any] = []

        async def resume(checkpoint: Any, decision: Any) -> str:
            seen.append((checkpoint, decision))
            return await proxy.resume(checkpoint, decision)

        said = await decide_pending(
            store, session_id, resume, approved=True, by="dana", note=None
        )
        reads = [await c.call_tool("refund", {}, meta=meta) for _ in range(2)]
        other = await c.call_tool("echo", {"word": "x"}, meta=meta)
        with pytest.raises(MCPError) as unknown:
            await c.call_tool("refund", {}, meta={"helmlog/ask": "mcp-desk-x/y"})
        with pytest.raises(CheckpointError) as again:
            await proxy.resume(*seen[0])
    assert early.is_error
    assert text_of(early).startswith(f"ask '{ask_id}' is not decided yet")
    assert "refunded 250.0" == said
    assert [("refunded 250.0", False)] * 2 == [(text_of(r), r.is_error) for r in reads]
    assert ["refund"] == CALLS  # once, by the decision
    assert other.is_error and "made for another call" in text_of(other)
    assert types.INVALID_PARAMS == unknown.value.error.code
    assert "replayed" == again.value.reason
    assert [
        "decision.filed",
        "pause.request",
        "pause.resume",
        "decision.filed",
        "tool.dispatched",
        "stream.tool_end",
    ] == await _types(store, session_id)


async def test_p14_g64_a_declined_ask_is_the_refusal_and_the_upstream_never_runs() -> (
    None
):
    """G64, S4, P14: declined, the outcome is a tool error carrying the
    decline and POLICY_DENIED; the upstream tool never ran."""
    CALLS.clear()
    store = MemoryEventStore()
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], store=store)
    async with proxied(proxy) as c:
        ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 250})))
        said = await decide_pending(
            store,
            ask_id.partition("/")[0],
            proxy.resume,
            approved=False,
            by="dana",
            note="over budget",
        )
        out = await c.call_tool("refund", {}, meta={"helmlog/ask": ask_id})
    assert "declined by human: over budget" == said
    assert (True, "declined by human: over budget") == (out.is_error, text_of(out))
    assert {"rejection_reason": "POLICY_DENIED", "middleware": "four-eyes"} == out.meta
    assert [] == CALLS


async def test_p14_p20_the_audit_records_the_asking_call_and_the_decided_one() -> None:
    """P20, P14: with a ``ProxyAudit``, the asking call is audited in its
    proxy session, and the call a decision carries out is audited in the
    pause's stream (its started and finished, around the upstream's run)."""
    store = MemoryEventStore()
    audit = ProxyAudit(b"s" * 32, store=store)
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], audit=audit)
    async with proxied(proxy) as c:
        ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 250})))
    session_id = ask_id.partition("/")[0]
    # the deciding process: a proxy rebuilt on the store, not started
    deciding = proxy.on_store(store)
    assert deciding.store is store
    said = await decide_pending(
        store, session_id, deciding.resume, approved=True, by="dana", note=None
    )
    assert "refunded 250.0" == said
    (stdio,) = [s for s in await store.sessions() if s.startswith("stdio-")]
    asked = [r.decode() for r in await store.read(stdio)]
    finished = [e for e in asked if e.type == "proxy.call_finished"]
    assert ["refund"] == [e.tool for e in finished]
    decided = [r.decode() for r in await store.read(session_id)]
    kinds = [e.type for e in decided]
    assert kinds.index("proxy.call_started") < kinds.index("tool.dispatched")
    assert kinds.index("stream.tool_end") < kinds.index("proxy.call_finished")
    (end,) = [e for e in decided if e.type == "proxy.call_finished"]
    assert ("refund", "success") == (end.tool, end.outcome)


# -- a client with tasks (S10 through P14) -------------------------------------


async def test_s10_p27_a_task_completes_with_the_upstream_s_structured_result() -> None:
    """S10, P14, P27: over Streamable HTTP at 2026-07-28 the proxy advertises
    the tasks extension; the asking call is a ``working`` task; approved,
    the FastMCP 4 tool runs and the task completes with its structured
    result as the scrub left it (valid for the advertised schema); a call
    that needs no person is answered at once."""
    store = MemoryEventStore()
    proxy = McpProxy(UPSTREAM, store=store, **POLICY)
    tasks = Tasks()

    async def person() -> None:
        session_id = await _when_asked(store)
        await decide_pending(
            store, session_id, proxy.resume, approved=True, by="dana", note=None
        )

    async with (
        proxy,
        proxy.http_server() as url,
        client(url, tasks) as c,
        anyio.create_task_group() as tg,
    ):
        assert "2026-07-28" == c.protocol_version
        assert TASKS in (c.server_capabilities.extensions or {})
        greeted = await c.call_tool("greet", {"name": "bo"})
        tg.start_soon(person)
        result = await c.call_tool("customer", {"name": "ann"})
    assert "hello bo, ssn ***-**-****" == text_of(greeted)
    assert [] == [h for h in tasks.handles if "greet" in h.task_id]
    assert (False, SCRUBBED) == (result.is_error, result.structured_content)
    assert SCRUBBED == json.loads(text_of(result))
    [handle] = tasks.handles
    assert "working" == handle.status
    assert handle.status_message is not None
    assert "may the caller read ann's record?" in handle.status_message
    assert [] == await pending_questions(store)


async def test_s10_a_declined_task_completes_with_the_refusal() -> None:
    """S10, G64: declined, the task completes as a tool error."""
    store = MemoryEventStore()
    proxy = McpProxy(UPSTREAM, store=store, **POLICY)

    async def person() -> None:
        session_id = await _when_asked(store)
        await decide_pending(
            store, session_id, proxy.resume, approved=False, by="dana", note="no"
        )

    async with (
        proxy,
        proxy.http_server() as url,
        client(url) as c,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(person)
        result = await c.call_tool("customer", {"name": "ann"})
    assert (True, "declined by human: no") == (result.is_error, text_of(result))


# -- a restart of the proxy process, a decision through the CLI ---------------


def _cli(*args: str, store: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "helmlog.cli", *args, "--store", store],
        cwd=ROOT,
        env={**os.environ, "HELMLOG_APPROVER": "dana", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


async def test_s10_over_redis_the_cli_decides_and_a_new_proxy_process_answers(
    redis_url: str,
) -> None:
    """S10, P14, R18: ``helmlog mcp-proxy`` (a stdio child over Redis, in
    front of the FastMCP 4 upstream) answers the asking call with a task
    and exits; ``helmlog asks`` lists it; ``helmlog approve --agent`` naming
    the McpProxy opens its own upstream and runs the tool once; a new proxy
    process answers ``tasks/get`` with the scrubbed structured result."""
    server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "helmlog.cli",
            "mcp-proxy",
            "--upstream",
            " ".join(UPSTREAM),
            "--policy",
            "tests.unit.gateway.proxy_ask_desk:POLICY",
            "--store",
            redis_url,
        ],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    async with client(server) as c:
        handle = await c.session.call_tool(
            "customer", {"name": "ann"}, allow_claimed=True
        )
    assert isinstance(handle, TaskHandle)
    assert "working" == handle.status
    session_id = handle.task_id.partition("/")[0]
    listed = await anyio.to_thread.run_sync(
        lambda: _cli("asks", "--json", store=redis_url)
    )
    assert [(session_id, "customer", "four-eyes")] == [
        (q["session_id"], q["tool_name"], q["middleware"]) for q in json.loads(listed)
    ]
    async with client(server) as c:
        waiting = await get_task(c.session, handle.task_id)
    assert "working" == waiting.status
    approved = await anyio.to_thread.run_sync(
        lambda: _cli(
            "approve",
            session_id,
            "--agent",
            "tests.unit.gateway.proxy_ask_desk:PROXY",
            store=redis_url,
        )
    )
    assert SCRUBBED == json.loads(approved.strip())
    async with client(server) as c:
        result = await wait_task(c.session, handle.task_id)
    assert (False, SCRUBBED) == (result.is_error, result.structured_content)


# -- the caller's identity across the pause (S2) ------------------------------


async def test_s10_s2_the_pause_keeps_the_caller_and_only_that_caller_reads_it() -> (
    None
):
    """S2, S10, G62: over Streamable HTTP each session's identity comes from
    the resolver; the links after the asker see the asking caller's identity
    on resume (as the resolver gave it), and another caller's read-back of
    the ask is refused, its ``tasks/get`` not found."""
    seen: list[Any] = []

    def spy(call: Any) -> Any:
        seen.append(call.identity)
        return allow()

    store = MemoryEventStore()
    proxy = McpProxy(
        IN_PROCESS,
        name="desk",
        governance=[FOUR_EYES, ToolMiddleware(name="spy", on_tool_call=spy)],
        store=store,
        resolve_identity=lambda headers: headers.get("x-user"),
    )
    async with proxy, proxy.http_server() as url:
        async with http_client(url, {"X-User": "ops-bot"}) as ops:
            asked = await ops.call_tool("refund", {"amount": 250})
        ask_id = _ask_id(text_of(asked))
        said = await decide_pending(
            store,
            ask_id.partition("/")[0],
            proxy.resume,
            approved=True,
            by="dana",
            note=None,
        )
        meta = {"helmlog/ask": ask_id}
        async with http_client(url, {"X-User": "eve"}) as eve:
            stolen = await eve.call_tool("refund", {}, meta=meta)
        async with http_client(url, {"X-User": "ops-bot"}) as ops:
            read = await ops.call_tool("refund", {}, meta=meta)
        async with client(url) as c:  # 2026-07-28, no identity (None)
            with pytest.raises(MCPError) as hidden:
                await get_task(c.session, ask_id)
    assert "refunded 250.0" == said
    assert ["ops-bot"] == seen  # the spy ran once, after the approval
    assert (True, f"ask '{ask_id}' was made by another caller") == (
        stolen.is_error,
        text_of(stolen),
    )
    assert ("refunded 250.0", False) == (text_of(read), read.is_error)
    assert types.INVALID_PARAMS == hidden.value.error.code


# -- real clients that take no tasks (S4 through P14) -------------------------


async def test_s4_fastmcp_reads_back_a_proxy_ask_s_structured_outcome() -> None:
    """S4, P14, P27: FastMCP 4's client (which checks a result against the
    tool's output schema) gets the tool error naming the ask; once dana
    approves, the same call with ``_meta`` naming it returns the FastMCP 4
    upstream's structured result as the scrub left it."""
    store = MemoryEventStore()
    proxy = McpProxy(UPSTREAM, store=store, **POLICY)
    async with (
        proxy,
        proxy.http_server() as url,
        FastMCPClient(StreamableHttpTransport(url)) as c,
    ):
        asked = await c.call_tool("customer", {"name": "ann"}, raise_on_error=False)
        ask_id = _ask_id(asked.content[0].text)
        await decide_pending(
            store,
            ask_id.partition("/")[0],
            proxy.resume,
            approved=True,
            by="dana",
            note=None,
        )
        read = await c.call_tool("customer", {"name": "ann"}, meta={ASK_META: ask_id})
    assert asked.is_error and "helmlog approve" in asked.content[0].text
    assert (False, SCRUBBED) == (read.is_error, read.structured_content)


@needs_npx
async def test_s4_the_inspector_cli_is_told_the_pending_proxy_ask() -> None:
    """S4, R18: the MCP Inspector's CLI ``tools/call`` through the proxy
    exits as a tool error naming the ask, ``helmlog approve`` and the page."""
    store = MemoryEventStore()
    proxy = McpProxy(UPSTREAM, store=store, **POLICY)
    async with proxy, proxy.http_server() as url:
        called = await _inspector(
            url,
            "--transport",
            "http",
            "--method",
            "tools/call",
            "--tool-name",
            "customer",
            "--tool-arg",
            "name=ann",
            tool_error=True,
        )
        [question] = await pending_questions(store)
    text = called["content"][0]["text"]
    assert called["isError"]
    assert f"`helmlog approve {question.session_id}`" in text
    assert "approvals page" in text


# -- one decision, one run (R9) -----------------------------------------------


async def test_r9_two_deciding_processes_at_once_run_the_upstream_tool_once() -> None:
    """R9, S10: two proxies rebuilt on the store (two deciding processes,
    each opening its own upstream connection) resume the same checkpoint at
    once: one records the decision and runs the tool, the other is refused
    as ``replayed``; the upstream tool ran once."""
    CALLS.clear()
    store = MemoryEventStore()
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], store=store)
    async with proxied(proxy) as c:
        ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 250})))
    held: list[Any] = []

    async def capture(checkpoint: Any, decision: Any) -> str:
        held.append((checkpoint, decision))
        raise RuntimeError("held for the race")

    with pytest.raises(RuntimeError):
        await decide_pending(
            store,
            ask_id.partition("/")[0],
            capture,
            approved=True,
            by="dana",
            note=None,
        )
    outcomes: list[Any] = []

    async def decide(deciding: McpProxy) -> None:
        try:
            outcomes.append(await deciding.resume(*held[0]))
        except CheckpointError as exc:
            outcomes.append(exc.reason)

    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(decide, proxy.on_store(store))
    assert ["refunded 250.0", "replayed"] == sorted(outcomes)
    assert ["refund"] == CALLS


async def test_s10_tasks_get_needs_the_extension_and_a_task_of_this_proxy() -> None:
    """S10: ``tasks/get`` from a client that did not declare the extension
    is ``-32021``; an id that names no task of this proxy is ``-32602``."""
    store = MemoryEventStore()
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], store=store)
    async with proxy, proxy.http_server() as url:
        async with Client(url, cache=None) as bare:
            with pytest.raises(MCPError) as undeclared:
                await get_task(bare.session, "mcp-desk-x/mcp-desk-1")
        async with client(url) as c:
            with pytest.raises(MCPError) as unknown:
                await get_task(c.session, "mcp-other-x/mcp-other-1")
    assert -32021 == undeclared.value.error.code
    assert types.INVALID_PARAMS == unknown.value.error.code


async def test_s10_an_ask_s_stream_is_not_held_by_the_proxy_process() -> None:
    """S10: the task's state is the store's; once its pause is recorded, and
    once its decision is carried out, the proxy holds no stream for it (a
    long-running proxy does not grow with its asks)."""
    store = MemoryEventStore()
    proxy = McpProxy(IN_PROCESS, name="desk", governance=[FOUR_EYES], store=store)
    async with proxied(proxy) as c:
        ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 250})))
        session_id = ask_id.partition("/")[0]
        held = set(proxy.records._streams)
        await decide_pending(
            store, session_id, proxy.resume, approved=True, by="dana", note=None
        )
        after = set(proxy.records._streams)
    assert session_id not in held and session_id not in after
    assert [proxy.stdio_session_id] == sorted(held)
