"""S10 — an ``ask`` waits as an MCP task: a person decides, the client gets the result.

Pattern: a served refund desk whose rule asks above 100, reached by the
         ``mcp`` 2.x ``Client`` declaring the 2026-07-28 tasks extension
         (``task_client.Tasks``) in memory, over Streamable HTTP and over
         stdio child processes; the person decides through
         ``decide_pending`` (what the approvals page and ``helmlog approve``
         call) or the real ``helmlog asks``/``helmlog approve`` commands.
Role:    unit tests for ``gateway/_tasks.py`` and the task paths of
         ``gateway/_serve.py``.
Emits:   nothing.

Laws: S10 (the pause is the session's ordinary durable pause; the task is
read from the stream, so it survives a restart of the serving process),
S4 (a client without task support gets a tool error naming the pending
ask, and reads the outcome back by repeating the call with its id), G62/G64
(approved walks on, declined refuses), R9 (a checkpoint resumes once), R7
(``tool.dispatched`` before the tool runs), R18 (the asks index lists it).

Why the person is a concurrent task in one test: the client's call waits
(it polls ``tasks/get``) while someone else decides, as it would in life.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError

from helmlog import Tool, ToolMiddleware, allow, check_in_approved
from helmlog._asks import pending_questions
from helmlog.events import CheckpointError, EventStore, MemoryEventStore, fold
from helmlog.gateway import mcp_serve
from helmlog.gateway._serve import ServedTools
from helmlog.gateway._tasks import ASK_META, pending_text
from helmlog.runtime.lowlevel import decide_pending

from .helpers import MODES, connected, text_of
from .task_client import TASKS, TaskHandle, Tasks, client, get_task, wait_task
from .task_server import REFUND_SCHEMA, _four_eyes, _refund, build

ROOT = Path(__file__).resolve().parents[3]


def _events(types_of: list[Any]) -> list[str]:
    return [e.type for e in types_of]


async def _stream(served: ServedTools, session_id: str) -> list[str]:
    return _events([r.decode() for r in await served.store.read(session_id)])


async def _when_asked(store: EventStore) -> str:
    """Wait (polling) until a question is pending; its session id."""
    with anyio.fail_after(10):
        while not (found := await pending_questions(store)):
            await anyio.sleep(0.01)
    return found[0].session_id


def _person(
    store: EventStore,
    resume: Callable[..., Awaitable[Any]],
    *,
    approved: bool,
    note: str | None = None,
) -> Callable[[], Awaitable[None]]:
    """Dana, deciding the one pending ask as the approvals page would."""

    async def decide() -> None:
        session_id = await _when_asked(store)
        await decide_pending(
            store, session_id, resume, approved=approved, by="dana", note=note
        )

    return decide


# -- in memory (2026-07-28 over a stream pair) ----------------------------------


async def test_s10_an_approved_ask_completes_the_task_with_the_real_result() -> None:
    """S10, G62, R18: the call's task waits in the asks index; approved, the
    tool runs once and the waiting client receives its real result."""
    served = build(MemoryEventStore())
    tasks = Tasks()
    async with (
        client(served.memory_streams(), tasks) as c,
        anyio.create_task_group() as tg,
    ):
        assert "2026-07-28" == c.protocol_version
        assert TASKS in (c.server_capabilities.extensions or {})
        tg.start_soon(_person(served.store, served.resume, approved=True))
        result = await c.call_tool("refund", {"amount": 250})
    assert ("refunded 250", False) == text_of(result)
    [handle] = tasks.handles
    session_id, _, call_id = handle.task_id.partition("/")
    assert ("working", "mcp-desk-1") == (handle.status, call_id)
    assert handle.status_message is not None
    assert "approve a refund of 250?" in handle.status_message
    assert [
        "decision.filed",
        "pause.request",
        "pause.resume",
        "decision.filed",
        "tool.dispatched",
        "stream.tool_end",
    ] == await _stream(served, session_id)
    assert [] == await pending_questions(served.store)


async def test_s10_a_declined_ask_completes_the_task_with_the_refusal() -> None:
    """S10, G64: declined, the task completes as a tool error; the tool never ran."""
    served = build(MemoryEventStore())
    tasks = Tasks()
    async with (
        client(served.memory_streams(), tasks) as c,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(
            _person(served.store, served.resume, approved=False, note="over budget")
        )
        result = await c.call_tool("refund", {"amount": 250})
    assert ("declined by human: over budget", True) == text_of(result)
    session_id = tasks.handles[0].task_id.partition("/")[0]
    events = await _stream(served, session_id)
    assert "tool.dispatched" not in events
    assert ["pause.resume", "decision.filed", "stream.tool_end"] == events[-3:]


async def test_s10_a_call_that_does_not_ask_is_answered_at_once() -> None:
    """S10: the server makes a task only where a person is needed."""
    served = build(MemoryEventStore())
    tasks = Tasks()
    async with client(served.memory_streams(), tasks) as c:
        result = await c.call_tool("refund", {"amount": 20})
    assert ("refunded 20", False) == text_of(result)
    assert [] == tasks.handles


def _counted(served: ServedTools) -> list[int]:
    """The amounts the served refund tool actually ran with."""
    ran: list[int] = []
    tool = served.tools["refund"]
    original = tool.execute

    def counted(amount: int) -> Any:
        ran.append(amount)
        return original(amount=amount)

    tool.execute = counted
    return ran


def _ask_id(text: str) -> str:
    """The ask id a pending tool error names (between ``ask '`` and ``'``)."""
    return text.split("waits as ask '", 1)[1].split("'", 1)[0]


@pytest.mark.parametrize("mode", MODES)
async def test_s4_a_client_without_task_support_gets_a_tool_error_naming_the_ask(
    mode: Any,
) -> None:
    """S4, S10, R18 (issue 26 item 4): no extension declared — either era —
    the ask is the session's ordinary durable pause, listed in the asks
    index, and the client gets a tool error naming it and where to decide.

    Changed by issue 26 item 4, which is newer than the old S4 test: the
    ask used to be a denial ("there is no pause here to carry that ask")
    that left nothing to decide.
    """
    served = build(MemoryEventStore())
    ran = _counted(served)
    async with connected(served, mode) as c:
        text, is_error = text_of(await c.call_tool("refund", {"amount": 250}))
    ask_id = _ask_id(text)
    session_id, _, call_id = ask_id.partition("/")
    assert (True, "mcp-desk-1") == (is_error, call_id)
    assert text == pending_text(ask_id, "approve a refund of 250?", "four-eyes")
    assert f"helmlog approve {session_id}" in text
    assert f'"{ASK_META}": "{ask_id}"' in text
    [pending] = await pending_questions(served.store)
    assert (session_id, "refund", "four-eyes") == (
        pending.session_id,
        pending.tool_name,
        pending.middleware,
    )
    assert ["decision.filed", "pause.request"] == await _stream(served, session_id)
    assert [] == ran


async def test_s4_an_approved_ask_is_read_back_by_the_call_that_asked() -> None:
    """S4, G62, R9 (issue 26 item 4): over Streamable HTTP on the handshake,
    the call that asked, repeated with ``_meta`` naming its ask, reads "not
    decided yet" while it waits; approved, the tool runs once, and every
    later read returns the recorded result without running it again (and
    ``tasks/get`` of the same id, for a client that declares tasks)."""
    served = build(MemoryEventStore())
    ran = _counted(served)
    async with (
        served.http_server() as url,
        Client(url, mode="legacy", cache=None) as c,
    ):
        asked = await c.call_tool("refund", {"amount": 250})
        ask_id = _ask_id(text_of(asked)[0])
        meta: Any = {ASK_META: ask_id}
        waiting = text_of(await c.call_tool("refund", {"amount": 250}, meta=meta))
        session_id = await _when_asked(served.store)
        answer = await decide_pending(
            served.store, session_id, served.resume, approved=True, by="dana", note=None
        )
        first = await c.call_tool("refund", {"amount": 250}, meta=meta)
        again = await c.call_tool("refund", {"amount": 250}, meta=meta)
        other = text_of(await c.call_tool("audit", {"amount": 250}, meta=meta))
        # The same id is a task: a client that declares the extension reads it.
        async with client(url) as tasks_client:
            as_task = await wait_task(tasks_client.session, ask_id)
    assert ("refunded 250", False) == text_of(as_task)
    assert waiting[1]
    assert waiting[0].startswith(f"ask '{ask_id}' is not decided yet: waiting for")
    assert "refunded 250" == answer
    assert [("refunded 250", False)] * 2 == [text_of(first), text_of(again)]
    assert (
        f"ask '{ask_id}' was made for another call: it is read back by a call "
        "of tool 'refund'",
        True,
    ) == other
    assert [250] == ran
    assert [
        "decision.filed",
        "pause.request",
        "pause.resume",
        "decision.filed",
        "tool.dispatched",
        "stream.tool_end",
    ] == await _stream(served, session_id)


async def test_s4_a_declined_ask_is_read_back_as_the_refusal() -> None:
    """S4, G64: declined, the call that asked reads the refusal; nothing ran."""
    served = build(MemoryEventStore())
    ran = _counted(served)
    async with connected(served, "legacy") as c:
        asked = await c.call_tool("refund", {"amount": 250})
        ask_id = _ask_id(text_of(asked)[0])
        await decide_pending(
            served.store,
            ask_id.partition("/")[0],
            served.resume,
            approved=False,
            by="dana",
            note="over budget",
        )
        read = await c.call_tool("refund", {"amount": 250}, meta={ASK_META: ask_id})
    assert ("declined by human: over budget", True) == text_of(read)
    assert [] == ran


async def test_s4_s6_the_connection_s_session_goes_on_around_an_ask() -> None:
    """S6, R1: on one connection, calls that need no person stay in the
    connection's session; the asking call's pause is a session of its own."""
    served = build(MemoryEventStore())
    async with connected(served, "legacy") as c:
        before = await c.call_tool("refund", {"amount": 20})
        asked = await c.call_tool("refund", {"amount": 250})
        after = await c.call_tool("refund", {"amount": 30})
    assert [("refunded 20", False), ("refunded 30", False)] == [
        text_of(before),
        text_of(after),
    ]
    connection, ask_session = served.session_ids
    assert ask_session == _ask_id(text_of(asked)[0]).partition("/")[0]
    assert ["tool.dispatched", "tool.dispatched"] == [
        e for e in await _stream(served, connection) if e != "decision.filed"
    ]
    assert ["decision.filed", "pause.request"] == await _stream(served, ask_session)


async def test_s4_an_ask_id_that_names_no_ask_here_is_invalid_params() -> None:
    """S4: a call naming an unknown ask (or not a string) is a typed MCP error."""
    served = build(MemoryEventStore())
    async with connected(served, "legacy") as c:
        for meta in ({ASK_META: f"mcp-desk-{'0' * 32}/mcp-desk-1"}, {ASK_META: 7}):
            with pytest.raises(MCPError) as raised:
                await c.call_tool("refund", {"amount": 250}, meta=cast(Any, meta))
            assert types.INVALID_PARAMS == raised.value.code


async def test_s10_tasks_get_needs_the_extension_and_a_task_it_holds() -> None:
    """S10 (SEP-2663 errors): -32021 without the extension, -32602 for an
    unknown id; a pending task reads ``working`` with its question."""
    served = build(MemoryEventStore())
    tasks = Tasks()
    async with client(served.memory_streams(), tasks) as c:
        handle = await c.session.call_tool(
            "refund", {"amount": 500}, allow_claimed=True
        )
        assert isinstance(handle, TaskHandle)
        task_id = handle.task_id
        state = await get_task(c.session, task_id)
        assert ("working", task_id) == (state.status, state.task_id)
        with pytest.raises(MCPError) as unknown:
            await get_task(c.session, f"mcp-desk-{'0' * 32}/mcp-desk-9")
        assert types.INVALID_PARAMS == unknown.value.code
    async with connected(served) as plain:
        with pytest.raises(MCPError) as undeclared:
            await get_task(plain.session, task_id)
    assert types.MISSING_REQUIRED_CLIENT_CAPABILITY == undeclared.value.code


async def test_s10_a_decided_pause_is_not_resumed_twice() -> None:
    """R9: the checkpoint a decision used is refused as ``replayed`` afterwards."""
    served = build(MemoryEventStore())
    tasks = Tasks()
    kept: list[Any] = []

    async def resume(checkpoint: Any, decision: Any) -> str:
        kept.append(checkpoint)
        return await served.resume(checkpoint, decision)

    async with (
        client(served.memory_streams(), tasks) as c,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_person(served.store, resume, approved=True))
        await c.call_tool("refund", {"amount": 250})
    with pytest.raises(CheckpointError) as raised:
        await served.resume(kept[0], check_in_approved("erin"))
    assert "replayed" == raised.value.reason


async def test_s10_the_approvals_service_lists_and_decides_a_served_ask() -> None:
    """S10, H2: the approvals page's service lists the task's ask to an
    every-app approver and decides it with the served tools as its runner."""
    from helmlog.gateway.http import Principal
    from helmlog.gateway.http._service import LocalRunner, Service

    served = build(MemoryEventStore())
    service = Service(served.store, LocalRunner(served, lambda: "unused"))
    dana = Principal(
        identity="dana", roles=frozenset({"approver"}), apps=frozenset({"*"})
    )
    tasks = Tasks()

    async def on_the_page() -> None:
        await _when_asked(served.store)
        [view] = await service.asks(dana)
        assert ("refund", "four-eyes", {"amount": 250}) == (
            view.tool_name,
            view.middleware,
            view.args,
        )
        outcome = await service.decide(
            "dana",
            view.session_id,
            view.tool_call_id,
            approved=True,
            note=None,
            scope=dana,
        )
        assert ("answered", "refunded 250") == (outcome.status, outcome.answer)

    async with (
        client(served.memory_streams(), tasks) as c,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(on_the_page)
        result = await c.call_tool("refund", {"amount": 250})
    assert ("refunded 250", False) == text_of(result)


MODERN = "2026-07-28"


def _envelope(method: str, params: dict[str, Any], n: int) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-wire", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    }
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": method,
        "params": {**params, "_meta": meta},
    }


async def _post(
    http: httpx2.AsyncClient, url: str, message: dict[str, Any], name: str
) -> dict[str, Any]:
    """One 2026-07-28 POST with its routing headers; the JSON-RPC answer."""
    response = await http.post(
        url,
        json=message,
        headers={
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": MODERN,
            "mcp-method": message["method"],
            "mcp-name": name,
        },
    )
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    data = [
        line[len("data:") :].strip()
        for line in response.text.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]
    return dict(json.loads(data[-1]))


async def test_s10_on_the_wire_a_task_is_created_read_and_completed() -> None:
    """S10 (SEP-2663 wire): raw JSON-RPC over Streamable HTTP; ``resultType:
    "task"`` for the asking call, ``tasks/get`` (``Mcp-Name``: the task id)
    ``working`` then ``completed`` with the ``CallToolResult``."""
    served = build(MemoryEventStore())
    call = {"name": "refund", "arguments": {"amount": 250}}
    async with served.http_server() as url, httpx2.AsyncClient() as http:
        created = (await _post(http, url, _envelope("tools/call", call, 1), "refund"))[
            "result"
        ]
        task = created["taskId"]
        get = _envelope("tasks/get", {"taskId": task}, 2)
        waiting = (await _post(http, url, get, task))["result"]
        session_id = await _when_asked(served.store)
        await decide_pending(
            served.store, session_id, served.resume, approved=True, by="dana", note=None
        )
        done = (await _post(http, url, get, task))["result"]
    assert ("task", "working", None) == (
        created["resultType"],
        created["status"],
        created["ttlMs"],
    )
    assert ("complete", "working") == (waiting["resultType"], waiting["status"])
    assert ("completed", "approved by dana") == (done["status"], done["statusMessage"])
    assert {
        "content": [{"type": "text", "text": "refunded 250"}],
        "isError": False,
        "resultType": "complete",
    } == {k: v for k, v in done["result"].items() if k != "_meta"}


async def test_s10_two_servers_deciding_one_pause_run_the_tool_once() -> None:
    """R9, R2: two serving processes on one store resume the same checkpoint at
    once; one carries the call out, the other is refused as ``replayed``."""
    store = MemoryEventStore()
    ran: list[int] = []
    servers = [build(store), build(store)]
    for served in servers:
        tool = served.tools["refund"]
        original = tool.execute

        def counted(amount: int, _original: Any = original) -> Any:
            ran.append(amount)
            return _original(amount=amount)

        tool.execute = counted
    async with client(servers[0].memory_streams()) as c:
        await c.session.call_tool("refund", {"amount": 250}, allow_claimed=True)
    session_id = await _when_asked(store)
    kept: list[Any] = []

    async def keep(checkpoint: Any, decision: Any) -> None:
        kept.append(checkpoint)

    await decide_pending(store, session_id, keep, approved=True, by="dana", note=None)
    outcomes: list[Any] = []

    async def decide(served: ServedTools) -> None:
        try:
            outcomes.append(await served.resume(kept[0], check_in_approved("dana")))
        except CheckpointError as exc:
            outcomes.append(exc.reason)

    async with anyio.create_task_group() as tg:
        for served in servers:
            tg.start_soon(decide, served)
    assert ["refunded 250", "replayed"] == sorted(outcomes)
    assert [250] == ran


# -- a restart of the serving process ------------------------------------------------


async def test_s10_the_task_survives_a_restart_of_the_serving_process() -> None:
    """S10: served over Streamable HTTP, stopped, decided, served again by a
    fresh ``mcp_serve`` on the same store: ``tasks/get`` reads the result."""
    store = MemoryEventStore()
    first = build(store)
    async with first.http_server() as url, client(url) as c:
        handle = await c.session.call_tool(
            "refund", {"amount": 250}, allow_claimed=True
        )
    assert isinstance(handle, TaskHandle)
    task_id = handle.task_id
    again = build(store)  # the restarted serving process: nothing in memory
    session_id = await _when_asked(store)
    assert task_id.startswith(f"{session_id}/")
    await decide_pending(
        store, session_id, again.resume, approved=True, by="dana", note=None
    )
    async with again.http_server() as url, client(url) as c:
        result = await wait_task(c.session, task_id)
    assert ("refunded 250", False) == text_of(result)


def _cli(*args: str, store: str) -> str:
    import subprocess

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


async def test_s10_over_redis_a_person_decides_with_the_cli_between_two_servers(
    redis_url: str,
) -> None:
    """S10, R18: a stdio serving process records the task in Redis and exits;
    ``helmlog asks`` lists it, ``helmlog approve`` decides it; a new serving
    process answers ``tasks/get`` with the real result."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.unit.gateway.task_server"],
        cwd=str(ROOT),
        env={"HELMLOG_STORE": redis_url, "PYTHONPATH": str(ROOT)},
    )
    async with client(server) as c:
        handle = await c.session.call_tool(
            "refund", {"amount": 250}, allow_claimed=True
        )
    assert isinstance(handle, TaskHandle)
    task_id = handle.task_id
    session_id = task_id.partition("/")[0]
    listed = await anyio.to_thread.run_sync(
        lambda: _cli("asks", "--json", store=redis_url)
    )
    assert [(session_id, "refund", "four-eyes")] == [
        (q["session_id"], q["tool_name"], q["middleware"]) for q in json.loads(listed)
    ]
    approved = await anyio.to_thread.run_sync(
        lambda: _cli(
            "approve",
            session_id,
            "--agent",
            "tests.unit.gateway.task_server:build",
            store=redis_url,
        )
    )
    assert "refunded 250" == approved.strip()
    async with client(server) as c:
        result = await wait_task(c.session, task_id)
    assert ("refunded 250", False) == text_of(result)


