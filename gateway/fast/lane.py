"""The serving lane: a plain ``tools/call`` answered beside the SDK's dispatcher.

Pattern: ``ServingLane`` watches a session's decoded JSON-RPC messages;
         ``take`` claims a plain ``tools/call`` (no progress token, no task,
         the client's session established: handshake done, or a 2026-07-28
         request whose envelope the SDK's ladder accepts) and runs it through
         the SDK's own kernel (``ServerRunner.on_request`` / ``serve_one``:
         surface validation, middleware, the session's handler, result
         shaping), writing the answer or error as the SDK's dispatcher would.
Role:    gateway layer; the proxy's stdio transport hands it every line
         (``proxy/_stdio.py``); ``McpProxy.fast_calls`` off turns it off.
Emits:   nothing of its own; the session's route records and tells.

Laws: P25 (the answer, the error shape and the cancel are the SDK path's:
``test_proxy_lane.py``), P20 (the same audit rows: the same handler runs).

Why: the SDK's dispatcher costs pydantic message models both ways, memory
streams and a task hop per call; the kernel itself is kept (bench/proxy.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import anyio
import anyio.abc
import msgspec
from mcp.server.connection import Connection
from mcp.server.runner import (
    ServerRunner,
    _has_modern_envelope,
    _NoServerRequestsDispatchContext,
    modern_error_data,
    serve_one,
)
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import (
    handler_exception_to_error_data,
    progress_token_from_params,
)
from mcp.shared.transport_context import TransportContext
from mcp_types import CONNECTION_CLOSED, ErrorData
from pydantic import ValidationError

log = logging.getLogger("helmlog.proxy")

Write = Callable[[bytes], Awaitable[None]]
_encode = msgspec.json.Encoder().encode
_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_SHUTDOWN_WRITE_S = 2.0


class _Dispatch:
    """The ``DispatchContext`` of one lane call: its id, its cancel flag, and
    a back-channel for notifications only (a plain call sends no request)."""

    __slots__ = ("_notify", "cancel_requested", "request_id", "transport")

    def __init__(self, request_id: Any, notify: Write) -> None:
        self.request_id = request_id
        self.transport = TransportContext(kind="jsonrpc", can_send_request=False)
        self.cancel_requested = anyio.Event()
        self._notify = notify

    @property
    def can_send_request(self) -> bool:
        return False

    @property
    def message_metadata(self) -> Any:
        return None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: Any = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: Any = None
    ) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._notify(_encode(message))

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        return None  # no progress token: nothing to report to


def _error_line(request_id: Any, error: ErrorData) -> bytes:
    body = error.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return _encode({"jsonrpc": "2.0", "id": request_id, "error": body})


class ServingLane:
    """One session's serving lane (see the module docstring).

    ``attach`` gives it the session (its SDK ``Server``); until a request
    the SDK served has shown it the connection, it takes nothing.
    """

    def __init__(self, write: Write) -> None:
        self._write = write
        self.session: Any = None
        self.era: str | None = None  # "legacy" or "modern", as the SDK decides
        self.connection: Connection | None = None  # the SDK's, legacy era
        self.outbound: Any = None  # the SDK's notify-only outbound, modern era
        self.lifespan: Any = None
        self.answered = 0  # calls the lane answered (the differential tests)
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        self._in_flight: dict[Any, tuple[anyio.CancelScope, _Dispatch]] = {}

    def attach(self, session: Any) -> None:
        """Serve ``session``'s plain calls (unless its fast paths are off)."""
        if not getattr(session, "fast", True):
            return
        self.session = session
        session.server.middleware.insert(0, self._seen)

    async def _seen(self, ctx: Any, call_next: Any) -> Any:
        """Learn the connection from a request the SDK serves (its own state)."""
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None:
            if self.era == "legacy":
                self.connection = connection
            else:
                self.outbound = connection.outbound
            self.lifespan = ctx.lifespan_context
        return await call_next(ctx)

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Run the lane's calls in ``tg`` (the transport's)."""
        self._tg = tg

    def close(self) -> None:
        """The client is gone (EOF): take nothing more and cancel what runs,
        as the SDK's dispatcher cancels its handlers (each answers
        ``Connection closed``)."""
        self._tg = None
        self._closing = True
        for scope, _dctx in list(self._in_flight.values()):
            scope.cancel()

    # -- claiming ---------------------------------------------------------

    def take(self, message: Any) -> bool:
        """Whether the lane answers ``message`` (it then runs it); every other
        message goes to the SDK unchanged."""
        if not isinstance(message, dict):
            return False
        method = message.get("method")
        if "id" not in message:
            if method == "notifications/cancelled":
                self._cancelled(message.get("params"))
            return False
        params = message.get("params")
        if self.era is None:  # the SDK decides the era on the first request
            if isinstance(method, str):
                modern = method != "initialize" and _has_modern_envelope(
                    params if isinstance(params, Mapping) else None
                )
                self.era = "modern" if modern else "legacy"
            return False
        if method != "tools/call" or self._tg is None or self.session is None:
            return False
        rid = message["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            return False
        if message.get("jsonrpc") != "2.0" or not message.keys() <= _REQUEST_KEYS:
            return False
        if not isinstance(params, dict) or "task" in params:
            return False
        meta = params.get("_meta")
        if meta is not None and (
            not isinstance(meta, dict)
            or "progressToken" in meta
            or progress_token_from_params(params) is not None
        ):
            return False
        enveloped = _has_modern_envelope(params)
        if self.era == "legacy":
            connection = self.connection
            if enveloped or connection is None or not connection.initialize_accepted:
                return False
            self._tg.start_soon(self._answer, self._track(rid), params, None)
            return True
        if not enveloped or self.outbound is None:
            return False
        route = classify_inbound_request(message)
        if isinstance(route, InboundLadderRejection):
            return False  # the SDK answers the ladder's error
        self._tg.start_soon(self._answer, self._track(rid), params, route)
        return True

    def _track(self, rid: Any) -> tuple[Any, anyio.CancelScope, _Dispatch]:
        """The call's cancel scope and context, findable before it starts (a
        cancel line right behind it cancels it, as in the dispatcher)."""
        dctx = _Dispatch(rid, self.write)
        scope = anyio.CancelScope()
        self._in_flight[coerce_request_id(rid)] = (scope, dctx)
        return rid, scope, dctx

    def _cancelled(self, params: Any) -> None:
        rid = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            return
        entry = self._in_flight.get(coerce_request_id(rid))
        if entry is not None:
            scope, dctx = entry
            dctx.cancel_requested.set()
            scope.cancel()  # the dispatcher's "interrupt" mode

    # -- answering (the SDK dispatcher's ``_handle_request``) ---------------

    async def write(self, data: bytes) -> None:
        """One line out; a closed pipe drops it, as the dispatcher's write does."""
        try:
            await self._write(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.debug("proxy lane: dropped a line, the pipe is closed")

    async def _run(self, dctx: _Dispatch, params: dict[str, Any], route: Any) -> Any:
        server = self.session.server
        if route is None:
            assert self.connection is not None
            runner = ServerRunner(server, self.connection, self.lifespan)
            return await runner.on_request(
                cast(Any, dctx), "tools/call", cast(Any, params)
            )
        connection = Connection.from_envelope(
            route.protocol_version,
            route.client_info,
            route.client_capabilities,
            outbound=self.outbound,
        )
        try:
            return await serve_one(
                server,
                _NoServerRequestsDispatchContext(cast(Any, dctx)),
                "tools/call",
                params,
                connection=connection,
                lifespan_state=self.lifespan,
            )
        except (MCPError, ValidationError):
            raise
        except Exception as exc:  # as ``_serve_modern_stream`` maps it
            error = modern_error_data(exc)
            raise MCPError(error.code, error.message, error.data) from exc

    async def _answer(
        self,
        call: tuple[Any, anyio.CancelScope, _Dispatch],
        params: dict[str, Any],
        route: Any,
    ) -> None:
        rid, scope, dctx = call
        self.answered += 1
        key = coerce_request_id(rid)
        started = False
        try:
            with scope:
                try:
                    result = await self._run(dctx, params, route)
                finally:
                    if self._in_flight.get(key, (None, None))[1] is dctx:
                        del self._in_flight[key]
                if not dctx.cancel_requested.is_set():
                    started = True
                    line = {"jsonrpc": "2.0", "id": rid, "result": result}
                    await self.write(_encode(line))
            if scope.cancelled_caught and not started:
                await self._closed(rid, dctx)
        except anyio.get_cancelled_exc_class():
            await self._closed(rid, dctx, started)
            raise
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:  # the dispatcher's catch-all (code 0, v1 compat)
                log.error("proxy lane: the handler raised", exc_info=exc)
                error = ErrorData(code=0, message=str(exc))
            if not dctx.cancel_requested.is_set():
                await self.write(_error_line(rid, error))

    async def _closed(self, rid: Any, dctx: _Dispatch, started: bool = False) -> None:
        """A call cut short by the end of the connection (not by the peer's
        cancel, which is never answered) answers ``Connection closed``."""
        if started or dctx.cancel_requested.is_set():
            return
        closed = ErrorData(code=CONNECTION_CLOSED, message="Connection closed")
        with anyio.move_on_after(_SHUTDOWN_WRITE_S, shield=True):
            await self.write(_error_line(rid, closed))
