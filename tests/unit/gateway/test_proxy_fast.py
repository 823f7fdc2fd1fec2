"""The proxy's fast paths for ``tools/call`` answer exactly as the SDK path does.

Pattern: the same raw JSON-RPC exchange run twice against one proxy, fast
         paths on and off (``proxy.fast_calls``), in memory, over Streamable
         HTTP and on a subprocess's stdio pipes; the answers are compared whole.
Role:    differential tests of the JSON path (``_routing.py``'s same-route
         rule), the upstream POST (``gateway/fast/upstream.py``) and, on the
         pipes, the serving lane too (its own: ``test_proxy_lane.py``).
Emits:   nothing.

Laws: P25 (results, tool errors, hidden tools, renames, ``_meta``, upstream
errors, malformed params and blocks answer the same; a cancel reaches the
upstream; a progress token takes the SDK path), P20 (the same audit rows).

Why raw messages: the SDK client would parse both answers into one model
and hide a difference.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from helmlog.events import ProxyCallFinished
from helmlog.gateway import McpProxy, ProxyAudit

from ...polling import until
from .http_helpers import INITIALIZE, answer_of, post
from .proxy_helpers import RequestIds, proxied
from .proxy_stdio_server import options
from .upstream_server import CALLS, CANCELLED, UPSTREAM

ROOT = Path(__file__).resolve().parents[3]
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CASES: list[dict[str, Any] | None] = [
    {"name": "echo", "arguments": {"word": "hi"}},
    {"name": "explode", "arguments": {}},
    {"name": "delete_everything"},
    {"name": "alias", "arguments": {"word": "x"}},
    {"name": "meta_seen", "arguments": {}, "_meta": {"helmlog": {"agent": "a"}}},
    {"name": 5},
    {"name": "echo", "arguments": [1]},
    None,
]
Answers = dict[Any, Any]
# The cases whose params the SDK's server accepts; the rest it answers itself
# (-32602) before any handler, so neither path sees them (issue 26).
VALID = len(CASES) - 3


def _requests(cases: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    out = []
    for n, params in enumerate(cases, 1):
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
        if params is not None:
            request["params"] = params
        out.append(request)
    return out


def _spied(proxy: McpProxy) -> list[Any]:
    """The sessions ``proxy`` opens, kept past their close (for their lane count)."""
    opened: list[Any] = []
    open_session = proxy.open_session

    def keep(**kw: Any) -> Any:
        opened.append(open_session(**kw))
        return opened[-1]

    proxy.open_session = keep  # type: ignore[method-assign]
    return opened


def _message(obj: dict[str, Any]) -> SessionMessage:
    return SessionMessage(jsonrpc_message_adapter.validate_python(obj))


async def _memory(
    proxy: McpProxy, cases: list[dict[str, Any] | None]
) -> tuple[Answers, int]:
    """The answers to ``cases`` in memory, and how many the lane answered."""
    opened = _spied(proxy)
    answers: Answers = {}

    async def read(stream: Any) -> None:
        async for item in stream:
            body = item.message.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            answers[body["id"]] = body

    async with (
        create_client_server_memory_streams() as ((c_read, c_write), server),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(proxy.run, *server)
        tg.start_soon(read, c_read)
        await c_write.send(_message({**INITIALIZE, "id": 0}))
        await until("the initialize answer", lambda: 0 in answers, 20.0)
        await c_write.send(_message(INITIALIZED))
        for request in _requests(cases):
            await c_write.send(_message(request))
        await until("every answer", lambda: len(answers) == len(cases) + 1, 20.0)
        tg.cancel_scope.cancel()
    del answers[0]
    return answers, opened[0].answered


async def _http(proxy: McpProxy) -> tuple[Answers, int]:
    """The answers to ``CASES`` over Streamable HTTP (raw POSTs)."""
    answers: Answers = {}
    async with proxy.http_server() as url:
        init = await post(url, INITIALIZE)
        session = {
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        await post(url, INITIALIZED, session)
        for request in _requests(CASES):
            answer = await post(url, request, session)
            kind = answer.headers["content-type"]
            answers[request["id"]] = (answer.status_code, kind, answer_of(answer))
        (live,) = proxy.sessions
        answered = live.answered
    return answers, answered


async def _stdio(
    *flags: str,
    tmp: Path,
    sent: list[dict[str, Any]] | None = None,
    expected: int | None = None,
) -> tuple[Answers, int]:
    """The answers to ``sent`` (``CASES``) from a proxy subprocess on real pipes."""
    count = tmp / f"answered{'-'.join(flags)}"
    command = [sys.executable, "-m", "tests.unit.gateway.proxy_stdio_server"]
    command += [*flags, "--answered", str(count)]
    answers: Answers = {}
    async with await anyio.open_process(command, cwd=ROOT) as process:
        assert process.stdin is not None and process.stdout is not None
        sent = sent if sent is not None else _requests(CASES)
        if expected is None:
            expected = sum(1 for m in sent if "id" in m)
        expected += 1  # the initialize
        lines = [{**INITIALIZE, "id": 0}, INITIALIZED, *sent]
        pending = b""
        await process.stdin.send(json.dumps(lines[0]).encode() + b"\n")
        with anyio.fail_after(30):
            while len(answers) < expected:
                pending += await process.stdout.receive()
                *done, pending = pending.split(b"\n")
                for line in done:
                    body = json.loads(line)
                    answers[body["id"]] = body
                    if body["id"] == 0:
                        rest = b"".join(
                            json.dumps(x).encode() + b"\n" for x in lines[1:]
                        )
                        await process.stdin.send(rest)
            await process.stdin.aclose()
            await process.wait()
    del answers[0]
    return answers, int(count.read_text())


def _sdk(proxy: McpProxy) -> McpProxy:
    proxy.fast_calls = False
    return proxy


async def test_p25_the_fast_lane_answers_as_the_sdk_path_in_memory() -> None:
    """P25: success, tool error, hidden, bad params: the same answers, lane or not."""
    for middleware in (False, True):
        async with McpProxy(UPSTREAM, **options(middleware)) as proxy:
            fast, answered = await _memory(proxy, CASES)
        async with _sdk(McpProxy(UPSTREAM, **options(middleware))) as proxy:
            sdk, untouched = await _memory(proxy, CASES)
        json_path = 0 if middleware else VALID  # a layer takes the model path
        assert (sdk, 0, json_path) == (fast, untouched, answered)
        assert "HI" == fast[1]["result"]["content"][0]["text"]
        assert fast[2]["result"]["isError"]
        assert {"rejection_reason": "TOOL_HIDDEN"} == fast[3]["error"]["data"]
        renamed = fast[4]["result"]["content"][0]["text"]
        assert ("X" if middleware else "Unknown tool: alias") in renamed
        assert '{"helmlog": {"agent": "a"}}' == fast[5]["result"]["content"][0]["text"]
        invalid = {"code": -32602, "message": "Invalid request parameters", "data": ""}
        assert [invalid] * 3 == [fast[n]["error"] for n in (6, 7, 8)]


async def test_p25_the_fast_lane_answers_as_the_sdk_path_over_http() -> None:
    """P25 over HTTP: the lane's JSON answers are the SDK JSON transport's."""
    for middleware in (False, True):
        async with McpProxy(UPSTREAM, **options(middleware)) as proxy:
            fast, answered = await _http(proxy)
        async with _sdk(McpProxy(UPSTREAM, **options(middleware))) as proxy:
            sdk, untouched = await _http(proxy)
        json_path = 0 if middleware else VALID  # a layer takes the model path
        assert (sdk, 0, json_path) == (fast, untouched, answered)
        assert "HI" == fast[1][2]["result"]["content"][0]["text"]
        assert {200} == {status for status, _, _ in fast.values()}


async def test_p25_the_fast_lane_answers_as_the_sdk_path_on_stdio_pipes(
    tmp_path: Path,
) -> None:
    """P25 on real pipes: the lane's lines are the SDK transport's, parsed."""
    fast, answered = await _stdio(tmp=tmp_path)
    sdk, untouched = await _stdio("--sdk", tmp=tmp_path)
    renamed, _ = await _stdio("--middleware", tmp=tmp_path)
    assert (sdk, 0, VALID) == (fast, untouched, answered)
    assert "HI" == fast[1]["result"]["content"][0]["text"]
    assert "X" == renamed[4]["result"]["content"][0]["text"]


async def test_p25_a_cancel_right_after_a_lane_call_on_stdio_cancels_it(
    tmp_path: Path,
) -> None:
    """P25: a cancel line right behind its call finds the call and cancels it,
    on both paths: the cancelled call is never answered (the v2 SDK follows
    the spec; v1 answered it with code 0), and the next call is."""
    call = {"name": "sleepy", "arguments": {"seconds": 30}}
    cancel = {"requestId": 1, "reason": "enough"}
    echo = {"name": "echo", "arguments": {"word": "after"}}
    sent = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": echo},
    ]
    fast, answered = await _stdio(tmp=tmp_path, sent=sent, expected=1)
    sdk, untouched = await _stdio("--sdk", tmp=tmp_path, sent=sent, expected=1)
    assert ([2], [2], 2, 0) == (list(fast), list(sdk), answered, untouched)
    assert "AFTER" == fast[2]["result"]["content"][0]["text"]


async def _no_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[])


def _erring() -> Server[Any]:
    async def refuse(ctx: Any, params: Any) -> Any:
        raise MCPError(-32042, "upstream says no", {"x": 1})

    return Server("erring", on_call_tool=refuse, on_list_tools=_no_tools)


async def test_p25_an_upstreams_own_error_is_answered_unchanged_on_the_lane() -> None:
    """P25: an upstream's JSON-RPC error is answered unchanged, lane or not."""
    cases: list[dict[str, Any] | None] = [{"name": "any", "arguments": {}}]
    async with McpProxy(_erring()) as proxy:
        fast, answered = await _memory(proxy, cases)
    async with _sdk(McpProxy(_erring())) as proxy:
        sdk, _ = await _memory(proxy, cases)
    error = {"code": -32042, "message": "upstream says no", "data": {"x": 1}}
    assert (sdk, error, 1) == (fast, fast[1]["error"], answered)


