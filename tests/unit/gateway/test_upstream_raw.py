"""``Upstream.call_raw`` against real SDK servers: stdio, Streamable HTTP, in process.

Pattern: one parametrized fixture opens an ``Upstream`` to the MCPServer test
         server as a stdio subprocess, as a Streamable HTTP subprocess (the
         SDK's client, or one given by an ``http_client`` factory) and in
         process; each test runs on each.
Role:    unit tests for ``gateway/upstream/_upstream.py``, ``upstream/_stdio.py``
         and ``upstream/_http.py``.
Emits:   nothing.

Laws: P25 (a cancelled raw call reaches the upstream as
``notifications/cancelled``; list_changed and progress still reach the SDK
session while raw calls run), issue 10 item 8 (the raw path returns what
``request`` returns), and an upstream that dies mid-call fails every pending
call as an MCP error at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_MODERN_VERSION

from helmlog.gateway.upstream import Upstream

from ...polling import until
from .http_helpers import http_upstream
from .upstream_server import UPSTREAM

STDIO = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]


class Opened:
    """An open ``Upstream`` and the notifications it has passed on."""

    def __init__(self, upstream: Upstream, notes: list[Any], kind: str) -> None:
        self.upstream = upstream
        self.notes = notes
        self.kind = kind


# "httpx": the HTTP upstream through an ``http_client`` factory's own httpx2
# client (the one stack http:// and https:// share, where credentials plug
# in); "json": a server answering with JSON bodies.
KINDS = pytest.mark.parametrize("kind", ["stdio", "http", "httpx", "json", "memory"])


@asynccontextmanager
async def opened(kind: str) -> AsyncIterator[Opened]:
    """An initialized upstream connection over the transport ``kind``."""
    notes: list[Any] = []

    async def on(note: types.ServerNotification) -> None:
        notes.append(note)

    with contextlib.ExitStack() as stack:
        target: Any = UPSTREAM if kind == "memory" else STDIO
        if kind in ("http", "httpx", "json"):
            extra = ("--json",) if kind == "json" else ()
            target = stack.enter_context(http_upstream(*extra))
        factory = None
        if kind == "httpx":

            def factory() -> httpx2.AsyncClient:
                return httpx2.AsyncClient(headers={"x-test": "1"}, timeout=30)

        upstream = Upstream(target, on, http_client=factory)
        await upstream.open()
        try:
            yield Opened(upstream, notes, kind)
        finally:
            await upstream.close()


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _json(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = result.model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    return _plain(out)


_DEFAULTS = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


def _plain(raw: dict[str, Any]) -> dict[str, Any]:
    """Without the v2 models' 2026-era defaults (``resultType``, the cache
    hints), absent on a handshake-era wire, where the typed result fills them."""
    return {k: v for k, v in raw.items() if _DEFAULTS.get(k, ...) != v}


@KINDS
async def test_a_raw_call_returns_what_request_returns(kind: str) -> None:
    """Item 8: the raw result is the JSON of the typed result, call and list alike."""
    async with opened(kind) as o:
        up = o.upstream
        typed = await up.request(
            types.CallToolRequest(
                params=types.CallToolRequestParams(**_call("echo", word="hi"))
            ),
            types.CallToolResult,
        )
        raw = await up.call_raw("tools/call", _call("echo", word="hi"))
        listed = await up.request(types.ListToolsRequest(), types.ListToolsResult)
        raw_listed = await up.call_raw("tools/list", None)
        assert _json(typed) == _plain(raw)
        assert _json(listed) == _plain(raw_listed)


@KINDS
async def test_an_upstream_error_keeps_its_code_message_and_data(kind: str) -> None:
    """P25: the upstream's own ErrorData reaches the raw caller unchanged."""
    async with opened(kind) as o:
        up = o.upstream
        with pytest.raises(MCPError) as typed:
            await up.request(
                types.ReadResourceRequest(
                    params=types.ReadResourceRequestParams(uri="data://nowhere")  # type: ignore[arg-type]
                ),
                types.ReadResourceResult,
            )
        with pytest.raises(MCPError) as raw:
            await up.call_raw("resources/read", {"uri": "data://nowhere"})
        with pytest.raises(MCPError) as invalid:
            await up.call_raw("tools/call", {"arguments": {}})  # no name
        assert typed.value.error == raw.value.error
        assert (types.INVALID_PARAMS, "") == (
            invalid.value.error.code,
            invalid.value.error.data,
        )