# -- the caller's identity across the pause ---------------------------------------


def _as(client_id: str) -> Any:
    """Serve what follows as the caller ``client_id`` (S2: its access token)."""
    user = AuthenticatedUser(
        AccessToken(token=f"t-{client_id}", client_id=client_id, scopes=["refunds"])
    )
    return auth_context_var.set(user)


async def test_s10_after_an_approval_the_later_links_see_the_caller_s_identity() -> (
    None
):
    """S10, S2, G62: the pause records the caller's identity; the person's
    approval resumes the walk with it, so the links after the asker see the
    caller, not ``None``; the outcome is read back by that caller only."""
    seen: list[Any] = []

    def spy(call: Any) -> Any:
        seen.append(call.identity)
        return allow()

    served = mcp_serve(
        [Tool("refund", "Refund an order.", REFUND_SCHEMA, _refund)],
        name="desk",
        tool_middleware=[
            ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
            ToolMiddleware(name="spy", on_tool_call=spy),
        ],
        store=MemoryEventStore(),
    )
    reset = _as("ops-bot")
    try:
        async with connected(served, "legacy") as c:
            ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 250}))[0])
    finally:
        auth_context_var.reset(reset)
    session_id = ask_id.partition("/")[0]
    await decide_pending(
        served.store, session_id, served.resume, approved=True, by="dana", note=None
    )
    caller = {"client_id": "ops-bot", "scopes": ["refunds"]}
    assert [caller] == seen
    recorded = fold(r.decode() for r in await served.store.read(session_id))
    assert caller == recorded.identity
    meta: Any = {ASK_META: ask_id}
    reads: list[tuple[str, bool]] = []
    for who in ("intruder", "ops-bot"):
        reset = _as(who)
        try:
            async with connected(served, "legacy") as c:
                reads.append(
                    text_of(await c.call_tool("refund", {"amount": 250}, meta=meta))
                )
        finally:
            auth_context_var.reset(reset)
    assert [
        (f"ask '{ask_id}' was made by another caller", True),
        ("refunded 250", False),
    ] == reads
    reset = _as("intruder")
    try:
        async with client(served.memory_streams()) as c:
            with pytest.raises(MCPError) as raised:
                await get_task(c.session, ask_id)
    finally:
        auth_context_var.reset(reset)
    assert types.INVALID_PARAMS == raised.value.code