def _malformed(block: dict[str, Any]) -> Server[Any]:
    """An upstream whose result holds ``block`` as it is, unvalidated (a
    middleware's answer is the one thing the v2 SDK server does not check)."""

    async def unused(ctx: Any, params: Any) -> Any:
        raise AssertionError("the middleware answers")

    server: Server[Any] = Server(
        "malformed", on_call_tool=unused, on_list_tools=_no_tools
    )

    async def answer(ctx: Any, call_next: Any) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        return {"content": [block], "isError": False}

    server.middleware.append(answer)
    return server


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic, on the raw block
@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": 123},
        {"type": "image", "data": "aGk=", "mimeType": None},
        {"type": "text", "text": "hi", "annotations": {"priority": "high"}},
    ],
)
async def test_p25_a_malformed_upstream_block_is_answered_as_the_sdk_path(
    block: dict[str, Any],
) -> None:
    """P25: a content block of a plain type with a field of the wrong type
    never reaches the client on the lane: it answers as the SDK path does."""
    cases: list[dict[str, Any] | None] = [{"name": "any", "arguments": {}}]
    async with McpProxy(_malformed(block)) as proxy:
        fast, answered = await _memory(proxy, cases)
    async with _sdk(McpProxy(_malformed(block))) as proxy:
        sdk, _ = await _memory(proxy, cases)
    assert (_unnamed(sdk), 1) == (_unnamed(fast), answered)
    assert "result" not in fast[1] or fast[1]["result"].get("isError") is True


