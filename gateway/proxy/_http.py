"""The proxy over Streamable HTTP: sessions, limits, hardening, resumable streams.

Pattern: an ASGI app that admits, runs and ends sessions itself: per
         handshake-era session one ``ProxySession``, one SDK transport and
         one event store (``_resume``), driven by the SDK's ``serve_loop``;
         a 2026-07-28 request (no session on that revision) is one
         ``ProxySession`` of its own, answered by the SDK's modern handler
         (a plain ``tools/call`` by ``gateway.fast.HttpLane``, its kernel).
Role:    gateway layer; ``McpProxy.http_app()``, served by ``_uvicorn``.
Emits:   through the sessions; the manifest and ``on_session_closed`` at
         every session end.

Laws: P11, P17, P18, P19, P24, P25, H6 (each at the code that keeps it).

Why not the SDK's ``StreamableHTTPSessionManager``: one server and event
store for every session, established sessions only counted, idle (not
absolute) lifetimes; P17–P19 need each of these per session.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio
import mcp.types as types
import msgspec
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.runner import serve_loop
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
)
from mcp_types import jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..fast import HttpLane
from ._layers import RejectionReason, uuid4_hex
from ._resume import SessionEventStore
from ._routing import has_progress
from ._session import ProxySession

log = logging.getLogger("helmlog.proxy")

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_decode = msgspec.json.Decoder().decode


HANDSHAKE_VERSIONS = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
_UNPARSED = object()  # a body that is not JSON (``None`` is JSON's null)
# The id the SDK's transport puts on an error whose request id it does not
# know; JSON-RPC 2.0 wants null there (H6).
_SDK_UNKNOWN_ID = "server-error"


def _error_body(
    status: int,
    code: int,
    message: str,
    reason: str | None,
    request_id: str | int | None = None,
) -> Any:
    """A JSON-RPC error answer; ``id`` is null when the request's is unknown."""
    from starlette.responses import Response

    error: dict[str, Any] = {"code": code, "message": message}
    if reason is not None:
        error["data"] = {"rejection_reason": reason}
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return Response(json.dumps(body), status_code=status, media_type="application/json")


class SessionHost(Protocol):
    """What the HTTP app needs of the proxy (``McpProxy`` is one): its limits,
    and the making, identifying and ending of sessions."""

    allowed_hosts: Sequence[str] | None
    allowed_origins: Sequence[str] | None
    max_body_bytes: int
    max_sessions: int
    session_ttl_s: float

    async def identify(
        self, headers: Mapping[str, str]
    ) -> tuple[Any, tuple[Any, ...]]: ...

    def open_session(
        self,
        *,
        transport: str,
        session_id: str | None,
        identity: Any = None,
        delegated_from: tuple[Any, ...] = (),
    ) -> ProxySession: ...

    async def close_session(self, session: ProxySession) -> None: ...

    def closed_at_once(self, session: ProxySession) -> bool: ...


class _Live:
    """One session: its SDK transport and its event store (P19, P25)."""

    __slots__ = ("ended", "events", "proxy_session", "transport")

    def __init__(
        self,
        transport: StreamableHTTPServerTransport,
        proxy_session: ProxySession,
        events: SessionEventStore,
    ) -> None:
        self.transport = transport
        self.proxy_session = proxy_session
        self.events = events
        self.ended = False


def _allowed(value: str, patterns: list[str]) -> bool:
    for allowed in patterns:
        if value == allowed:
            return True
        if allowed.endswith(":*") and value.startswith(allowed[:-1]):
            return True
    return False