@KINDS
async def test_a_tool_error_is_a_result(kind: str) -> None:
    """A tool that raises answers with ``isError``: a result, not an MCPError."""
    async with opened(kind) as o:
        out = await o.upstream.call_raw("tools/call", _call("explode"))
        assert True is out["isError"]


@KINDS
async def test_raw_and_sdk_calls_interleave_each_with_its_own_answer(kind: str) -> None:
    """Concurrent raw and SDK calls on one connection each get their own reply."""
    async with opened(kind) as o:
        up = o.upstream
        got: dict[str, str] = {}

        async def raw(word: str) -> None:
            out = await up.call_raw("tools/call", _call("echo", word=word))
            got[word] = out["content"][0]["text"]

        async def typed(word: str) -> None:
            out = await up.request(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(**_call("echo", word=word))
                ),
                types.CallToolResult,
            )
            got[word] = out.content[0].text  # type: ignore[union-attr]

        words = [f"w{i}" for i in range(12)]
        async with anyio.create_task_group() as tg:
            for i, word in enumerate(words):
                tg.start_soon(raw if i % 2 else typed, word)
        assert {w: w.upper() for w in words} == got


@KINDS
async def test_p25_a_cancelled_raw_call_is_cancelled_upstream(
    kind: str, tmp_path: Path
) -> None:
    """P25: cancelling the caller sends notifications/cancelled with our id."""
    async with opened(kind) as o:
        mark = tmp_path / "mark"
        up = o.upstream
        with anyio.move_on_after(0.5):
            await up.call_raw(
                "tools/call", _call("sleepy_marked", seconds=30, mark=str(mark))
            )
        await until("the upstream's cancellation", mark.exists, 10.0)
        after = await up.call_raw("tools/call", _call("echo", word="still"))
        assert "cancelled" == mark.read_text()
        assert "STILL" == after["content"][0]["text"]


@KINDS
async def test_a_raw_call_past_its_timeout_is_a_408(kind: str) -> None:
    """``timeout_s`` ends the wait as ``request``'s read timeout does (v2:
    the SDK's REQUEST_TIMEOUT, -32001, where v1 answered 408)."""
    async with opened(kind) as o:
        with pytest.raises(MCPError) as raised:
            await o.upstream.call_raw(
                "tools/call", _call("sleepy", seconds=30), timeout_s=0.2
            )
        assert types.REQUEST_TIMEOUT == raised.value.error.code


@KINDS
async def test_an_upstream_killed_mid_call_fails_every_pending_raw_call(
    kind: str, tmp_path: Path
) -> None:
    """Bad input: the upstream dies; each pending raw call fails with INTERNAL_ERROR."""
    async with opened(kind) as o:
        if o.kind == "memory":
            pytest.skip("an in-process upstream cannot die without the test")
        up = o.upstream
        codes: list[int] = []

        async def pending(call: dict[str, Any]) -> None:
            try:
                await up.call_raw("tools/call", call)
            except MCPError as exc:
                codes.append(exc.error.code)

        with anyio.fail_after(20):  # a hang fails the test rather than the suite
            async with anyio.create_task_group() as tg:
                started = tmp_path / "started"
                call = _call("sleepy_started", seconds=60, mark=str(started))
                tg.start_soon(pending, call)
                await until("the call runs upstream", started.exists, 10)
                tg.start_soon(pending, _call("die"))
        assert [types.INTERNAL_ERROR, types.INTERNAL_ERROR] == codes


@KINDS
async def test_p25_notifications_reach_the_sdk_session_while_raw_calls_run(
    kind: str,
) -> None:
    """P25: list_changed and SDK progress pass; raw progress is the raw call's."""
    async with opened(kind) as o:
        up = o.upstream
        sdk: list[float] = []
        raw: list[tuple[float, float | None, str | None]] = []

        async def on_sdk(p: float, total: float | None, message: str | None) -> None:
            sdk.append(p)

        async def on_raw(p: float, total: float | None, message: str | None) -> None:
            raw.append((p, total, message))

        async def typed_slow() -> None:
            await up.request(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(**_call("slow", steps=3))
                ),
                types.CallToolResult,
                on_sdk,
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(typed_slow)
            announced = await up.call_raw("tools/call", _call("announce"))
            done = await up.call_raw(
                "tools/call", _call("slow", steps=2), progress=on_raw
            )
        await until(
            "list_changed",
            lambda: any(
                isinstance(n, types.ToolListChangedNotification) for n in o.notes
            ),
            10.0,
        )
        assert "announced" == announced["content"][0]["text"]
        assert "done 2" == done["content"][0]["text"]
        # a server answering with JSON bodies sends no progress at all
        json = o.kind == "json"
        assert ([] if json else [1.0, 2.0, 3.0]) == sdk
        assert ([] if json else [(1, 2, "step 1"), (2, 2, "step 2")]) == raw