def _unnamed(answers: dict[Any, Any]) -> dict[Any, Any]:
    """Answers with each withheld error's id (fresh per error, H4) blanked."""
    text = json.dumps(answers, sort_keys=True)
    return dict(json.loads(re.sub(r"\b[0-9a-f]{32}\b", "<error id>", text)))


def _finished(events: list[Any]) -> list[tuple[Any, ...]]:
    rows = [
        (
            e.tool,
            e.route,
            e.forwarded_tool,
            e.outcome,
            e.rejection_reason,
            e.input_digest,
            e.output_digest,
            json.dumps(e.output_raw, sort_keys=True),
        )
        for e in events
        if isinstance(e, ProxyCallFinished)
    ]
    return sorted(rows)


async def test_p20_the_lanes_audit_rows_are_the_sdk_paths() -> None:
    """P20: every lane call is audited with the digests and payloads of the SDK path."""
    rows: dict[bool, list[Any]] = {True: [], False: []}
    for fast in (True, False):
        proxy = McpProxy(
            UPSTREAM,
            audit=ProxyAudit(b"the secret", "k1"),
            sensitivity=lambda tool, identity, args: "low",
            on_event=rows[fast].append,
            **options(False),
        )
        proxy.fast_calls = fast
        async with proxy:
            await _memory(proxy, CASES)
    assert 5 == len(_finished(rows[True]))
    assert _finished(rows[False]) == _finished(rows[True])


async def test_p25_a_cancel_of_a_lane_call_over_http_reaches_the_upstream() -> None:
    """P25: notifications/cancelled for an HTTP lane call cancels it upstream."""
    CANCELLED.clear()
    CALLS.clear()
    failures: list[MCPError] = []
    proxy = McpProxy(UPSTREAM)
    async with (
        proxy,
        proxy.http_server() as url,
        streamable_http_client(url) as (read, write),
        anyio.create_task_group() as tg,
    ):
        ids = RequestIds(write)
        async with ClientSession(read, ids) as client:
            await client.initialize()

            async def call() -> None:
                try:
                    await client.call_tool("sleepy_noted", {"seconds": 30})
                except MCPError as exc:
                    failures.append(exc)

            tg.start_soon(call)
            await until("the upstream call", lambda: "sleepy_noted" in CALLS, 20.0)
            (live,) = proxy.sessions
            notification = types.CancelledNotification(
                params=types.CancelledNotificationParams(
                    request_id=ids.sent["tools/call"]
                )
            )
            await client.send_notification(notification)
            await until("the cancel", lambda: bool(CANCELLED) and bool(failures), 20.0)
        tg.cancel_scope.cancel()
    answered = live.answered
    assert (["sleepy_noted"], ["Request cancelled"], 1) == (
        CANCELLED,
        [f.error.message for f in failures],
        answered,
    )


