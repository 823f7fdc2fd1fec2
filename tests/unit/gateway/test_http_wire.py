"""The one HTTP stack to an upstream (httpx2 under the SDK's client): failures
are answered, never hung (issue 26 items 1 and 2; issue 10 item 8).

Against the real MCPServer upstream over Streamable HTTP and small real
socket servers for the failures a link must answer: a refused connect, a
server that hangs up, one that answers something that is not HTTP, one that
never answers. (Before issue 26 these were ``HttpWire``'s, a second HTTP
stack beside httpx for ``http://``; the v2 proxy has one stack.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from helmlog.gateway.upstream import Upstream, UpstreamError
from helmlog.gateway.upstream._http import upstream_http
from tests.unit.gateway.http_helpers import free_port, http_upstream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def socket_server(handler: Handler) -> AsyncIterator[str]:
    """A real loopback TCP server running ``handler``; yields its URL."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()
        await server.wait_closed()


async def test_one_kept_alive_connection_carries_call_after_call() -> None:
    """Twenty tools/call after the handshake go over httpx2's pool on the
    fast path (``gateway/fast/upstream.py``): the connections opened stay few (kept
    alive), every answer whole."""
    opened: set[Any] = set()

    async def note(response: httpx2.Response) -> None:
        stream = response.extensions.get("network_stream")
        if stream is not None:  # a connection is its local address
            opened.add(stream.get_extra_info("client_addr"))

    def factory() -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=30, event_hooks={"response": [note]})

    with http_upstream() as url:
        upstream = Upstream(url, http_client=factory)
        await upstream.open()
        try:
            words = [f"w{i}" for i in range(20)]
            answers = [
                await upstream.call_raw(
                    "tools/call", {"name": "echo", "arguments": {"word": w}}
                )
                for w in words
            ]
        finally:
            await upstream.close()
    assert [w.upper() for w in words] == [a["content"][0]["text"] for a in answers]
    # the fast path reads each answer to its end: its POSTs reuse one
    # connection (the SDK's client closes an SSE answer early: one per call)
    # (the handshake's POSTs and the standalone GET open their own)
    assert len(opened) <= 5


async def test_a_refused_connection_is_an_upstream_error_naming_the_url() -> None:
    """Nothing listening: ``UpstreamError`` at open (P25), at once, not a hang."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with anyio.fail_after(20), pytest.raises(UpstreamError, match=url):
        await Upstream(url).open()


@pytest.mark.parametrize(
    "reply",
    [
        # a head, part of a body, then the close: not a short body
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial",
        # bytes that are not an HTTP response
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    ],
    ids=["hang-up-mid-response", "not-http"],
)
async def test_a_broken_reply_is_an_upstream_error_not_a_hang(reply: bytes) -> None:
    """A server that hangs up mid-response, or answers something that is not
    HTTP: the open fails with ``UpstreamError`` within the test's bound."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read(65536)
        writer.write(reply)
        await writer.drain()
        writer.close()

    async with socket_server(handler) as url:
        with anyio.fail_after(20), pytest.raises(UpstreamError):
            await Upstream(url).open()


async def test_a_call_whose_post_fails_is_answered_as_the_upstream_gone() -> None:
    """The SDK client leaves a request whose POST raised waiting; the stack
    answers it: the call fails at once as "went away" (H4), not a hang."""
    with http_upstream("--json") as url:
        upstream = Upstream(url)
        await upstream.open()
        try:
            with anyio.fail_after(20), pytest.raises(MCPError) as raised:
                await upstream.call_raw("tools/call", {"name": "die", "arguments": {}})
        finally:
            await upstream.close()
    assert types.INTERNAL_ERROR == raised.value.error.code
    assert raised.value.error.message.startswith("the upstream MCP server went away")


async def test_a_server_that_never_answers_times_out() -> None:
    """No byte within the read timeout: the handshake's bound ends the open
    (``UpstreamError``), as the client's timeout ends a call."""
    release = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read(65536)
        await release.wait()
        writer.close()

    def factory() -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=httpx2.Timeout(5, read=0.2))

    async with socket_server(handler) as url:
        try:
            with anyio.fail_after(30), pytest.raises(UpstreamError):
                await Upstream(url, http_client=factory).open()
        finally:
            release.set()


async def test_only_http_urls_are_taken() -> None:
    """A schemeless or other URL is refused where the link is built."""
    for url in ("example.com/mcp", "ftp://example.com/mcp"):
        with pytest.raises(ValueError, match="http"):
            async with upstream_http(url, "label"):
                pass
    with pytest.raises(ValueError, match="URL"):
        Upstream("example.com/mcp")
