"""P25 and the transports: subprocess upstreams (stdio, HTTP), transparency.

Pattern: real processes (the FastMCP upstream over stdio and over Streamable
         HTTP) behind the proxy, the SDK client in front of it; in-process
         upstreams for the notification laws.
Role:    unit tests for ``gateway/upstream/_upstream.py`` and the proxy's relays.
Emits:   nothing.

Laws: P25 (capabilities mirrored, refusal to start naming the upstream,
progress and cancellation relayed, list_changed fanned out to every live
session), issue 10 item 2 (upstream over stdio and HTTP, clients over stdio
and HTTP), and an upstream that dies mid-call is an MCP error (a stdio one
is started again by the next call).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from helmlog.gateway import McpProxy, UpstreamError
from helmlog.gateway.upstream._pacing import BASE_S

from ...polling import until
from .http_helpers import http_client, http_upstream
from .proxy_helpers import proxied, text_of, through
from .upstream_server import CANCELLED, UPSTREAM

STDIO = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]


async def test_an_upstream_over_stdio_is_proxied() -> None:
    """Item 2: a FastMCP subprocess on stdio, hidden tools applied, calls pass."""
    proxy = McpProxy(STDIO, hidden_tools=["delete_everything"])
    async with proxied(proxy) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        out = await client.call_tool("echo", {"word": "hi"})
    assert "delete_everything" not in names and "echo" in names
    assert "HI" == out.content[0].text  # type: ignore[union-attr]


async def test_an_upstream_over_http_is_proxied_to_an_http_client() -> None:
    """Item 2: FastMCP on Streamable HTTP upstream, the SDK HTTP client in front."""
    with http_upstream() as upstream_url:
        proxy = McpProxy(upstream_url, hidden_resources=["data://secret"])
        async with proxy, proxy.http_server() as url, http_client(url) as client:
            out = await client.call_tool("echo", {"word": "hi"})
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
    assert "HI" == out.content[0].text  # type: ignore[union-attr]
    assert ["data://public"] == listed


async def test_p25_capabilities_are_mirrored_and_the_proxy_names_itself() -> None:
    """P25: the client sees the upstream's capabilities under the proxy's name."""
    proxy = McpProxy(UPSTREAM, name="gate", version="9")
    async with proxy:
        async with through(proxy) as client:
            init = client.server_capabilities
        upstream = proxy.upstream_init.capabilities
    assert upstream == init


async def test_p25_an_upstream_that_does_not_start_is_refused_by_name() -> None:
    """P25: a clear error naming the upstream."""
    proxy = McpProxy([sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(UpstreamError) as raised:
        await proxy.start()
    assert "could not be started" in str(raised.value)
    assert sys.executable in raised.value.upstream


async def test_p25_progress_is_relayed_to_the_caller() -> None:
    """P25: the upstream's progress reaches the client's progress callback."""
    got: list[tuple[float, float | None, str | None]] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        got.append((p, total, message))

    async with proxied(McpProxy(UPSTREAM)) as client:
        out = await client.call_tool("slow", {"steps": 2}, progress_callback=progress)
    assert "done 2" == out.content[0].text  # type: ignore[union-attr]
    assert [(1.0, 2.0, "step 1"), (2.0, 2.0, "step 2")] == got


async def test_p25_list_changed_fans_out_to_every_live_session() -> None:
    """P25: one upstream notification reaches each session."""
    seen: list[str] = []

    def handler(tag: str) -> Any:
        async def on(message: Any) -> None:
            if isinstance(message, types.ServerNotification) and isinstance(
                message, types.ToolListChangedNotification
            ):
                seen.append(tag)

        return on

    proxy = McpProxy(UPSTREAM)
    async with (
        proxy,
        through(proxy, message_handler=handler("a")) as a,
        through(proxy, message_handler=handler("b")) as b,
    ):
        await b.list_tools()
        await a.call_tool("announce", {})
        await until("both sessions heard", lambda: sorted(seen) == ["a", "b"], 10)
    assert ["a", "b"] == sorted(seen)


async def test_p25_cancelling_a_call_relays_the_cancel_upstream() -> None:
    """P25: a call its client abandoned (it gave up and went away) cancels the
    upstream's work, whichever path carried it: the SDK session's or the raw."""
    CANCELLED.clear()
    proxy = McpProxy(UPSTREAM)
    async with proxy:
        async with through(proxy) as client:
            with anyio.move_on_after(0.3):
                await client.call_tool("sleepy_noted", {"seconds": 30})
        await until("the upstream's cancel", lambda: bool(CANCELLED), 10)
    assert ["sleepy_noted"] == CANCELLED


async def test_an_upstream_that_dies_mid_call_is_an_mcp_error() -> None:
    """Bad input: the upstream process exits during a call; the client gets an error."""
    seen: list[Any] = []
    proxy = McpProxy(STDIO, on_telemetry=seen.append)
    async with proxied(proxy) as client:
        with pytest.raises(MCPError):
            await client.call_tool("die", {})
    assert ["error"] == [e.outcome for e in seen]


async def test_p25_a_stdio_upstream_that_exited_is_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """P25: the stdio upstream's child exits mid-call; that call fails and is
    not sent again (it may have run), and the next call starts the child
    again and is answered; one WARNING names the exit."""
    caplog.set_level(logging.INFO, logger="helmlog.proxy")
    proxy = McpProxy(STDIO)
    async with proxied(proxy) as client:
        with pytest.raises(MCPError):
            await client.call_tool("die", {})
        out = await client.call_tool("echo", {"word": "hi"})
        again = await client.call_tool("echo", {"word": "hey"})
        generation = proxy.upstream.generation
    assert ["HI", "HEY"] == [text_of(out), text_of(again)]
    assert 2 == generation  # started twice: at the start, after the exit
    exits = [r for r in caplog.records if "exited; starting it again" in r.message]
    assert [logging.WARNING] == [r.levelno for r in exits]


def _breakable(broken: Path, starts: Path) -> list[str]:
    """The upstream's command, which notes each start as a line in ``starts``
    and fails it (exit 3) while the file ``broken`` exists."""
    script = (
        f'echo >> "{starts}"; if [ -e "{broken}" ]; then exit 3; fi; '
        f'exec "{sys.executable}" -m tests.unit.gateway.upstream_server'
    )
    return ["sh", "-c", script]


async def test_p25_a_stdio_upstream_that_cannot_start_again_is_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """P25, H4: the child exits, and its command fails the next start; that
    call fails with the proxy's withheld error, and the one after, the
    command working again, starts the child and is answered."""
    caplog.set_level(logging.INFO, logger="helmlog.proxy")
    broken = tmp_path / "broken"
    proxy = McpProxy(_breakable(broken, tmp_path / "starts"))
    async with proxied(proxy) as client:
        broken.touch()
        with pytest.raises(MCPError):
            await client.call_tool("die", {})
        with pytest.raises(MCPError) as refused:
            await client.call_tool("echo", {"word": "hi"})
        broken.unlink()
        out = await client.call_tool("echo", {"word": "hi"})
    said = refused.value.error.message
    assert said.startswith("the upstream MCP server went away (error id")
    assert "HI" == text_of(out)
    retried = [r for r in caplog.records if "at the last attempt" in r.message]
    assert [logging.WARNING] == [r.levelno for r in retried]


async def test_p25_a_crash_looping_upstream_is_not_started_by_every_request(
    tmp_path: Path,
) -> None:
    """P25, H4: the child exits and its command fails every start: a burst
    of calls starts it twice (at once, then once more), the rest are refused
    with the withheld error while the wait lasts; once the command works
    again and the wait has passed, the next call starts it and is answered."""
    broken, starts = tmp_path / "broken", tmp_path / "starts"
    proxy = McpProxy(_breakable(broken, starts))
    async with proxied(proxy) as client:
        broken.touch()
        with pytest.raises(MCPError):
            await client.call_tool("die", {})
        said = []
        for _ in range(8):
            with pytest.raises(MCPError) as refused:
                await client.call_tool("echo", {"word": "hi"})
            said.append(refused.value.error.message)
        burst = len(starts.read_text().splitlines()) - 1  # the first start
        broken.unlink()

        async def answered() -> types.CallToolResult | None:
            try:
                return await client.call_tool("echo", {"word": "hi"})
            except MCPError:
                return None  # refused while the wait lasts

        out: Any = await until("the child started again", answered, every=BASE_S / 5)
    # At once, once more, and (on a machine slow enough that the refusals
    # outlast BASE_S) at most one more: never once a request.
    assert 2 <= burst <= 3
    assert all(
        m.startswith("the upstream MCP server went away (error id") for m in said
    )
    assert "HI" == text_of(out)


async def test_p25_meta_is_forwarded_on_routed_and_pass_through_calls() -> None:
    """P25: the request's _meta reaches the upstream unchanged on both routes."""

    async def layer(req: Any, next: Any, ctx: Any) -> Any:
        return await next(req)

    for pass_through in ((), ("meta_seen",)):
        proxy = McpProxy(
            UPSTREAM, tool_middleware=[layer], pass_through_tools=pass_through
        )
        async with proxied(proxy) as client:
            out = await client.call_tool("meta_seen", {}, meta={"trace": "t1"})
        assert '{"trace": "t1"}' == out.content[0].text  # type: ignore[union-attr]


async def test_p24_binding_beyond_loopback_without_a_resolver_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """P24: one warning naming the host when bound elsewhere without a resolver."""
    from helmlog.gateway.proxy import _uvicorn as _proxy_uvicorn

    _proxy_uvicorn._warned.clear()
    proxy = McpProxy(UPSTREAM)
    async with proxy:
        for _ in range(2):
            async with proxy.http_server("0.0.0.0", 0):
                pass
    warnings = [
        r for r in caplog.records if "without an identity resolver" in r.message
    ]
    assert 1 == len(warnings)
