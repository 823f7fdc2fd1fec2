"""Raw calls over the proxy's Streamable HTTP link: one POST each, read in the caller.

Pattern: the caller's task posts its request (msgspec, an id of our own) on
         the link's kept-alive client and reads the answer, a JSON body or an
         SSE stream whose other messages go on to the ``ClientSession``.
Role:    gateway layer; ``upstream_http`` hands it to ``Upstream.call_raw``;
         it uses the link through the narrow ``Link`` protocol.
Emits:   nothing.

Laws: P25 (progress ahead of the reply; a cancel is one more POST; a cut
stream resumes with ``Last-Event-ID``), issue 10 item 8.

Why in the caller's task with no pending table: on Streamable HTTP a POST's
reply comes on its own response, so there is nothing to route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, Protocol

import anyio
import httpx
import mcp.types as types
import msgspec
from mcp.shared.message import SessionMessage
from mcp.shared.session import ProgressFnT

from ._http_wire import HttpWire, WireError, sse_events
from ._raw import PREFIX, cancel_of, error_of, request_of, timed_out, went_away

log = logging.getLogger("helmlog.proxy")
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
MARK = '"hl-'
ACCEPT = "application/json, text/event-stream"
SESSION = "mcp-session-id"
VERSION = "mcp-protocol-version"
READY_S = 5.0
TAIL_S = 1.0  # how long a reply's SSE stream may take to end before it is closed


class Link(Protocol):
    """What raw posts use of the HTTP link (``_http._Link``), passed in."""

    url: str
    client: httpx.AsyncClient
    wire: HttpWire | None
    read: Any
    listening: anyio.Event

    def headers(self, accept: str) -> dict[str, str]: ...

    async def deliver(self, data: str) -> bool: ...

    async def events(
        self,
        body: AsyncIterator[bytes],
        take: Callable[[str], Awaitable[bool]] | None = None,
    ) -> str | Literal[False] | None: ...

    async def resumed(
        self, last_id: str, take: Callable[[str], Awaitable[bool]] | None = None
    ) -> bool: ...


class _Call:
    """One raw call's reading of its answer: the reply, and progress relayed."""

    __slots__ = ("link", "progress", "reply", "rid")

    def __init__(self, link: Link, rid: str, progress: ProgressFnT | None) -> None:
        self.link = link
        self.rid = rid
        self.progress = progress
        self.reply: dict[str, Any] | None = None

    async def take(self, data: str) -> bool:
        """One SSE message: ours is kept (or relayed), any other goes to the session."""
        if MARK not in data:
            return await self.link.deliver(data)
        message = _decode(data)
        if type(message) is dict:
            rid = message.get("id")
            if rid == self.rid and "method" not in message:
                self.reply = message
                return True
            params = message.get("params")
            if (
                rid is None
                and self.progress is not None
                and message.get("method") == "notifications/progress"
                and type(params) is dict
                and params.get("progressToken") == self.rid
                and "progress" in params
            ):
                await self.progress(
                    params["progress"], params.get("total"), params.get("message")
                )
                return False
        parsed = types.JSONRPCMessage.model_validate(message)
        await self.link.read.send(SessionMessage(parsed))
        return isinstance(parsed.root, types.JSONRPCResponse | types.JSONRPCError)


class RawPosts:
    """``call`` for ``Upstream.call_raw`` over one ``_Link``."""

    def __init__(self, link: Link, label: str) -> None:
        self.link = link
        self.label = label
        self._n = 0
        # plain http: the link's own kept-alive connections; https: its httpx
        self.wire = link.wire

    async def ready(self) -> None:
        """Wait (briefly) for the GET stream, so no early list_changed is lost.

        A Streamable HTTP server drops a notification it has no stream for;
        until the GET stream is open, the upstream's list_changed is lost.
        """
        with anyio.move_on_after(READY_S):
            await self.link.listening.wait()

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None,
        timeout_s: float | None = None,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Post one request and return its ``result``; see ``Upstream.call_raw``."""
        self._n += 1
        rid = f"{PREFIX}{self._n}"
        body = _encode(request_of(rid, method, params, progress is not None))
        call = _Call(self.link, rid, progress)
        try:
            post = (
                self._post(body, call)
                if self.wire is None
                else self._post_wire(self.wire, body, call)
            )
            if timeout_s:
                with anyio.fail_after(timeout_s):
                    reply = await post
            else:
                reply = await post
        except TimeoutError:
            raise timed_out(method, timeout_s or 0) from None
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._cancel(rid)
            raise
        except (
            httpx.HTTPError,
            WireError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            ValueError,
        ) as exc:
            raise went_away(self.label, str(exc) or type(exc).__name__) from exc
        if "error" in reply:
            raise error_of(reply["error"])
        result = reply.get("result")
        return result if type(result) is dict else {}

    async def _post_wire(
        self, wire: HttpWire, body: bytes, call: _Call
    ) -> dict[str, Any]:
        link = self.link
        last_id: str | None = None
        async with wire.request("POST", link.headers(ACCEPT), body) as answer:
            if answer.status >= 400 or answer.status == 202:
                raise WireError(f"HTTP {answer.status}")
            chunks = answer.chunks()
            if answer.headers.get(b"content-type", b"").startswith(b"application/json"):
                await call.take((await answer.read()).decode())
            else:
                buffer = bytearray()
                try:
                    async for chunk in chunks:
                        for event in sse_events(buffer, chunk):
                            if event["id"] is not None:
                                last_id = event["id"]
                            if event["data"].strip():
                                await call.take(event["data"])
                        if call.reply is not None:
                            break
                except WireError:
                    if last_id is None:
                        raise
                if call.reply is not None and not answer.complete:
                    # The server ends the stream right after the reply: read
                    # to its end so the connection serves the next call.
                    with anyio.move_on_after(TAIL_S):
                        async for _chunk in chunks:
                            pass
        if call.reply is None and last_id is not None:
            await link.resumed(last_id, call.take)
        if call.reply is None:
            raise WireError("the reply stream ended before the reply")
        return call.reply

    async def _post(self, body: bytes, call: _Call) -> dict[str, Any]:
        link = self.link
        async with link.client.stream(
            "POST", link.url, content=body, headers=link.headers(ACCEPT)
        ) as response:
            status = response.status_code
            if status >= 400 or status == 202:
                await response.aread()
                raise httpx.HTTPError(f"HTTP {status}")
            kind = response.headers.get("content-type", "")
            if kind.startswith("application/json"):
                await call.take((await response.aread()).decode())
                if call.reply is None:
                    raise httpx.HTTPError("the JSON answer was not the reply")
                return call.reply
            last_id = await link.events(response.aiter_bytes(), call.take)
        if call.reply is None and last_id is not False and last_id is not None:
            await link.resumed(last_id, call.take)
        if call.reply is None:
            raise httpx.HTTPError("the reply stream ended before the reply")
        return call.reply

    async def _cancel(self, rid: str) -> None:
        link = self.link
        try:
            response = await link.client.post(
                link.url, content=_encode(cancel_of(rid)), headers=link.headers(ACCEPT)
            )
        except httpx.HTTPError as exc:
            log.info("proxy: a cancel to %s failed: %s", link.url, exc)
            return
        if response.status_code >= 400:
            log.info(
                "proxy: %s refused a cancel: HTTP %s", link.url, response.status_code
            )
