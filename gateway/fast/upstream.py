"""The fast path of a plain ``tools/call`` to an HTTP upstream: one raw POST.

Pattern: ``FastPosts`` posts the JSON-RPC request itself, in the handshake
         session, or stamped by the 2026-era session as a request of no
         session: on the link's ``HttpWire`` (``wire.py``: the SDK
         transport's client's settings, carried whole), else on that
         ``httpx2`` client; reads the JSON or SSE answer to its end (the
         connection kept alive); checks it with the SDK's per-version validator.
Role:    gateway layer; ``Upstream.call_raw`` takes it for ``tools/call``
         without progress when it is ``ready``; everything else is the SDK's.
Emits:   nothing; a cancel sends ``notifications/cancelled`` (2026: the close).

Laws: P25 (the answer, the error and the cancel are the SDK path's:
``test_proxy_fast.py``, ``test_upstream_wire.py``, ``test_proxy_eras.py``;
a 2026-era answer in the handshake era's shape, so both are audited alike),
P26, H4. Why: the SDK's client costs a task, memory streams, models and a
TCP connect per call; httpx2 and h11 ~1.3 ms of CPU more than the wire.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    KNOWN_PROTOCOL_VERSIONS,
    MODERN_PROTOCOL_VERSIONS,
)
from pydantic import TypeAdapter

from .._withheld import withheld
from .wire import HttpWire, WireError, WireResponse, wire_for

log = logging.getLogger("helmlog.proxy")

SESSION = "mcp-session-id"
VERSION = "mcp-protocol-version"
_LATER = ("resultType", "requestState", "inputRequests")  # 2026-07-28's own

Stamp = Callable[[dict[str, Any], Any], None]
"""A ``ClientSession``'s ``_stamp``: its envelope and headers on a request."""


def handshake_shape(result: dict[str, Any]) -> dict[str, Any]:
    """A 2026-era ``tools/call`` result in the handshake era's shape: without
    the fields that revision adds (``resultType`` and the input-required
    ones), as the SDK's handshake session hands on a later revision's answer.

    Raises:
        MCPError: the upstream asked for input (``input_required``), which the
            proxy does not relay.
    """
    kind = result.get("resultType", "complete")
    if kind != "complete":
        raise MCPError(
            types.INTERNAL_ERROR,
            f"the upstream MCP server answered {kind!r}, not relayed by the proxy",
        )
    if any(key in result for key in _LATER):
        result = {k: v for k, v in result.items() if k not in _LATER}
    return result


@functools.cache
def _result_adapter(version: str) -> TypeAdapter[Any]:
    surface: Any = methods.SERVER_RESULTS[("tools/call", version)]
    return TypeAdapter(surface)


def check_result(version: str, result: dict[str, Any]) -> None:
    """``methods.validate_server_result("tools/call", version, result)``: the
    same surface check and errors, without the dump it makes and drops.

    Raises:
        ValueError: ``version`` is not a known protocol version.
        KeyError: the version has no ``tools/call``.
        pydantic.ValidationError: a result the version does not allow.
    """
    if version not in KNOWN_PROTOCOL_VERSIONS:
        methods.validate_server_result("tools/call", version, result)  # its error
    _result_adapter(version).validate_python(result, by_name=False)


class HttpLink:
    """What the fast path needs of an HTTP upstream's connection: its client,
    its URL and the session id the upstream gave at initialize."""

    def __init__(
        self,
        url: str,
        label: str,
        verify: ssl.SSLContext | bool | None = None,
        on_status: Callable[[int, str], None] | None = None,
    ) -> None:
        self.url = url
        self.label = label
        # The TLS setting the client is built with; ``None``: a caller's own
        # client, whose settings the wire cannot know (``wire.wire_for``).
        self.verify = verify
        self.on_status = on_status
        self.client: httpx2.AsyncClient | None = None
        self.wire: HttpWire | None = None
        self.session_id: str | None = None
        # The session id the upstream answered 404 to (it no longer knows
        # it: restarted, or expired it); the spec's client starts a new
        # session then (``Upstream`` shakes hands again).
        self.lost: str | None = None
        # The SDK's client has had its answer to the standalone GET stream:
        # from then on the upstream's notifications have a stream to go to
        # (one sent before it is lost, on either path).
        self.listening = anyio.Event()

    def attach(self, client: httpx2.AsyncClient) -> None:
        """Use ``client`` (the SDK transport's) and note the session id it gets;
        the raw POSTs go on a wire with its settings where one carries them."""
        self.client = client
        self.wire = wire_for(self.url, client, self.verify, self.on_status)

        async def noted(response: httpx2.Response) -> None:
            sid = response.headers.get(SESSION)
            if sid is not None and self.session_id is None:
                self.session_id = sid
            if response.status_code == 404:
                self.note_status(404, response.request.headers.get(SESSION))
            if response.request.method == "GET":
                self.listening.set()

        client.event_hooks["response"] = [*client.event_hooks["response"], noted]

    def note_status(self, status: int, session_id: str | None) -> None:
        """A 404 to a request that carried this link's session id: the
        upstream no longer knows the session (``lost``)."""
        if status == 404 and session_id is not None and session_id == self.session_id:
            self.lost = session_id


