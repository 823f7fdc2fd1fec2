"""The raw calls' HTTP/1.1 connections to a plain-``http`` upstream: h11 on asyncio.

Pattern: a small pool of kept-alive connections, each an ``asyncio.Protocol``
         feeding an ``h11.Connection``; one POST at a time per connection,
         its answer read as JSON or as an SSE stream (parsed here, on bytes).
Role:    gateway layer; ``RawPosts`` (``_upstream_http_raw.py``) posts on it
         for an ``http://`` upstream; ``https`` and the SDK session's own
         messages keep to httpx.
Emits:   nothing.

Laws: issue 10 item 8 (the proxy's CPU per call); the answer's semantics
(P25) are ``RawPosts``'s.

Why not httpx here: profiled, a raw call spent most of its CPU in httpx's
request building, cookie extraction, auth and redirect hooks and anyio
timeouts around every socket read and write; none of it matters for one
POST to a known server. h11 still does the parsing (chunked bodies,
keep-alive state), so the framing is not ours to get wrong.

Why a reused connection is retried once: the server may have closed it
while idle (uvicorn does after five seconds); a request that fails on a
reused connection before any byte of its response is sent again on a fresh
one, which is safe because nothing of it reached the server's application.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast
from urllib.parse import urlsplit

import h11

TAIL_S = 1.0  # how long a reply's SSE stream may take to end before it is closed


class WireError(ConnectionError):
    """The upstream's connection failed or broke the protocol."""


class _Conn(asyncio.Protocol):
    """One connection: bytes in to h11, events out to the one reader."""

    def __init__(self, alive: set[_Conn]) -> None:
        self.alive = alive  # the wire's open connections, this one among them
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.lost: str | None = None
        self.fresh = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.alive.add(self)

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self._wake()

    def eof_received(self) -> bool:
        self.h11.receive_data(b"")
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = str(exc) if exc else "the upstream closed the connection"
        self.alive.discard(self)
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def usable(self) -> bool:
        return (
            self.lost is None
            and self.h11.our_state is h11.IDLE
            and self.h11.their_state is h11.IDLE
        )

    def send(self, *events: h11.Event) -> None:
        assert self.transport is not None
        out = b"".join(self.h11.send(e) or b"" for e in events)
        self.transport.write(out)

    async def event(self) -> h11.Event:
        """The next h11 event, waiting for bytes as needed."""
        while True:
            try:
                event: Any = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise WireError(f"the upstream broke HTTP/1.1: {exc}") from exc
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.ConnectionClosed):
                    raise WireError(self.lost or "the upstream closed the connection")
                return cast("h11.Event", event)
            if self.lost is not None:
                raise WireError(self.lost)
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Answer:
    """One response being read: status, headers, and its body as it comes."""

    def __init__(self, wire: Wire, conn: _Conn, response: h11.Response) -> None:
        self.wire = wire
        self.conn = conn
        self.status = response.status_code
        self.headers = {k.decode(): v.decode() for k, v in response.headers}
        self.ended = False

    async def chunk(self) -> bytes | None:
        """The body's next bytes; ``None`` at its end."""
        while not self.ended:
            event = await self.conn.event()
            if isinstance(event, h11.Data):
                return bytes(event.data)
            if isinstance(event, h11.EndOfMessage):
                self.ended = True
        return None

    async def read(self) -> bytes:
        out = b""
        while (chunk := await self.chunk()) is not None:
            out += chunk
        return out

    async def finish(self) -> None:
        """Read to the end (briefly) so the connection can serve the next call."""
        conn = self.conn
        if not self.ended:
            timer = asyncio.get_running_loop().call_later(TAIL_S, conn.close)
            try:
                while await self.chunk() is not None:
                    pass
            except WireError:
                conn.close()
                return
            except BaseException:
                conn.close()
                raise
            finally:
                timer.cancel()
        self.wire.release(conn)


class Wire:
    """Kept-alive HTTP/1.1 connections to one ``http://`` URL."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"not a plain http URL: {url}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.authority = parts.netloc.encode()
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.idle: list[_Conn] = []
        self.alive: set[_Conn] = set()
        self.closed = False

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: _Conn(self.alive), self.host, self.port
            )
        except OSError as exc:
            raise WireError(f"cannot connect: {exc}") from exc
        return conn

    def release(self, conn: _Conn) -> None:
        if self.closed or conn.h11.their_state is not h11.DONE:
            conn.close()
            return
        try:
            conn.h11.start_next_cycle()
        except h11.LocalProtocolError:
            conn.close()
            return
        conn.fresh = False
        self.idle.append(conn)

    async def post(self, body: bytes, headers: list[tuple[str, str]]) -> Answer:
        """POST ``body``; the answer's head (read its body, then ``finish``)."""
        if self.closed:
            raise WireError("the upstream link is closed")
        head = [("host", self.authority.decode()), *headers]
        head.append(("content-length", str(len(body))))
        while True:
            conn = None
            while self.idle:
                candidate = self.idle.pop()
                if candidate.usable():
                    conn = candidate
                    break
                candidate.close()
            if conn is None:
                conn = await self._connect()
            request = h11.Request(method="POST", target=self.target, headers=head)
            try:
                conn.send(request, h11.Data(data=body), h11.EndOfMessage())
                event = await conn.event()
                while isinstance(event, h11.InformationalResponse):
                    event = await conn.event()
            except WireError:
                conn.close()
                if conn.fresh:
                    raise
                continue  # a kept-alive connection the server had closed
            except BaseException:
                conn.close()
                raise
            assert isinstance(event, h11.Response)
            return Answer(self, conn, event)

    def close(self) -> None:
        """Close every connection: a call still reading its answer fails now."""
        self.closed = True
        for conn in list(self.alive):
            conn.close()
        self.idle.clear()


class Sse:
    """An SSE stream's parser on bytes: whole events' data, and the last id."""

    def __init__(self) -> None:
        self.tail = b""
        self.data: list[str] = []
        self.last_id: str | None = None

    def feed(self, chunk: bytes) -> list[str]:
        lines = (self.tail + chunk).split(b"\n") if self.tail else chunk.split(b"\n")
        self.tail = lines.pop()
        out: list[str] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self.data:
                    out.append("\n".join(self.data))
                    self.data = []
                continue
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                self.data.append(value.decode())
            elif field == b"id":
                self.last_id = value.decode()
        return out