async def test_s10_a_handshake_era_client_that_declares_tasks_gets_s4() -> None:
    """S10, S4: the tasks extension declared on the ``initialize`` handshake
    (as the MCP Inspector 2.12 declares it; raw wire, Streamable HTTP) is no
    task: that revision's ``tools/call`` cannot carry one, so the client
    gets S4's tool error naming the ask, not an invalid result."""
    served = build(MemoryEventStore())
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"extensions": {TASKS: {}}},
        "clientInfo": {"name": "raw-handshake", "version": "1"},
    }
    async with served.http_server() as url, httpx2.AsyncClient() as http:
        opened = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
            headers=headers,
        )
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        await http.post(
            url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=session,
        )
        call = {"name": "refund", "arguments": {"amount": 250}}
        answered = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
            headers=session,
        )
    data = [
        json.loads(line[len("data:") :])
        for line in answered.text.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]
    result = data[-1]["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(
        "middleware 'four-eyes' asked a person to decide"
    )
    assert 1 == len(await pending_questions(served.store))


def test_s10_agent_may_name_an_mcp_serve_result_rebuilt_on_the_store() -> None:
    """S10: ``--agent module:attr`` naming an ``mcp_serve`` result loads its
    ``on_store``: the same tools, chain and name on the command's store; an
    attribute that is neither a function nor served tools is refused."""
    from helmlog._asks import load_factory

    store = MemoryEventStore()
    rebuilt = load_factory("tests.unit.gateway.task_server:DESK")(store)
    assert isinstance(rebuilt, ServedTools)
    assert (store, "desk", ["refund"], ["four-eyes"]) == (
        rebuilt.store,
        rebuilt.name,
        list(rebuilt.tools),
        [link.name for link in rebuilt.links],
    )
    with pytest.raises(ValueError, match="has no function 'REFUND_SCHEMA'"):
        load_factory("tests.unit.gateway.task_server:REFUND_SCHEMA")


