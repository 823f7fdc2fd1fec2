"""Kept-alive HTTP/1.1 connections to one origin, parsed by httptools.

Pattern: a small pool over asyncio streams; a request is one write, its
         response parsed by ``httptools`` and handed on as it arrives (SSE
         event by event); a connection read to its end goes back to the pool.
Role:    gateway layer; the upstream HTTP link posts its messages through it.
Emits:   nothing; a connection failure is ``WireError``, a timeout
         ``TimeoutError``.

Laws: issue 10 item 8 (~150 µs of proxy CPU per call against httpx's
~1,400 µs), P25 (an SSE reply is handed on in order).

Why idle connections are dropped after ``IDLE_S`` and a POST never retried:
a server closes idle connections on its own clock, and a ``tools/call`` that
may have been read must not be sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

IDLE_S = 4.0  # an idle connection older than this is closed, not reused
MAX_IDLE = 16  # idle connections kept per origin
READ_BYTES = 65536


class WireError(ConnectionError):
    """The connection failed or the response was not HTTP (its cause in ``str``)."""


class _Parsed:
    """httptools callbacks for one response: head, body chunks, completion."""

    __slots__ = ("chunks", "complete", "head_done", "headers", "keep_alive", "parser")

    def __init__(self) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.chunks: list[bytes] = []
        self.head_done = False
        self.keep_alive = False
        self.complete = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.head_done = True
        # Asked here: the parser forgets it once the message is complete.
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def usable(self) -> bool:
        return (
            not self.reader.at_eof()
            and not self.writer.is_closing()
            and time.monotonic() - self.idle_since < IDLE_S
        )

    def close(self) -> None:
        self.writer.close()


class WireResponse:
    """One response: ``status``, lower-cased ``headers``; its body by ``chunks``
    (as it arrives) or ``read`` (all of it)."""

    def __init__(self, conn: _Connection, parsed: _Parsed, timeout_s: float) -> None:
        self._conn = conn
        self._parsed = parsed
        self._timeout_s = timeout_s
        self.status: int = parsed.parser.get_status_code()
        self.headers = parsed.headers

    @property
    def complete(self) -> bool:
        """Whether the response was read to its end."""
        return self._parsed.complete

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, dechunked, until the response ends."""
        parsed = self._parsed
        while True:
            if parsed.chunks:
                held, parsed.chunks = parsed.chunks, []
                for chunk in held:
                    yield chunk
            if parsed.complete:
                return
            await _feed(self._conn, parsed, self._timeout_s)

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])


class HttpWire:
    """Kept-alive HTTP/1.1 connections to the origin of ``url`` (http only).

    Args:
        url: the endpoint; requests go to its path and query.
        connect_timeout_s: the longest a new connection may take.
        read_timeout_s: the longest between two reads of a response.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = 30.0,
        read_timeout_s: float = 300.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"HttpWire takes an http:// URL (got {url!r})")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._authority = parts.netloc.rsplit("@", 1)[-1]
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: list[_Connection] = []
        self._closed = False
        self.opened = 0  # connections opened so far (kept-alive reuse shows here)

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        timeout_s: float | None = None,
    ) -> AsyncIterator[WireResponse]:
        """Send one request; yield its response once its head arrived.

        Leaving the block with the body read to its end returns the
        connection to the pool; leaving it early (or on an error) closes it.

        Raises:
            WireError: the connection failed, or the reply was not HTTP.
            TimeoutError: no byte arrived within the read timeout.
        """
        timeout = timeout_s if timeout_s is not None else self.read_timeout_s
        conn = await self._connection()
        reused = False
        try:
            conn.writer.write(self._head(method, headers, len(body)) + body)
            parsed = _Parsed()
            while not parsed.head_done:
                await _feed(conn, parsed, timeout)
            response = WireResponse(conn, parsed, timeout)
            yield response
            reused = parsed.complete and parsed.keep_alive
        finally:
            if reused and not self._closed and len(self._idle) < MAX_IDLE:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()

    def _head(self, method: str, headers: Mapping[str, str], length: int) -> bytes:
        lines = [f"{method} {self.target} HTTP/1.1", f"host: {self._authority}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        lines.append(f"content-length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _connection(self) -> _Connection:
        if self._closed:
            raise WireError("the connection pool is closed")
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.close()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, limit=READ_BYTES
                )
        except TimeoutError:
            raise
        except OSError as exc:
            raise WireError(f"cannot connect to {self._authority}: {exc}") from exc
        self.opened += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # One write per request, answered before the next: no Nagle wait.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        """Close every idle connection; the pool takes no more requests."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


async def _feed(conn: _Connection, parsed: _Parsed, timeout_s: float) -> None:
    """Read once from ``conn`` into ``parsed``."""
    try:
        async with asyncio.timeout(timeout_s):
            data = await conn.reader.read(READ_BYTES)
    except TimeoutError:  # an OSError too, but not a failed connection
        raise
    except OSError as exc:
        raise WireError(f"the connection failed: {exc}") from exc
    if not data:
        raise WireError("the server closed the connection before the response ended")
    try:
        parsed.parser.feed_data(data)
    except httptools.HttpParserError as exc:
        raise WireError(f"not an HTTP response: {exc}") from exc


def sse_events(buffer: bytearray, chunk: bytes) -> list[dict[str, Any]]:
    """Append ``chunk`` to ``buffer`` and take out the complete SSE events.

    Each is ``{"data": str, "id": str | None, "event": str | None}`` (the
    ``data`` lines joined by newlines); an event without data is skipped.
    """
    buffer += chunk
    events: list[dict[str, Any]] = []
    while True:
        end, size = _event_end(buffer)
        if end < 0:
            return events
        block = bytes(buffer[:end]).decode("utf-8")
        del buffer[: end + size]
        data: list[str] = []
        fields: dict[str, Any] = {"id": None, "event": None}
        for line in block.splitlines():
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name in ("id", "event"):
                fields[name] = value
        if data:
            fields["data"] = "\n".join(data)
            events.append(fields)
        elif fields["id"] is not None:
            events.append({**fields, "data": ""})


def _event_end(buffer: bytearray) -> tuple[int, int]:
    """Where the first SSE event in ``buffer`` ends, and its blank line's size."""
    found = [
        (at, len(sep))
        for sep in (b"\r\n\r\n", b"\n\n", b"\r\r")
        if (at := buffer.find(sep)) >= 0
    ]
    return min(found) if found else (-1, 0)
