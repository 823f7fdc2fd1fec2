"""uvicorn's httptools protocol: a deadline on each request's head, typed refusals.

Pattern: a ``HttpToolsProtocol`` that arms a timer when a connection opens
         or a request begins and closes the connection if the head is late.
Role:    gateway layer (http); ``Server`` passes ``header_timeout_protocol``
         to the gateway's uvicorn helper.
Emits:   a 408 problem (``ERR_REQUEST_TIMEOUT``) for a late head, a 400
         problem for one the parser refuses, a retryable 503 past the limit.

Laws: H3 (slow, incomplete requests cannot hold connections), issue 11
item 1 (the server's own refusals are problems with a code too).

Why a protocol, not a middleware: uvicorn calls the app only once the head
is complete, and it has no timer for a connection that opens and dribbles.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._wire import ERR_BAD_REQUEST, PROBLEM_TYPE, Problem, encode, problem

ERR_REQUEST_TIMEOUT = "ERR_REQUEST_TIMEOUT"
ERR_BUSY = "ERR_BUSY"

#: Default ``header_timeout_s`` (``helmlog serve --header-timeout``).
DEFAULT_HEADER_TIMEOUT_S = 10.0


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` closing a connection whose request head is late."""

    header_timeout_s: ClassVar[float] = DEFAULT_HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        # The next request on a kept-alive connection gets its own deadline.
        if self._head_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        # Disarmed first: an upgrade hands the transport to another protocol.
        self._disarm()
        self._head_begun = False
        limit = self.limit_concurrency
        if limit is None or (len(self.connections) < limit and len(self.tasks) < limit):
            super().on_headers_complete()
            return
        # Past the ceiling uvicorn answers in plain text; the same 503 is
        # answered here as a problem: uvicorn's check is skipped for this
        # request only, and the request is given the busy app.
        self.logger.warning("Exceeded concurrency limit.")
        self.limit_concurrency, self.app = None, _busy
        try:
            super().on_headers_complete()
        finally:
            self.limit_concurrency, self.app = limit, self.config.loaded_app

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(
            self.header_timeout_s, self._head_timed_out
        )

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def send_400_response(self, msg: str) -> None:
        """A request the parser refuses is a 400 problem, like any other."""
        self._disarm()
        self._answer_and_close(b"400 Bad Request", problem(400, ERR_BAD_REQUEST, msg))

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun and (self.cycle is None or self.cycle.response_complete):
            detail = f"no request head within {self.header_timeout_s:g} s"
            self._answer_and_close(
                b"408 Request Timeout", problem(408, ERR_REQUEST_TIMEOUT, detail)
            )
        self.transport.close()

    def _answer_and_close(self, status: bytes, answer: Problem) -> None:
        """Write ``answer`` as the connection's last response, then close it.

        Written here, not by the app: these refusals come before (or instead
        of) a request the app could be given.
        """
        body = encode(answer)
        head = [b"HTTP/1.1 " + status]
        head += [
            name + b": " + value for name, value in self.server_state.default_headers
        ]
        head += [
            b"content-type: " + PROBLEM_TYPE.encode(),
            b"content-length: " + str(len(body)).encode(),
            b"connection: close",
        ]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()


async def _busy(scope: Any, receive: Any, send: Any) -> None:
    """The answer past ``max_connections``: a retryable 503 problem (H3)."""
    body = encode(
        problem(
            503,
            ERR_BUSY,
            "the server is at its connection limit; try again",
            retryable=True,
        )
    )
    headers = [
        (b"content-type", PROBLEM_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def header_timeout_protocol(seconds: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class for uvicorn's ``Config(http=...)``, with ``seconds``.

    A class, not an instance or a partial: uvicorn builds one per connection.
    """
    if seconds <= 0:
        raise ValueError(f"the header timeout must be positive, not {seconds!r}")

    class Timed(HeaderTimeoutProtocol):
        header_timeout_s = float(seconds)

    return Timed
