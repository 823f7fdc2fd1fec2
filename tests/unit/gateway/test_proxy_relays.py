"""P25's relays through a live proxy: cancellation upstream, list_changed out.

Pattern: the in-process FastMCP upstream behind the proxy, real SDK client
         sessions in front of it (in memory and over Streamable HTTP).
Role:    unit tests for ``gateway/upstream/_upstream.py``'s cancel relay and
         ``ProxySession.notify``.
Emits:   nothing.

Laws: P25 (a client's ``notifications/cancelled`` reaches the upstream under
the id the upstream request went out with, and the upstream's work stops;
``list_changed`` reaches every live session, one idle since initialize
included, over memory streams and over HTTP).
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams

from helmlog.gateway import McpProxy

from ...polling import until
from .http_helpers import INITIALIZE, http_client, http_upstream, post
from .proxy_helpers import RequestIds, proxied, through
from .upstream_server import CALLS, CANCELLED, UPSTREAM


async def test_p25_a_client_cancel_stops_the_upstream_call() -> None:
    """P25: notifications/cancelled from the client cancels the upstream's work."""
    CANCELLED.clear()
    CALLS.clear()
    failures: list[BaseException] = []
    proxy = McpProxy(UPSTREAM)
    async with (
        proxy,
        create_client_server_memory_streams() as ((c_read, c_write), server_streams),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(proxy.run, *server_streams)
        ids = RequestIds(c_write)
        async with ClientSession(c_read, ids) as client:
            await client.initialize()

            async def call() -> None:
                try:
                    await client.call_tool("sleepy_noted", {"seconds": 30})
                except MCPError as exc:  # the cancelled request's error answer
                    failures.append(exc)

            tg.start_soon(call)
            await until("the upstream call", lambda: "sleepy_noted" in CALLS, 10.0)
            call_id = ids.sent["tools/call"]
            await client.send_notification(
                types.CancelledNotification(
                    params=types.CancelledNotificationParams(request_id=call_id)
                )
            )
            await until("the upstream's cancellation", lambda: bool(CANCELLED), 10.0)
        tg.cancel_scope.cancel()
    assert ["sleepy_noted"] == CANCELLED


def _on_list_changed(seen: list[str], tag: str) -> Any:
    async def on(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message, types.ToolListChangedNotification
        ):
            seen.append(tag)

    return on


async def test_p25_list_changed_reaches_a_session_idle_since_initialize() -> None:
    """P25: a session that sent nothing after initialize still gets list_changed."""
    seen: list[str] = []
    proxy = McpProxy(UPSTREAM)
    async with (
        proxy,
        through(proxy, message_handler=_on_list_changed(seen, "idle")),
        through(proxy, message_handler=_on_list_changed(seen, "caller")) as caller,
    ):
        await caller.call_tool("announce", {})
        await until("both sessions", lambda: sorted(seen) == ["caller", "idle"], 10.0)
    assert ["caller", "idle"] == sorted(seen)


async def test_p25_list_changed_reaches_an_idle_http_session() -> None:
    """P25 over HTTP: the idle session gets it on its standalone GET stream."""
    seen: list[str] = []
    proxy = McpProxy(UPSTREAM)
    async with (
        proxy,
        proxy.http_server() as url,
        http_client(url, message_handler=_on_list_changed(seen, "idle")),
        http_client(url, message_handler=_on_list_changed(seen, "caller")) as caller,
    ):
        # The clients open their GET streams after initialize, in their own
        # time: announce again until both have heard one.
        async def both_heard() -> bool:
            if sorted(set(seen)) == ["caller", "idle"]:
                return True
            await caller.call_tool("announce", {})
            return False

        await until("both sessions", both_heard, 10)
    assert ["caller", "idle"] == sorted(set(seen))


async def test_p25_progress_is_relayed_over_http_and_plain_calls_answer_json() -> None:
    """P25 over HTTP: a progress token gets its progress on the SSE answer; a
    plain call answers too (issue 26: every answer is the SDK transport's SSE)."""
    got: list[str | None] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        got.append(message)

    proxy = McpProxy(UPSTREAM)
    async with proxy, proxy.http_server() as url:
        async with http_client(url) as client:
            out = await client.call_tool(
                "slow", {"steps": 2}, progress_callback=progress
            )
            plain = await client.call_tool("echo", {"word": "hi"})
        init = await post(url, INITIALIZE)
        session = {
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        await post(
            url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session
        )
        call = {"name": "slow", "arguments": {"steps": 1}}
        answers = [
            await post(
                url,
                {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": p},
                session,
            )
            for n, p in ((2, call), (3, {**call, "_meta": {"progressToken": "t"}}))
        ]
    assert "done 2" == out.content[0].text  # type: ignore[union-attr]
    assert "HI" == plain.content[0].text  # type: ignore[union-attr]
    assert ["step 1", "step 2"] == got
    kinds = [a.headers["content-type"].split(";")[0] for a in answers]
    assert ["text/event-stream", "text/event-stream"] == kinds
    assert '"text":"done1"' in answers[0].text.replace(" ", "")
    assert '"progressToken":"t"' not in answers[0].text.replace(" ", "")
    assert '"progressToken":"t"' in answers[1].text.replace(" ", "")


async def test_p25_an_http_upstreams_progress_and_list_changed_are_relayed() -> None:
    """P25 with a Streamable HTTP upstream: progress, list_changed, plain calls."""
    got: list[str | None] = []
    seen: list[str] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        got.append(message)

    with http_upstream() as upstream_url:
        proxy = McpProxy(upstream_url)
        async with (
            proxy,
            through(proxy, message_handler=_on_list_changed(seen, "idle")),
            through(proxy, message_handler=_on_list_changed(seen, "caller")) as caller,
        ):
            out = await caller.call_tool(
                "slow", {"steps": 2}, progress_callback=progress
            )
            plain = [await caller.call_tool("echo", {"word": w}) for w in ("a", "b")]

            async def both_heard() -> bool:
                if sorted(set(seen)) == ["caller", "idle"]:
                    return True
                await caller.call_tool("announce", {})
                return False

            await until("list_changed", both_heard, 10)
    assert "done 2" == out.content[0].text  # type: ignore[union-attr]
    assert ["step 1", "step 2"] == got
    assert ["A", "B"] == [p.content[0].text for p in plain]  # type: ignore[union-attr]
    assert ["caller", "idle"] == sorted(set(seen))


async def test_p25_an_upstream_stream_cut_before_its_reply_resumes() -> None:
    """P25: the upstream drops its reply stream; the link resumes with Last-Event-ID."""
    got: list[str | None] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        got.append(message)

    with http_upstream("--resumable") as upstream_url:
        async with proxied(McpProxy(upstream_url)) as client:
            out = await client.call_tool("cut", {}, progress_callback=progress)
    assert "answered after the cut" == out.content[0].text  # type: ignore[union-attr]
    assert ["before the cut", "after the cut"] == got