class FastPosts:
    """Raw ``tools/call`` POSTs to one HTTP upstream session (see the module)."""

    def __init__(
        self,
        link: HttpLink,
        version: str | None,
        notify: Callable[[Any], Awaitable[None]] | None = None,
        stamp: Stamp | None = None,
    ) -> None:
        self.link = link
        self.version = version
        self.notify = notify  # the session's: notifications sent on an answer
        # The 2026-era session's stamp: each call a request of its own (its
        # envelope and routing headers), in no session; ``None``: the
        # handshake-era session's calls.
        self.stamp = stamp
        self._ids = itertools.count(1)
        self.posted = 0  # calls this path took (the differential tests)

    @property
    def ready(self) -> bool:
        """A handshake-era session with an id, or a 2026-era one, on a client:
        the fast path's ground."""
        link = self.link
        if self.stamp is not None:
            return link.client is not None and self.version in MODERN_PROTOCOL_VERSIONS
        return (
            link.client is not None
            and link.session_id is not None
            and link.listening.is_set()
            and self.version is not None
            and self.version in HANDSHAKE_PROTOCOL_VERSIONS
        )

    def _headers(self) -> dict[str, str]:
        assert self.link.session_id is not None and self.version is not None
        return {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            SESSION: self.link.session_id,
            VERSION: self.version,
        }

    def _stamped(
        self, rid: str, params: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The body and headers of a 2026-07-28 ``tools/call``: stamped as the
        2026-era session stamps its own (envelope, ``Mcp-Method``/``Mcp-Name``,
        the ``Mcp-Param-*`` headers of a tool it has listed)."""
        assert self.stamp is not None
        meta = params.get("_meta")
        sent = {**params, "_meta": dict(meta) if isinstance(meta, dict) else {}}
        data: dict[str, Any] = {"method": "tools/call", "params": sent}
        opts: dict[str, Any] = {}
        self.stamp(data, opts)
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **opts.get("headers", {}),
        }
        body = {"jsonrpc": "2.0", "id": rid, **data}
        return body, headers

    async def call(self, params: dict[str, Any]) -> dict[str, Any]:
        """One ``tools/call``: its result, checked as the SDK checks it.

        Raises:
            MCPError: the upstream's error; a transport failure as the
                upstream gone (H4); ``pydantic.ValidationError`` for a result
                the negotiated version does not allow (as the SDK raises).
        """
        client = self.link.client
        assert client is not None and self.version is not None
        rid = f"hl-{next(self._ids)}"
        self.posted += 1
        if self.stamp is None:
            body: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": params,
            }
            headers = self._headers()
        else:
            body, headers = self._stamped(rid, params)
        try:
            message = await self._post(client, body, rid, headers)
        except anyio.get_cancelled_exc_class():
            if self.stamp is None:  # at 2026, the POST's closing is the cancel
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self._cancel(client, rid)
            raise
        except (httpx2.HTTPError, WireError, TimeoutError) as exc:
            raise withheld(  # H4: the URL and the cause only in the log
                "the upstream MCP server went away",
                detail=f"{self.link.label}: {type(exc).__name__}: {exc}",
            ) from exc
        error = message.get("error")
        if isinstance(error, dict) and (error.get("code"), error.get("data")) == (
            types.CONNECTION_CLOSED,
            None,
        ):  # the POST failed (``_http._Answering``): as ``Upstream.request`` says it
            raise withheld(
                "the upstream MCP server went away",
                detail=f"{self.link.label}: {error.get('message')}",
            )
        if isinstance(error, dict):
            raise MCPError(
                error.get("code", types.INTERNAL_ERROR),
                error.get("message", ""),
                error.get("data"),
            )
        result = message.get("result")
        if not isinstance(result, dict):
            raise withheld(
                "the upstream MCP server answered no result", detail=self.link.label
            )
        check_result(self.version, result)
        return result if self.stamp is None else handshake_shape(result)

    async def _post(
        self,
        client: httpx2.AsyncClient,
        body: dict[str, Any],
        rid: str,
        headers: dict[str, str],
    ) -> dict[str, Any]:
        content = json.dumps(body, separators=(",", ":")).encode()
        wire = self.link.wire
        if wire is not None:
            async with wire.request("POST", headers, content) as answer:
                return await self._answer(answer, rid)
        async with client.stream(
            "POST", self.link.url, content=content, headers=headers
        ) as response:
            kind = response.headers.get("content-type", "")
            if response.status_code >= 300 and not kind.startswith("application/json"):
                raise httpx2.HTTPStatusError(
                    f"HTTP {response.status_code}",
                    request=response.request,
                    response=response,
                )
            if kind.startswith("text/event-stream"):
                return await _from_events(response, rid, self._noted)
            message = json.loads(await response.aread())
            if not isinstance(message, dict):
                raise httpx2.DecodingError("not a JSON-RPC message")
            return message

    async def _answer(self, answer: WireResponse, rid: str) -> dict[str, Any]:
        """The wire's answer, read as ``_post`` reads httpx2's."""
        kind = answer.headers.get(b"content-type", b"")
        if answer.status == 404 and self.stamp is None:
            self.link.note_status(404, self.link.session_id)
        if answer.status >= 300 and not kind.startswith(b"application/json"):
            raise WireError(f"HTTP {answer.status}")
        if kind.startswith(b"text/event-stream"):
            return await _from_wire_events(answer, rid, self._noted)
        message = json.loads(await answer.read())
        if not isinstance(message, dict):
            raise WireError("not a JSON-RPC message")
        return message

    async def _noted(self, message: dict[str, Any]) -> None:
        """A notification on the answer's stream (list_changed, a log line):
        to the session's handler, as the SDK's client would hand it on."""
        method = message.get("method")
        if self.notify is None or not isinstance(method, str) or self.version is None:
            return
        if method in ("notifications/progress", "notifications/cancelled"):
            return  # about this call, which asked for no progress
        try:
            note = methods.parse_server_notification(
                method, self.version, message.get("params")
            )
        except (KeyError, ValueError):  # unknown at this version, or malformed
            log.debug("proxy: dropped an upstream notification %r", method)
            return
        await self.notify(note)

    async def _cancel(self, client: httpx2.AsyncClient, rid: str) -> None:
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": rid, "reason": "cancelled by client"},
        }
        content = json.dumps(note).encode()
        wire = self.link.wire
        try:
            if wire is not None:
                async with wire.request("POST", self._headers(), content) as answer:
                    await answer.read()
                return
            response = await client.post(
                self.link.url, content=content, headers=self._headers()
            )
            await response.aclose()
        except (httpx2.HTTPError, WireError, TimeoutError):  # best effort: the
            return  # call is gone either way


async def _from_wire_events(
    answer: WireResponse,
    rid: str,
    noted: Callable[[dict[str, Any]], Awaitable[None]],
) -> dict[str, Any]:
    """``_from_events`` on the wire: the same reading of an SSE answer, except
    that the message answering ``rid`` is returned as soon as it is read (the
    server ends the stream after it); the rest is read after, its
    notifications to ``noted`` too, and the connection then kept alive."""
    pending = b""
    while (chunk := await answer.next_chunk()) is not None:
        pending += chunk
        *events, pending = _EVENT_END.split(pending)
        for n, event in enumerate(events):
            message = _event_message(event)
            if not isinstance(message, dict):
                continue
            if message.get("id") == rid:
                for later in events[n + 1 :]:
                    await _note(_event_message(later), noted)
                answer.release(_Rest(pending, noted))
                return message
            await _note(message, noted)
    message = _event_message(pending) if pending.strip() else None
    if isinstance(message, dict) and message.get("id") == rid:
        return message
    raise WireError("the answer's stream ended without it")


async def _note(
    message: Any, noted: Callable[[dict[str, Any]], Awaitable[None]]
) -> None:
    if isinstance(message, dict) and "method" in message and "id" not in message:
        await noted(message)


class _Rest:
    """The events of a released answer after its message: notifications on."""

    def __init__(
        self, pending: bytes, noted: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        self.pending = pending
        self.noted = noted

    async def __call__(self, chunk: bytes) -> None:
        self.pending += chunk
        *events, self.pending = _EVENT_END.split(self.pending)
        for event in events:
            await _note(_event_message(event), self.noted)


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def _event_message(event: bytes) -> Any:
    """The JSON of one SSE event's ``data:`` lines (``None`` without any)."""
    data = [
        line[5:].lstrip(b" ")
        for line in event.splitlines()
        if line.startswith(b"data:")
    ]
    return json.loads(b"\n".join(data)) if data else None


async def _from_events(
    response: httpx2.Response,
    rid: str,
    noted: Callable[[dict[str, Any]], Awaitable[None]],
) -> dict[str, Any]:
    """The message answering ``rid`` on an SSE answer, read to the stream's end;
    the notifications before it go to ``noted``."""
    found: dict[str, Any] | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
            continue
        if line or not data:
            continue
        message = json.loads("\n".join(data))
        data = []
        if not isinstance(message, dict):
            continue
        if message.get("id") == rid:
            found = message  # the server ends the stream after it
        elif "method" in message and "id" not in message:
            await noted(message)
    if found is None:
        raise httpx2.RemoteProtocolError("the answer's stream ended without it")
    return found