class ProxyHttpApp:
    """The HTTP proxy as an ASGI app (its lifespan holds the sessions)."""

    def __init__(self, proxy: SessionHost, *, path: str = "/mcp") -> None:
        self.proxy = proxy
        self.path = path
        hosts = list(proxy.allowed_hosts or ())
        origins = list(proxy.allowed_origins or ())
        for name in ("127.0.0.1", "localhost", "[::1]"):
            hosts += [name, f"{name}:*"]
            origins += [f"http://{name}", f"http://{name}:*"]
        self.allowed_hosts = hosts
        self.allowed_origins = origins
        self.live: dict[str, _Live] = {}
        self.admitting = 0
        # P25: a plain 2026-era tools/call beside the SDK's entry (``gateway.fast``)
        self.lane = HttpLane()
        self._lock = anyio.Lock()
        self._tg: Any = None

    # -- lifespan ---------------------------------------------------------

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the sessions' task group until cancelled; then end every session."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await self.shutdown()

    async def shutdown(self) -> None:
        """P18: proxy shutdown ends every live session (manifest included)."""
        for sid in list(self.live):
            await self._end(sid)
        self._tg = None

    async def _lifespan(self, receive: Any, send: Any) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        async with anyio.create_task_group() as tg:
            await tg.start(self.run)
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            tg.cancel_scope.cancel()
        await send({"type": "lifespan.shutdown.complete"})

    # -- requests ---------------------------------------------------------

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        head = _headers(scope["headers"])
        refusal = self._check_origin(head)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if scope["path"] != self.path:  # H6: one path; ``/mcp/`` is not it
            response = _error_body(404, types.INVALID_REQUEST, "Not Found", None)
            await response(scope, receive, send)
            return
        body, too_big = await self._body(receive)
        if too_big:
            limit = f"the request body exceeds {self.proxy.max_body_bytes} bytes"
            response = _error_body(
                413, types.INVALID_REQUEST, limit, RejectionReason.BODY_LIMIT.value
            )
            await response(scope, receive, send)
            return
        replay = _replayer(body, receive)
        sid = head.get(MCP_SESSION_ID_HEADER)
        version = head.get("mcp-protocol-version")
        if sid is None and version is not None and version not in HANDSHAKE_VERSIONS:
            await self._modern(head, body, scope, replay, send)
        elif sid is not None:
            await self._existing(sid, head, body, scope, replay, send)
        else:
            from starlette.requests import Request

            await self._initialize(Request(scope, replay), body, scope, replay, send)

    def _check_origin(self, head: dict[str, str]) -> Any:
        host = head.get("host", "")
        origin = head.get("origin")
        if not _allowed(host, self.allowed_hosts):
            return _error_body(403, types.INVALID_REQUEST, "Invalid Host header", None)
        if origin is not None and not _allowed(origin, self.allowed_origins):
            return _error_body(
                403, types.INVALID_REQUEST, "Invalid Origin header", None
            )
        return None

    async def _body(self, receive: Any) -> tuple[bytes, bool]:
        limit = self.proxy.max_body_bytes
        chunks = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks += message.get("body", b"")
            if len(chunks) > limit:
                return b"", True
            if not message.get("more_body", False):
                break
        return bytes(chunks), False

    async def _existing(
        self,
        sid: str,
        head: dict[str, str],
        body: bytes,
        scope: Any,
        receive: Any,
        send: Any,
    ) -> None:
        live = self.live.get(sid)
        if live is None:
            response = _error_body(
                404, types.INVALID_REQUEST, "Session not found", None
            )
            await response(scope, receive, send)
            return
        last = head.get("last-event-id")
        if last is not None and not live.events.knows(last):
            # P19: unknown, or another session's: nothing is replayed.
            response = _error_body(
                404, types.INVALID_REQUEST, "Unknown Last-Event-ID", None
            )
            await response(scope, receive, send)
            return
        method = scope["method"]
        message = _decoded(body) if method == "POST" else None
        if message is _UNPARSED:  # H6: never the SDK's json.loads (a 500)
            await _parse_error()(scope, receive, send)
            return
        if method == "POST":
            refusal = _not_a_message(message)
            if refusal is not None:  # H6: typed, 400, and the session unharmed
                await refusal(scope, receive, send)
                return
        await live.transport.handle_request(scope, receive, _null_ids(send))
        if live.transport.is_terminated:
            await self._end(sid)  # P18: a DELETE ends it before this returns

    async def _initialize(
        self, request: Any, body: bytes, scope: Any, receive: Any, send: Any
    ) -> None:
        if request.method != "POST":
            response = _error_body(
                400, types.INVALID_REQUEST, "Bad Request: no session", None
            )
            await response(scope, receive, send)
            return
        message = _decoded(body)
        if message is _UNPARSED:
            await _parse_error()(scope, receive, send)
            return
        refusal = _not_a_message(message)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if not (isinstance(message, dict) and message.get("method") == "initialize"):
            response = _error_body(
                400,
                types.INVALID_REQUEST,
                "Bad Request: not an initialize and no session",
                None,
            )
            await response(scope, receive, send)
            return
        proxy = self.proxy
        async with self._lock:  # P17: initializing sessions count too
            full = len(self.live) + self.admitting >= proxy.max_sessions
            if not full:
                self.admitting += 1
        if full:
            response = _error_body(
                503,
                types.INTERNAL_ERROR,
                "Too many open sessions",
                RejectionReason.SESSION_LIMIT.value,
            )
            await response(scope, receive, send)
            return
        try:
            await self._open(request, scope, receive, send)
        finally:
            self.admitting -= 1

    async def _identify(
        self, head: Mapping[str, str], scope: Any, receive: Any, send: Any
    ) -> tuple[Any, tuple[Any, ...]] | None:
        """P17: the caller's identity, or ``None`` once a 401 is answered."""
        try:
            return await self.proxy.identify(head)
        except Exception as exc:  # noqa: BLE001 — P17: no identity, no session
            log.info("proxy: identity not resolved: %s", exc)
            response = _error_body(
                401,
                types.INVALID_REQUEST,
                "Unauthorized: the caller's identity could not be resolved",
                RejectionReason.IDENTITY_UNRESOLVED.value,
            )
            await response(scope, receive, send)
            return None

    async def _modern(
        self, head: dict[str, str], body: bytes, scope: Any, receive: Any, send: Any
    ) -> None:
        """A 2026-07-28 request: one session of its own (that revision has no
        HTTP session), its identity resolved from its headers (P17), closed
        with its manifest when answered (P18); the SDK answers it."""
        message: Any = None
        route = None
        if scope["method"] == "POST":
            message = _decoded(body)
            if message is _UNPARSED:
                await _parse_error()(scope, receive, send)
                return
            # A message the lane takes is a JSON-RPC request (its envelope
            # checked there): ``_not_a_message`` would pass it (H6 unchanged).
            route = self.lane.route(message, scope, head)
            refusal = None if route is not None else _not_a_message(message)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        who = await self._identify(head, scope, receive, send)
        if who is None:
            return
        identity, delegated = who
        session = self.proxy.open_session(
            transport="http",
            session_id=uuid4_hex(),
            identity=identity,
            delegated_from=delegated,
        )
        # The progress rule: only a request that asks for progress needs SSE;
        # every other answer is one JSON body (the SDK's ``json_response``).
        params = message.get("params") if isinstance(message, dict) else None
        json_response = not has_progress(params)
        out = _null_ids(send)
        if not session.fast:
            route = None
        try:
            if route is None or not await self.lane.answer(
                session, route, message, scope, receive, out
            ):
                await handle_modern_request(
                    session.server, None, json_response, {}, scope, receive, out
                )
        finally:
            # P18: closed whole even when cancelled (a shield costs ~10 µs:
            # only where the close awaits something)
            if not self.proxy.closed_at_once(session):
                with anyio.CancelScope(shield=True):
                    await self.proxy.close_session(session)

    async def _open(self, request: Any, scope: Any, receive: Any, send: Any) -> None:
        proxy = self.proxy
        raw = {k.lower(): v for k, v in request.headers.items()}
        who = await self._identify(raw, scope, receive, send)
        if who is None:
            return
        identity, delegated = who
        sid = uuid.uuid4().hex
        events = SessionEventStore()
        transport = StreamableHTTPServerTransport(
            mcp_session_id=sid, is_json_response_enabled=False, event_store=events
        )
        session = proxy.open_session(
            transport="http",
            session_id=sid,
            identity=identity,
            delegated_from=delegated,
        )
        live = _Live(transport, session, events)
        self.live[sid] = live
        assert self._tg is not None, "the HTTP proxy's lifespan is not running"
        await self._tg.start(self._serve, sid, live)
        status = await _status_of(
            transport.handle_request, scope, receive, _null_ids(send)
        )
        if status is None or status >= 400:
            await self._end(sid)  # P18: a failed initialize leaves nothing

    async def _serve(self, sid: str, live: _Live, *, task_status: Any) -> None:
        try:
            async with live.transport.connect() as (read, write):
                task_status.started()
                session = live.proxy_session
                with anyio.move_on_after(self.proxy.session_ttl_s):  # P17: absolute
                    await serve_loop(
                        session.server,
                        read,
                        write,
                        lifespan_state={},
                        session_id=sid,
                        init_options=session.initialization_options(),
                    )
        finally:
            with anyio.CancelScope(shield=True):
                await self._end(sid)

    async def _end(self, sid: str) -> None:
        """P18: remove the session, terminate it, finalize it — exactly once."""
        live = self.live.pop(sid, None)
        if live is None or live.ended:
            return
        live.ended = True
        with anyio.CancelScope(shield=True):
            if not live.transport.is_terminated:
                await live.transport.terminate()
            await self.proxy.close_session(live.proxy_session)


