"""uvicorn's httptools protocol, with a deadline on each request's head.

Pattern: a subclass of ``HttpToolsProtocol`` (the one ``serve`` runs; httptools
         is a dependency) that arms a timer when a connection opens and when
         a request begins, disarms it when the head is parsed, and closes the
         connection when it fires.
Role:    the face's HTTP server; ``Server`` passes
         ``header_timeout_protocol(config.header_timeout_s)`` to uvicorn.
Emits:   nothing; a request whose head began gets a 408 problem
         (``ERR_REQUEST_TIMEOUT``) before the close, a silent one is closed.

Laws: H3 (a connection that does not finish its request head within
``header_timeout_s`` of opening, or of its request's first byte, is closed:
slow, incomplete requests cannot hold the server's connections).

Why a protocol, not a middleware: uvicorn calls the app only once the head is
complete, and it has no timer of its own for a connection that opens and
dribbles (its keep-alive timer runs only after a response, and any byte
cancels it). Data does not re-arm the timer, so one byte a second buys
nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._wire import PROBLEM_TYPE, encode, problem

ERR_REQUEST_TIMEOUT = "ERR_REQUEST_TIMEOUT"

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
        super().on_headers_complete()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(
            self.header_timeout_s, self._head_timed_out
        )

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun and (self.cycle is None or self.cycle.response_complete):
            body = encode(
                problem(
                    408,
                    ERR_REQUEST_TIMEOUT,
                    f"no request head within {self.header_timeout_s:g} s",
                )
            )
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\n"
                + b"content-type: "
                + PROBLEM_TYPE.encode()
                + b"\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\nconnection: close\r\n\r\n"
                + body
            )
        self.transport.close()


def header_timeout_protocol(seconds: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class for uvicorn's ``Config(http=...)``, with ``seconds``.

    A class, not an instance or a partial: uvicorn builds one per connection.
    """
    if seconds <= 0:
        raise ValueError(f"the header timeout must be positive, not {seconds!r}")

    class Timed(HeaderTimeoutProtocol):
        header_timeout_s = float(seconds)

    return Timed
