"""The HTTP proxy served with ``OneWriteProtocol``: the same bytes, fewer writes.

Pattern: the same raw HTTP/1.1 requests, on one kept-alive socket, to the
         proxy's ASGI app served by uvicorn with ``gateway.fast``'s protocol
         and with uvicorn's own ``httptools`` protocol; the raw answers
         (status line, headers, body; the ``date`` header and fresh ids
         aside) compared whole.
Role:    differential tests of ``gateway/fast/one_write.py``.
Emits:   nothing.

Laws: P25 (a JSON answer, an SSE answer, a refusal and an answer that
closes the connection are the same bytes, in the same order).

Why raw sockets: an HTTP client would parse both answers alike and hide a
difference in the bytes.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from helmlog.gateway import McpProxy
from helmlog.gateway._uvicorn import Server, server_config, serving
from helmlog.gateway.fast import OneWriteProtocol

from .upstream_server import UPSTREAM

VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _request(body: Any, headers: dict[str, str], *, close: bool = False) -> bytes:
    content = json.dumps(body).encode()
    lines = ["POST /mcp HTTP/1.1", "host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"content-length: {len(content)}"]
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


def _requests() -> list[bytes]:
    modern = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": VERSION,
        "mcp-method": "tools/call",
        "mcp-name": "echo",
    }
    params = {"name": "echo", "arguments": {"word": "hi"}, "_meta": ENVELOPE}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    initialize = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    handshake = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    return [
        _request(call, modern),  # the HTTP lane's JSON answer
        _request(initialize, handshake),  # the SDK transport's SSE answer
        _request({"jsonrpc": "2.0", "id": 3}, handshake),  # a 400 refusal
        _request(call, modern, close=True),  # the last: the server closes
    ]


async def _exchange(port: int, requests: list[bytes]) -> list[tuple[bytes, bool]]:
    """Each request's raw answer on one connection, and whether the first
    read after the request held all of it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out: list[tuple[bytes, bool]] = []
    try:
        for request in requests:
            writer.write(request)
            await writer.drain()
            answer = await reader.read(65536)
            first = answer
            while not _whole(answer):
                more = await reader.read(65536)
                if not more:
                    break
                answer += more
            out.append((answer, first == answer))
    finally:
        writer.close()
    return out


def _whole(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    found = re.search(rb"(?im)^content-length: *(\d+)", head)
    if found is not None:
        return len(body) >= int(found.group(1))
    return body.endswith(b"\r\n0\r\n\r\n")  # chunked: its last chunk


def _normal(answer: bytes) -> bytes:
    """An answer without its ``date`` header and with its fresh ids blanked."""
    answer = re.sub(rb"(?im)^date: [^\r\n]*\r\n", b"", answer)
    return re.sub(rb"[0-9a-f]{32}", b"<id>", answer)


async def _answers(http: Any) -> list[tuple[bytes, bool]]:
    proxy = McpProxy(UPSTREAM)
    async with proxy:
        app = proxy.http_app()
        server = Server(server_config(app, host="127.0.0.1", port=0, http=http))
        async with serving(server, name="the test proxy") as port:
            return await _exchange(port, _requests())


async def test_p25_one_write_answers_are_the_same_bytes_in_one_piece() -> None:
    """P25: with ``OneWriteProtocol`` every answer (the lane's JSON, an SSE
    stream, a refusal, a closing answer) is byte for byte uvicorn's own; a
    JSON answer arrives whole in one read."""
    joined = await _answers(OneWriteProtocol)
    own = await _answers("httptools")
    assert [_normal(a) for a, _ in own] == [_normal(a) for a, _ in joined]
    assert joined[0][0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b'"text":"HI"' in joined[0][0]
    assert b"text/event-stream" in joined[1][0]
    assert joined[2][0].startswith(b"HTTP/1.1 400 ")
    assert [True, True] == [joined[0][1], joined[3][1]]
