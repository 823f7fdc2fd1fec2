"""Kept-alive HTTP/1.1 connections to one upstream origin, parsed by httptools.

Pattern: a small pool of asyncio connections (``http://``, or ``https://`` with
         the ssl context httpx2 would make: ``create_ssl_context`` on the same
         settings); a request is one write, its answer parsed by ``httptools``
         and read to its end; a connection read whole goes back to the pool.
Role:    gateway layer, under ``FastPosts``; ``wire_for`` builds one from the
         upstream's own ``httpx2`` client (its headers, credential, timeouts).
Emits:   nothing; a failed connection or answer is ``WireError``.

Laws: P26 (one set of settings: a caller's own client, a proxy variable
in force or a credential that is not a static header keep the httpx2 POST),
P25, H4. Why: httpx2 and h11 cost ~1.5 ms of CPU a call, this ~0.15 ms.
Why no retry, and idle connections dropped after ``IDLE_S``: a server closes
idle ones on its own clock; a ``tools/call`` may not be sent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httptools
import httpx2

log = logging.getLogger("helmlog.proxy")

IDLE_S = 4.0  # an idle connection older than this is closed, not reused
MAX_IDLE = 16  # idle connections kept
READ_BYTES = 65536
_HELD = 2 * READ_BYTES  # unread body bytes past which reading pauses
# httpx2's own headers the wire does not carry: it reads identity bodies,
# and HTTP/1.1 keeps a connection alive without being asked.
_NOT_CARRIED = frozenset({"accept-encoding", "connection"})


class WireError(ConnectionError):
    """The connection failed or the answer was not HTTP (the cause in ``str``)."""


@runtime_checkable
class StaticAuth(Protocol):
    """A credential that is a fixed header (``BearerAuth``): the wire sends it."""

    def static_headers(self) -> Mapping[str, str]: ...


def wire_for(
    url: str,
    client: httpx2.AsyncClient,
    verify: ssl.SSLContext | bool | None,
    on_status: Callable[[int, str], None] | None = None,
) -> HttpWire | None:
    """A wire carrying ``client``'s settings to ``url``, or ``None`` where it
    cannot carry them whole (then the httpx2 POST is kept).

    ``verify`` is the TLS setting ``client`` was built with; ``None`` says the
    client is not one the proxy built (a caller's factory): no wire.
    """
    if verify is None:
        return None
    auth = client.auth
    if auth is not None and not isinstance(auth, StaticAuth):
        return None  # OAuth, or an auth flow that may talk: httpx2's
    if client.trust_env and any(
        urllib.request.getproxies().get(scheme) for scheme in ("http", "https", "all")
    ):
        return None  # a proxy may be in force: httpx2 decides (NO_PROXY too)
    headers = {
        name.lower(): value
        for name, value in client.headers.items()
        if name.lower() not in _NOT_CARRIED
    }
    if auth is not None:
        headers.update({k.lower(): v for k, v in auth.static_headers().items()})
    context: ssl.SSLContext | None = None
    if url.startswith("https://"):
        context = httpx2.create_ssl_context(verify=verify, trust_env=client.trust_env)
        context.set_alpn_protocols(["http/1.1"])
    timeout = client.timeout
    return HttpWire(
        url,
        headers=headers,
        ssl_context=context,
        connect_timeout_s=timeout.connect,
        read_timeout_s=timeout.read,
        on_status=on_status,
    )


class _Parsed:
    """httptools callbacks for one answer: head, body chunks, completion."""

    __slots__ = (
        "chunks",
        "complete",
        "head_done",
        "headers",
        "keep_alive",
        "parser",
        "reason",
    )

    def __init__(self) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.reason = ""
        self.chunks: list[bytes] = []
        self.head_done = False
        self.keep_alive = False
        self.complete = False
        self.parser = httptools.HttpResponseParser(self)

    def on_status(self, status: bytes) -> None:
        self.reason = status.decode("latin-1")

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


class _Link(asyncio.Protocol):
    """One connection's bytes, fed as they arrive to the answer being read
    (``parsed``); the reader waits on ``waiter`` for bytes, an end or a
    failure. Reading pauses while ``_HELD`` bytes of body wait unread."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parsed: _Parsed | None = None
        self.fed = False  # bytes fed since the reader last looked
        self.failure: WireError | None = None
        self.ended = False
        self.stray = False  # bytes came with no answer being read
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        parsed = self.parsed
        if parsed is None:
            self.stray = True  # nothing asked for it: the connection is not reused
            return
        try:
            parsed.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.failure = self.failure or WireError(f"not an HTTP answer: {exc}")
        self.fed = True
        if sum(len(c) for c in parsed.chunks) > _HELD and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        if exc is not None and self.failure is None:
            self.failure = WireError(f"the connection failed: {exc}")
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection:
    __slots__ = ("idle_since", "link", "transport")

    def __init__(self, transport: asyncio.Transport, link: _Link) -> None:
        self.transport = transport
        self.link = link
        self.idle_since = time.monotonic()

    def usable(self) -> bool:
        link = self.link
        return (
            not link.ended
            and not link.stray
            and link.failure is None
            and not self.transport.is_closing()
            and time.monotonic() - self.idle_since < IDLE_S
        )

    def close(self) -> None:
        self.transport.close()


class WireResponse:
    """One answer: ``status``, ``reason``, lower-cased ``headers``; its body by
    ``chunks`` (as it arrives) or ``read`` (all of it)."""

    def __init__(
        self, conn: _Connection, parsed: _Parsed, timeout_s: float | None
    ) -> None:
        self._conn = conn
        self._parsed = parsed
        self._timeout_s = timeout_s
        self.status: int = parsed.parser.get_status_code()
        self.headers = parsed.headers
        # What reads the rest once the caller has what it needs (``release``).
        self.rest: Callable[[bytes], Awaitable[None]] | None = None
        self.released = False

    def release(self, rest: Callable[[bytes], Awaitable[None]]) -> None:
        """The caller has its answer: the rest of the body is read after the
        block (each chunk to ``rest``), and the connection then pooled."""
        self.released = True
        self.rest = rest

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, dechunked, until the answer ends."""
        parsed = self._parsed
        while True:
            if parsed.chunks:
                held, parsed.chunks = parsed.chunks, []
                for chunk in held:
                    yield chunk
            if parsed.complete:
                return
            await _feed(self._conn, parsed, self._timeout_s)

    async def next_chunk(self) -> bytes | None:
        """The body's next chunk as it arrives, ``None`` once it has ended."""
        parsed = self._parsed
        while not parsed.chunks:
            if parsed.complete:
                return None
            await _feed(self._conn, parsed, self._timeout_s)
        return parsed.chunks.pop(0)

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])