async def test_p25_a_raw_call_whose_stream_is_cut_resumes_with_last_event_id() -> None:
    """P25: the server cuts the raw call's SSE stream; the reply comes on resume."""
    got: list[float] = []

    async def on_raw(p: float, total: float | None, message: str | None) -> None:
        got.append(p)

    with http_upstream("--resumable") as url:
        upstream = Upstream(url)
        await upstream.open()
        try:
            out = await upstream.call_raw("tools/call", _call("cut"), progress=on_raw)
        finally:
            await upstream.close()
    assert "answered after the cut" == out["content"][0]["text"]
    assert [1.0, 2.0] == got


async def test_a_kept_alive_connection_the_server_closed_is_not_reused() -> None:
    """Item 8: after the server drops an idle connection, the next call still
    works (on httpx2's pool, the one stack; uvicorn's keep-alive is 5 s)."""
    opened: list[Any] = []

    async def note(request: httpx2.Request) -> None:
        opened.append(request.extensions.get("network_stream"))

    def factory() -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=30, event_hooks={"request": [note]})

    with http_upstream() as url:
        upstream = Upstream(url, http_client=factory)
        await upstream.open()
        try:
            await upstream.call_raw("tools/call", _call("echo", word="a"))
            await anyio.sleep(6)  # past uvicorn's keep-alive: it closes the idle one
            out = await upstream.call_raw("tools/call", _call("echo", word="b"))
        finally:
            await upstream.close()
    assert "B" == out["content"][0]["text"]


@KINDS
async def test_closing_the_upstream_fails_a_pending_raw_call_at_once(kind: str) -> None:
    """A raw call still waiting when the upstream is closed fails as INTERNAL_ERROR."""
    async with opened(kind) as o:
        codes: list[int] = []

        async def pending() -> None:
            try:
                await o.upstream.call_raw("tools/call", _call("sleepy", seconds=60))
            except MCPError as exc:
                codes.append(exc.error.code)

        # a plain task: the upstream is closed at the level it was opened at
        task = asyncio.create_task(pending())
        await anyio.sleep(0.2)  # in flight (either way the answer is the same)
        await o.upstream.close()
        with anyio.fail_after(20):  # a hang fails the test rather than the suite
            await task
    assert [types.INTERNAL_ERROR] == codes


FAST_CASES: list[dict[str, Any]] = [
    _call("echo", word="hi"),
    _call("explode"),
    _call("no_such_tool"),
    _call("echo", word=5),
    _call("echo"),
    {"name": "meta_seen", "arguments": {}, "_meta": {"helmlog": {"agent": "a"}}},
    _call("slow", steps=2),
]


async def _answers(up: Upstream) -> list[Any]:
    out: list[Any] = []
    for params in FAST_CASES:
        try:
            out.append(("result", await up.call_raw("tools/call", params)))
        except MCPError as exc:
            out.append(("error", exc.error.model_dump(mode="json")))
        typed = await up.request(
            types.CallToolRequest(params=types.CallToolRequestParams(**params)),
            types.CallToolResult,
        )
        out.append(("typed", _json(typed)))
    return out


@pytest.mark.parametrize("kind", ["http", "httpx", "json"])
async def test_the_fast_path_answers_as_the_sdk_path(kind: str) -> None:
    """P25, issue 26: the fast path's raw POST (``_fast.FastPosts``) and the
    SDK's client give the same answers, results, tool errors and upstream
    errors alike, raw and typed; the fast path did take the calls."""
    async with opened(kind) as o:
        up = o.upstream
        posts = up._posts
        assert posts is not None and posts.ready
        fast = await _answers(up)
        up.fast = False
        sdk = await _answers(up)
    assert sdk == fast
    assert "HI" == fast[0][1]["content"][0]["text"]
    assert "error" == fast[4][0] or fast[4][1].get("isError") is True


