"""uvicorn's HTTP/1.1 protocol writing an answer's head and body in one write.

Pattern: ``OneWriteProtocol`` is uvicorn's ``HttpToolsProtocol`` (the one its
         ``http="auto"`` picks with ``httptools`` installed) on a transport
         whose writes within one turn of the event loop are joined and sent
         at the end of that turn (``_Joined``), or as soon as the answer is
         complete (what runs after it, a session's close, waits no more);
         a ``close`` sends what is held first. The bytes on the wire are the
         same, in the same order.
Role:    gateway layer; ``gateway/proxy/_uvicorn.py`` serves the HTTP proxy
         with it (``server_config(http=OneWriteProtocol)``).
Emits:   nothing.

Laws: P25 (the same answer: ``test_proxy_one_write.py`` reads the raw bytes
of answers served with it and without it and compares them).

Why: uvicorn writes a response's head on ``http.response.start`` and its
body on ``http.response.body``: two sends, two segments on the wire, and
the client woken twice for one JSON answer (bench/proxy.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _Joined:
    """A transport whose writes of one loop turn go out as one write."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        if not self._held:
            return  # sent already (the answer completed): the turn's end has none
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        held = sum(len(data) for data in self._held)
        return held + self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:  # the rest is the transport's
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` on a ``_Joined`` transport (see the module)."""

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        super().connection_made(_Joined(transport))  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        # The answer is whole: its bytes go now, not after the rest of the
        # app's turn (the session's close, the audit's manifest).
        joined = self.transport
        if isinstance(joined, _Joined):
            joined._flush()
        super().on_response_complete()