class HttpWire:
    """Kept-alive HTTP/1.1 connections to the origin of ``url``.

    Args:
        url: the endpoint; requests go to its path and query.
        headers: sent with every request (the client's, its credential's).
        ssl_context: for an ``https://`` URL (required there).
        connect_timeout_s: the longest a new connection (and TLS) may take.
        read_timeout_s: the longest between two reads of an answer.
        on_status: told an answer's status and reason when it is 401 or 403.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout_s: float | None = 30.0,
        read_timeout_s: float | None = 300.0,
        on_status: Callable[[int, str], None] | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("HttpWire takes an http:// or https:// URL")
        if parts.scheme == "https" and ssl_context is None:
            raise ValueError("HttpWire needs an ssl context for an https:// URL")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl_context = ssl_context if parts.scheme == "https" else None
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"host: {authority}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items() if k != "host"]
        self._fixed = "\r\n".join(lines)
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.on_status = on_status
        self._idle: list[_Connection] = []
        # released answers being read to their end, and their connections
        self._draining: dict[asyncio.Task[None], _Connection] = {}
        self._closed = False
        self.opened = 0  # connections opened so far (kept-alive reuse shows here)
        self.requests = 0  # requests sent (the differential tests)

    def __repr__(self) -> str:  # H4: never the headers (a credential)
        scheme = "https" if self.ssl_context is not None else "http"
        return f"HttpWire({scheme}://{self.host}:{self.port})"

    @contextlib.asynccontextmanager
    async def request(
        self, method: str, headers: Mapping[str, str], body: bytes = b""
    ) -> AsyncIterator[WireResponse]:
        """Send one request; yield its answer once its head arrived.

        Leaving the block with the body read to its end returns the
        connection to the pool; with the answer ``release``d, the rest is
        read after the block, then pooled; leaving it early otherwise (or on
        an error) closes it.

        Raises:
            WireError: the connection failed, or the answer was not HTTP.
            TimeoutError: no byte arrived within the read timeout.
        """
        conn = await self._connection()
        self.requests += 1
        reused = False
        released: WireResponse | None = None
        timeout = self.read_timeout_s
        try:
            parsed = _Parsed()
            conn.link.parsed = parsed
            conn.transport.write(self._head(method, headers, len(body)) + body)
            while not parsed.head_done:
                await _feed(conn, parsed, timeout)
            response = WireResponse(conn, parsed, timeout)
            if response.status in (401, 403) and self.on_status is not None:
                self.on_status(response.status, parsed.reason)
            yield response
            reused = parsed.complete and parsed.keep_alive
            if response.released and not parsed.complete:
                released = response
        finally:
            if released is not None and not self._closed:
                task = asyncio.get_running_loop().create_task(
                    self._drain(conn, parsed, released.rest)
                )
                self._draining[task] = conn
                task.add_done_callback(self._drained)
            elif reused:
                self._pool(conn)
            else:
                conn.close()

    def _drained(self, task: asyncio.Task[None]) -> None:
        self._draining.pop(task, None)

    def _pool(self, conn: _Connection) -> None:
        conn.link.parsed = None
        conn.link.fed = False
        if not self._closed and len(self._idle) < MAX_IDLE:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    async def _drain(
        self,
        conn: _Connection,
        parsed: _Parsed,
        rest: Callable[[bytes], Awaitable[None]] | None,
    ) -> None:
        """Read a released answer to its end, then pool its connection."""
        try:
            while True:
                held, parsed.chunks = parsed.chunks, []
                for chunk in held:
                    if rest is not None:
                        await _told(rest, chunk)
                if parsed.complete:
                    break
                await _feed(conn, parsed, self.read_timeout_s)
        except (WireError, TimeoutError):
            conn.close()  # the answer was had; the connection is not reused
            return
        except BaseException:
            conn.close()
            raise
        if parsed.keep_alive:
            self._pool(conn)
        else:
            conn.close()

    def _head(self, method: str, headers: Mapping[str, str], length: int) -> bytes:
        lines = [f"{method} {self.target} HTTP/1.1", self._fixed]
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
        extra: dict[str, Any] = {}
        if self.ssl_context is not None:
            extra = {"ssl": self.ssl_context, "server_hostname": self.host}
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                transport, link = await loop.create_connection(
                    _Link, self.host, self.port, **extra
                )
        except TimeoutError:
            raise
        except (OSError, ssl.SSLError) as exc:
            raise WireError(f"cannot connect: {type(exc).__name__}: {exc}") from exc
        self.opened += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # One write per request, answered before the next: no Nagle wait.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(transport, link)

    async def aclose(self) -> None:
        """Close every idle connection (and stop reading released answers);
        the pool takes no more requests."""
        self._closed = True
        draining = dict(self._draining)
        for task in draining:
            task.cancel()
        if draining:
            await asyncio.gather(*draining, return_exceptions=True)
        for conn in draining.values():  # a task cancelled before it ran
            conn.close()
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


async def _told(rest: Callable[[bytes], Awaitable[None]], chunk: bytes) -> None:
    """Hand a released answer's chunk on; a failure there is the reader's,
    logged, and the answer is still read to its end (the connection's)."""
    try:
        await rest(chunk)
    except Exception:
        log.warning("proxy: a released answer's reader failed", exc_info=True)


async def _feed(conn: _Connection, parsed: _Parsed, timeout_s: float | None) -> None:
    """Wait until bytes of ``conn`` have been fed to ``parsed`` (at most
    ``timeout_s`` between two reads, as a read timeout measures).

    Raises:
        WireError: the connection failed or ended before the answer did, or
            the bytes were not an HTTP answer.
        TimeoutError: no byte arrived within ``timeout_s``.
    """
    link = conn.link
    if not (link.fed or link.ended or link.failure is not None):
        if link.paused:
            link.paused = False
            conn.transport.resume_reading()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        link.waiter = waiter
        timer = (
            None if timeout_s is None else loop.call_later(timeout_s, _expire, waiter)
        )
        try:
            await waiter
        finally:
            link.waiter = None
            if timer is not None:
                timer.cancel()
    fed, link.fed = link.fed, False
    if link.failure is not None:
        raise link.failure
    if not fed and link.ended:
        raise WireError("the server closed the connection before the answer ended")


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
