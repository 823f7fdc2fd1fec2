"""``HttpWire`` reading answers as they arrive: big, slow, chunked, stray bytes.

Pattern: small real loopback servers (asyncio) write exact bytes; the
         wire's answers and connection counts are compared with what was
         written.
Role:    unit tests of ``gateway/fast/wire.py``'s connections (``_Link``:
         bytes fed to the answer's parser as they arrive, reading paused
         while much is unread, a timeout between two reads).
Emits:   nothing.

Laws: P25 (the answer is the bytes the upstream sent, whole), H4 (a slow
server is waited for between reads, a silent one times out; a connection
that carried bytes nobody asked for is not reused).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from helmlog.gateway.fast.wire import HttpWire

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter
Handler = Callable[[Reader, Writer], Awaitable[None]]


@asynccontextmanager
async def _server(handler: Handler) -> AsyncIterator[str]:
    """A loopback server running ``handler`` per connection, each closed after."""

    async def closing(reader: Reader, writer: Writer) -> None:
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()
        await server.wait_closed()


async def _request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length)


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body


async def test_p25_a_big_answer_is_read_whole_in_order() -> None:
    """P25: a 3 MB body, sent faster than it is read (reading pauses and
    resumes), and a chunked one, arrive byte for byte."""
    big = bytes(range(256)) * (3 * 4096)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"ab", b"c" * 70000))

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await _request(reader)
        writer.write(_answer(big))
        await _request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            + chunked
            + b"0\r\n\r\n"
        )
        await writer.drain()
        await reader.read()

    async with _server(handler) as url:
        wire = HttpWire(url, read_timeout_s=10)
        got = []
        for _ in range(2):
            async with wire.request("POST", {}, b"{}") as answer:
                got.append(await answer.read())
        await wire.aclose()
    assert [big, b"ab" + b"c" * 70000] == got
    assert 1 == wire.opened


async def test_h4_a_slow_answer_is_waited_for_between_reads() -> None:
    """H4: a server that sends its answer a piece every 0.2 s is read whole
    with a 1 s read timeout (the timeout is between two reads)."""
    body = b'{"ok": true, "padding": "' + b"x" * 40 + b'"}'
    raw = _answer(body)

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await _request(reader)
        for i in range(0, len(raw), 16):
            writer.write(raw[i : i + 16])
            await writer.drain()
            await asyncio.sleep(0.2)
        await reader.read()

    async with _server(handler) as url:
        wire = HttpWire(url, read_timeout_s=1.0)
        async with wire.request("POST", {}, b"{}") as answer:
            got = await answer.read()
        await wire.aclose()
    assert body == got


async def test_h4_a_server_silent_mid_answer_times_out() -> None:
    """H4: a server that stops mid-answer is a ``TimeoutError`` after the
    read timeout, not a hang."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345")
        await writer.drain()
        await asyncio.sleep(5)

    async with _server(handler) as url:
        wire = HttpWire(url, read_timeout_s=0.3)
        with pytest.raises(TimeoutError):
            async with wire.request("POST", {}, b"{}") as answer:
                await answer.read()
        await wire.aclose()


async def test_h4_a_connection_that_carried_stray_bytes_is_not_reused() -> None:
    """H4: bytes after a whole answer, which no request asked for, leave
    that connection out of the pool: the next request opens another and
    reads its own answer."""
    connections: list[int] = []

    async def handler(reader: Reader, writer: Writer) -> None:
        connections.append(len(connections))
        await _request(reader)
        if len(connections) == 1:
            writer.write(_answer(b"first"))
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(_answer(b"stray"))
        else:
            writer.write(_answer(b"again"))
        await writer.drain()
        await reader.read()  # until the wire closes it

    async with _server(handler) as url:
        wire = HttpWire(url, read_timeout_s=5)
        async with wire.request("POST", {}, b"{}") as answer:
            first = await answer.read()
        await asyncio.sleep(0.3)  # the stray bytes arrive on the idle connection
        async with wire.request("POST", {}, b"{}") as answer:
            second = await answer.read()
        await wire.aclose()
    assert (b"first", b"again", 2) == (first, second, wire.opened)