async def test_p25_a_progress_carrying_call_takes_the_sdk_path_and_gets_progress() -> (
    None
):
    """P25: a call with a progress token gets its progress; the lane skips it."""
    got: list[str | None] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        got.append(message)

    proxy = McpProxy(UPSTREAM)
    opened = _spied(proxy)
    async with proxied(proxy) as client:
        out = await client.call_tool("slow", {"steps": 2}, progress_callback=progress)
        after_progress = opened[0].answered
        await client.call_tool("echo", {"word": "hi"})
        after_plain = opened[0].answered
    assert "done 2" == out.content[0].text  # type: ignore[union-attr]
    assert (["step 1", "step 2"], 0, 1) == (got, after_progress, after_plain)


async def _ended_under_a_call(fast: bool) -> tuple[int, Any]:
    proxy = McpProxy(UPSTREAM, session_ttl_s=1.0)
    proxy.fast_calls = fast
    async with proxy, proxy.http_server() as url:
        init = await post(url, INITIALIZE)
        session = {
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        await post(url, INITIALIZED, session)
        call = {"name": "sleepy", "arguments": {"seconds": 30}}
        request = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call}
        answer = await post(url, request, session)
    return answer.status_code, answer_of(answer)


async def test_p17_a_session_ending_under_a_lane_call_answers_as_the_sdk_path() -> None:
    """P17, P25: the TTL ending a session mid-call answers as the SDK path does."""
    fast = await _ended_under_a_call(True)
    sdk = await _ended_under_a_call(False)
    assert sdk == fast
    # v2: the call's SSE answer (200, sent at once) ends with the SDK's error
    # for a closed connection, where v1's JSON transport answered a 500
    closed = {"code": types.CONNECTION_CLOSED, "message": "Connection closed"}
    assert (200, closed) == (fast[0], fast[1]["error"])


async def test_p25_p20_the_upstream_fast_path_answers_and_audits_as_the_sdk_path() -> (
    None
):
    """P25, P20 (issue 26): with a Streamable HTTP upstream, the upstream fast
    path (``gateway/fast/upstream.py``) and the SDK's client give the proxy's clients
    the same answers and the audit the same rows, with and without a layer."""
    from .http_helpers import http_upstream

    with http_upstream() as url:
        for middleware in (False, True):
            rows: dict[bool, list[Any]] = {True: [], False: []}
            answers: dict[bool, Answers] = {}
            for fast in (True, False):
                proxy = McpProxy(
                    url,
                    audit=ProxyAudit(b"the secret", "k1"),
                    sensitivity=lambda tool, identity, args: "low",
                    on_event=rows[fast].append,
                    **options(middleware),
                )
                async with proxy:
                    proxy.upstream.fast = fast
                    answers[fast], _ = await _memory(proxy, CASES)
                    posts = proxy.upstream._posts
                    assert posts is not None
                    assert (posts.posted > 0) == fast
            assert answers[False] == answers[True]
            assert _finished(rows[False]) == _finished(rows[True])
            assert "HI" == answers[True][1]["result"]["content"][0]["text"]


async def test_p25_p20_the_stdio_fast_path_answers_and_audits_as_the_sdk_path() -> None:
    """P25, P20 (issue 26): with a stdio upstream, the raw calls on the child's
    pipes (``gateway/fast/stdio_upstream.py``) and the SDK's ``stdio_client``
    and client give the proxy's clients the same answers and the audit the
    same rows, with and without a layer."""
    command = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]
    for middleware in (False, True):
        rows: dict[bool, list[Any]] = {True: [], False: []}
        answers: dict[bool, Answers] = {}
        for fast in (True, False):
            proxy = McpProxy(
                command,
                audit=ProxyAudit(b"the secret", "k1"),
                sensitivity=lambda tool, identity, args: "low",
                on_event=rows[fast].append,
                **options(middleware),
            )
            proxy.upstream.fast = fast  # before open: off is the SDK's transport
            async with proxy:
                answers[fast], _ = await _memory(proxy, CASES)
                raw = proxy.upstream._raw
                assert (raw is not None and raw.taken > 0) == fast
        assert _unnamed(answers[False]) == _unnamed(answers[True])
        assert _finished(rows[False]) == _finished(rows[True])
        assert "HI" == answers[True][1]["result"]["content"][0]["text"]