def _headers(raw: Any) -> dict[str, str]:
    """A request's headers by (lowercased) name, the first of repeats (Starlette's)."""
    out: dict[str, str] = {}
    for key, value in raw:
        name = key.decode("latin-1")
        if name not in out:
            out[name] = value.decode("latin-1")
    return out


def _decoded(body: bytes) -> Any:
    """The body as JSON (strict UTF-8), or ``_UNPARSED``."""
    try:
        return _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return _UNPARSED


def _parse_error() -> Any:
    """H6: a body that is not JSON (bytes that are not UTF-8 included)."""
    return _error_body(400, types.PARSE_ERROR, "Parse error", None)


def _not_a_message(message: Any) -> Any:
    """H6: 400 invalid request for JSON that is not one JSON-RPC message,
    with the request's id where it has a usable one; ``None`` if it is one.

    A request or notification whose ``id`` is not a string or a number is
    refused here: the SDK's models would take it for a notification.
    """
    try:
        if isinstance(message, dict) and "method" in message and "id" in message:
            rid = message["id"]
            if isinstance(rid, bool) or not isinstance(rid, (str, int)):
                raise ValueError("a request id is a string or a number")
        jsonrpc_message_adapter.validate_python(message)
    except ValueError:  # pydantic's ValidationError is one
        rid = message.get("id") if isinstance(message, dict) else None
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            rid = None
        invalid = "Invalid Request: not a JSON-RPC message"
        return _error_body(400, types.INVALID_REQUEST, invalid, None, rid)
    except RecursionError:
        return _error_body(
            400, types.INVALID_REQUEST, "Invalid Request: nested too deeply", None
        )
    return None


