"""HttpWire: kept-alive HTTP/1.1 to the upstream, parsed by httptools (issue 10 item 8).

Against the real FastMCP upstream over Streamable HTTP (its SSE replies,
kept-alive connections) and small real socket servers for the failures a
link must name: a refused connect, a server that hangs up, one that answers
something that is not HTTP, one that never answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from helmlog.gateway.upstream import _http_wire as wire
from helmlog.gateway.upstream._http_wire import HttpWire, WireError, sse_events
from tests.unit.gateway.http_helpers import (
    HEADERS,
    INITIALIZE,
    free_port,
    http_upstream,
)

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


async def _post(
    link: HttpWire, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, dict[bytes, bytes], list[dict[str, Any]]]:
    async with link.request("POST", headers, json.dumps(body).encode()) as response:
        buffer = bytearray()
        events: list[dict[str, Any]] = []
        async for chunk in response.chunks():
            events.extend(sse_events(buffer, chunk))
        return response.status, response.headers, events


async def test_one_kept_alive_connection_carries_call_after_call() -> None:
    """Initialize, then twenty tools/call on one connection, each SSE reply
    parsed whole; the connection goes back to the pool after each."""
    with http_upstream() as url:
        link = HttpWire(url)
        try:
            ids = await _initialized(link)
            for n in range(20):
                call = {
                    "jsonrpc": "2.0",
                    "id": f"hl-{n}",
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"word": f"w{n}"}},
                }
                status, _, events = await _post(link, call, ids)
                reply = json.loads(events[-1]["data"])
                assert (200, f"hl-{n}") == (status, reply["id"])
                assert f"W{n}" == reply["result"]["content"][0]["text"]
            assert 1 == link.opened
        finally:
            await link.aclose()


async def test_a_response_left_unread_closes_its_connection() -> None:
    """A block left before the body ended (a slow tool's reply still to come)
    closes that connection; the next request opens another."""
    with http_upstream() as url:
        link = HttpWire(url)
        try:
            ids = await _initialized(link)
            call = {
                "jsonrpc": "2.0",
                "id": "hl-1",
                "method": "tools/call",
                "params": {"name": "sleepy", "arguments": {"seconds": 0.5}},
            }
            async with link.request("POST", ids, json.dumps(call).encode()) as sent:
                assert (200, False) == (sent.status, sent.complete)
            await _post(link, INITIALIZE, HEADERS)
            assert 2 == link.opened
        finally:
            await link.aclose()


async def _initialized(link: HttpWire) -> dict[str, str]:
    """Initialize a session on ``link``; its headers for the calls after."""
    status, headers, events = await _post(link, INITIALIZE, HEADERS)
    assert 200 == status
    assert "upstream" == json.loads(events[0]["data"])["result"]["serverInfo"]["name"]
    ids = {**HEADERS, "mcp-session-id": headers[b"mcp-session-id"].decode()}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with link.request("POST", ids, json.dumps(note).encode()) as sent:
        assert 202 == sent.status
        assert b"" == await sent.read()
    return ids


async def test_an_idle_connection_past_idle_s_is_not_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection idle longer than the server may keep it is closed, never
    reused for a request the server may never read."""
    with http_upstream() as url:
        link = HttpWire(url)
        try:
            await _post(link, INITIALIZE, HEADERS)
            monkeypatch.setattr(wire, "IDLE_S", 0.0)
            await _post(link, INITIALIZE, HEADERS)
            assert 2 == link.opened
        finally:
            await link.aclose()


async def test_a_refused_connection_is_a_wire_error_naming_the_origin() -> None:
    """Nothing listening: ``WireError`` naming where it tried."""
    port = free_port()
    link = HttpWire(f"http://127.0.0.1:{port}/mcp", connect_timeout_s=5)
    with pytest.raises(WireError, match=f"cannot connect to 127.0.0.1:{port}"):
        await _post(link, INITIALIZE, HEADERS)


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        # a head, part of a body, then the close: not a short body
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial",
            "closed the connection",
        ),
        # bytes that are not an HTTP response
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP response"),
    ],
    ids=["hang-up-mid-response", "not-http"],
)
async def test_a_broken_reply_is_a_wire_error_naming_what_broke(
    reply: bytes, named: str
) -> None:
    """A server that hangs up mid-response, or answers something that is not
    HTTP: ``WireError`` saying which."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read(65536)
        writer.write(reply)
        await writer.drain()
        writer.close()

    async with socket_server(handler) as url:
        link = HttpWire(url)
        with pytest.raises(WireError, match=named):
            await _post(link, INITIALIZE, HEADERS)


async def test_a_server_that_never_answers_times_out() -> None:
    """No byte within the read timeout: ``TimeoutError``, and the connection
    is not kept."""
    release = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read(65536)
        await release.wait()
        writer.close()

    async with socket_server(handler) as url:
        link = HttpWire(url, read_timeout_s=0.2)
        try:
            with pytest.raises(TimeoutError):
                await _post(link, INITIALIZE, HEADERS)
            assert [] == link._idle
        finally:
            release.set()


def test_only_http_urls_are_taken() -> None:
    """An https or schemeless URL is refused where the link is built."""
    for url in ("https://example.com/mcp", "example.com/mcp"):
        with pytest.raises(ValueError, match="http:// URL"):
            HttpWire(url)


def test_sse_events_are_taken_whole_across_chunks() -> None:
    """Events split anywhere, CRLF or LF, multi-line data, comments and an
    id-only event come out whole and in order; a partial one waits."""
    stream = (
        b": a comment\r\n\r\n"
        b'id: 1\r\nevent: message\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
        b"id: 2\n\n"
        b"data: last\n\n"
        b"data: partial"
    )
    buffer = bytearray()
    events: list[dict[str, Any]] = []
    for at in range(0, len(stream), 7):
        events.extend(sse_events(buffer, stream[at : at + 7]))
    assert [
        {"id": "1", "event": "message", "data": '{"a":\n1}'},
        {"id": "2", "event": None, "data": ""},
        {"id": None, "event": None, "data": "last"},
    ] == events
    assert b"data: partial" == bytes(buffer)