RAW_CASES: list[dict[str, Any]] = [
    _call("echo", word="hi"),  # plain (structured: the SDK's {"result": ...})
    _call("explode"),  # a tool error
    _call("no_such_tool"),  # unknown tool
    _call("echo", word=5),  # bad params
    _call("echo"),  # bad params (missing)
    {"name": 5, "arguments": {}},  # bad params (the name)
    {"name": "meta_seen", "arguments": {}, "_meta": {"helmlog": {"agent": "a"}}},
]


def _outcome(exc: MCPError) -> tuple[Any, ...]:
    """An error as a client sees it, the withheld id (fresh per error, H4) blanked."""
    error = exc.error.model_dump(mode="json")
    return ("error", re.sub(r"\b[0-9a-f]{32}\b", "<id>", json.dumps(error)))


async def _raw_answers(up: Upstream, tmp: Path) -> list[Any]:
    """The same calls as the differential runs them: plain cases, raw and
    typed, one with progress, one cancelled, then one killed mid-call."""
    out: list[Any] = []
    for params in RAW_CASES:
        for typed in (False, True):
            try:
                if typed:
                    request = types.CallToolRequest(
                        params=types.CallToolRequestParams.model_validate(params)
                    )
                    result = await up.request(request, types.CallToolResult)
                    out.append(("typed", _json(result)))
                else:
                    out.append(("result", await up.call_raw("tools/call", params)))
            except MCPError as exc:
                out.append(_outcome(exc))
            except ValueError as exc:  # a params model the SDK refuses locally
                out.append(("refused", type(exc).__name__))
    notes: list[tuple[Any, ...]] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        notes.append((p, total, message))

    slow = await up.call_raw("tools/call", _call("slow", steps=3), progress=progress)
    out.append(("progress", slow, notes))
    mark = tmp / f"mark-{up.fast}"
    with anyio.move_on_after(0.5):
        await up.call_raw(
            "tools/call", _call("sleepy_marked", seconds=30, mark=str(mark))
        )
    await until("the upstream's cancellation", mark.exists, 10.0)
    out.append(("cancelled", mark.read_text()))
    out.append(("after", await up.call_raw("tools/call", _call("echo", word="on"))))
    started = tmp / f"started-{up.fast}"
    errors: list[Any] = []

    async def pending(call: dict[str, Any]) -> None:
        try:
            await up.call_raw("tools/call", call)
        except MCPError as exc:
            errors.append(_outcome(exc))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                pending, _call("sleepy_started", seconds=60, mark=str(started))
            )
            await until("the call runs upstream", started.exists, 10)
            tg.start_soon(pending, _call("die"))
    out.append(("killed", errors))
    try:  # the next call starts the child again (P25)
        late = await up.call_raw("tools/call", _call("echo", word="late"))
        out.append(("after death", late))
    except MCPError as exc:
        out.append(("after death", _outcome(exc)))
    return out


@pytest.mark.parametrize("mode", ["legacy", LATEST_MODERN_VERSION])
async def test_p25_the_stdio_fast_path_answers_as_the_sdk_transport(
    mode: str, tmp_path: Path
) -> None:
    """P25, H4 (issue 26): a plain tools/call raw on the child's pipes
    (``gateway/fast/stdio_upstream.py``) and the SDK's ``stdio_client`` and
    client give the same answers in both eras: plain, tool error, unknown
    tool, bad params, _meta, progress, cancelled upstream, the upstream
    killed mid-call (both calls fail) and a call after it (a child started
    again answers it); the fast path took the calls."""
    answers: dict[bool, list[Any]] = {}
    for fast in (True, False):
        up = Upstream(STDIO, mode=mode)
        up.fast = fast  # before open: off is the SDK's own transport
        await up.open()
        try:
            raw = up._raw
            assert (raw is not None and raw.ready) == fast
            answers[fast] = await _raw_answers(up, tmp_path)
            if raw is not None:
                assert raw.taken >= len(RAW_CASES) * 2 + 4
        finally:
            await up.close()
    assert answers[False] == answers[True]
    assert "HI" == answers[True][0][1]["content"][0]["text"]
    assert {"result": "HI"} == answers[True][0][1].get("structuredContent")
    assert ("cancelled", "cancelled") in answers[True]
    (progressed,) = [a for a in answers[True] if a[0] == "progress"]
    assert [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")] == progressed[2]
    killed, after = answers[True][-2:]
    assert 2 == len(killed[1])  # the pending call and the one that killed it
    assert all(types.INTERNAL_ERROR == json.loads(e[1])["code"] for e in killed[1])
    assert "LATE" == after[1]["content"][0]["text"]  # a child started again