def _null_ids(send: Any) -> Any:
    """H6: the SDK transport's error answers as JSON-RPC errors: ``"id":
    null`` where it wrote ``"server-error"`` (a request id it does not know),
    and its plain-text ones (``Invalid Content-Type header``) put in one."""
    held: dict[str, Any] | None = None
    chunks: list[bytes] = []

    async def out(message: Any) -> None:
        nonlocal held
        kind = message["type"]
        if kind == "http.response.start" and message["status"] >= 400:
            held = message
            return
        if held is None or kind != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = _nulled(b"".join(chunks), held["status"])
        headers = [
            (k, v)
            for k, v in held.get("headers", [])
            if k.lower() not in (b"content-length", b"content-type")
        ]
        headers.append((b"content-length", str(len(body)).encode()))
        headers.append((b"content-type", b"application/json"))
        start, held = {**held, "headers": headers}, None
        await send(start)
        await send({"type": "http.response.body", "body": body})

    return out


def _nulled(body: bytes, status: int) -> bytes:
    answer = _decoded(body)
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        if answer.get("id") == _SDK_UNKNOWN_ID:
            answer["id"] = None
            return json.dumps(answer).encode()
        return body
    code = types.INTERNAL_ERROR if status >= 500 else types.INVALID_REQUEST
    text = body.decode("utf-8", "replace").strip()[:200] or f"HTTP {status}"
    error = {"code": code, "message": text}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


def _replayer(body: bytes, received: Callable[[], Any]) -> Callable[[], Any]:
    """The request's ``receive`` once its body was read: the body again, then
    the connection's own (its ``http.disconnect`` when the client goes: a
    stream answered with SSE, a listen stream among them, ends with it)."""
    sent = False

    async def receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await received()

    return receive


async def _status_of(app: Any, scope: Any, receive: Any, send: Any) -> int | None:
    status: int | None = None

    async def watch(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watch)
    return status