async def test_s4_an_approved_call_still_running_reads_as_decided_not_ended() -> None:
    """S4, R7: while the approved tool runs (``tool.dispatched`` recorded, no
    end yet), a read says the ask is decided and its call has not ended; the
    tool runs once and the next read returns its result."""
    release = anyio.Event()
    started = anyio.Event()
    ran: list[int] = []

    async def slow_refund(amount: int) -> str:
        ran.append(amount)
        started.set()
        await release.wait()
        return f"refunded {amount}"

    served = mcp_serve(
        [Tool("refund", "Refund an order.", REFUND_SCHEMA, slow_refund)],
        name="desk",
        tool_middleware=[ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes)],
        store=MemoryEventStore(),
    )
    async with connected(served, "legacy") as c:
        asked = await c.call_tool("refund", {"amount": 250})
        ask_id = _ask_id(text_of(asked)[0])
        meta: Any = {ASK_META: ask_id}
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                _person(served.store, served.resume, approved=True),
            )
            await started.wait()
            running = text_of(await c.call_tool("refund", {"amount": 250}, meta=meta))
            release.set()
        done = text_of(await c.call_tool("refund", {"amount": 250}, meta=meta))
    assert (
        f"ask '{ask_id}' is decided; its call has not ended: approved by dana; "
        "the tool is running",
        True,
    ) == running
    assert ("refunded 250", False) == done
    assert [250] == ran


async def test_s4_the_asking_call_reads_back_though_a_link_changed_its_arguments() -> (
    None
):
    """S4, G60: a link before the asker capped the amount, so the pause holds
    other arguments than the client sent; the client's repeated call (its
    own arguments) still reads the approved outcome, of the capped call."""
    cap = ToolMiddleware(
        name="cap",
        on_tool_call=lambda c: allow({"amount": min(c.args["amount"], 300)}, "cap"),
    )
    served = mcp_serve(
        [Tool("refund", "Refund an order.", REFUND_SCHEMA, _refund)],
        name="desk",
        tool_middleware=[
            cap,
            ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
        ],
        store=MemoryEventStore(),
    )
    async with connected(served, "legacy") as c:
        ask_id = _ask_id(text_of(await c.call_tool("refund", {"amount": 500}))[0])
        await decide_pending(
            served.store,
            ask_id.partition("/")[0],
            served.resume,
            approved=True,
            by="dana",
            note=None,
        )
        read = await c.call_tool("refund", {"amount": 500}, meta={ASK_META: ask_id})
    assert ("refunded 300", False) == text_of(read)
