"""The serving lane: a plain ``tools/call`` answered beside the SDK's dispatcher.

Pattern: ``ServingLane`` watches a session's decoded JSON-RPC messages;
         ``take`` claims a plain ``tools/call`` (no progress token, no task;
         after the handshake, or a 2026-07-28 request whose envelope the
         SDK's ladder accepts) and runs the kernel's steps for it (surface
         and params validation, the session's handler, the result shaping;
         the kernel itself where a tracer provider is set), answering as
         the SDK's dispatcher would.
Role:    gateway layer; the proxy's stdio transport hands it every line
         (``proxy/_stdio.py``); ``McpProxy.fast_calls`` off turns it off.
Emits:   nothing of its own; the session's route records and tells.

Laws: P25 (the SDK path's answers, errors and cancel: ``test_proxy_lane.py``,
lane off, kernel and kernel-free), P20 (the same audit rows).

Why: the dispatcher costs message models both ways, memory streams and a
task hop a call; the kernel a connection, a runner, a no-op span and a
shielded close (issue 26: ~20% of the stdio proxy's CPU, bench/proxy.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import anyio
import anyio.abc
import mcp.types as types
import msgspec
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.connection import Connection
from mcp.server.runner import (
    ServerRunner,
    _dump_result,
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
from mcp_types import methods as _methods
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import ValidationError

from .http_lane import traced

log = logging.getLogger("helmlog.proxy")

Write = Callable[[bytes], Awaitable[None]]
_encode = msgspec.json.Encoder().encode
_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_SHUTDOWN_WRITE_S = 2.0
_METHOD = "tools/call"


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
        # ``None``: through the SDK's kernel exactly when ``traced()`` (or a
        # middleware the lane does not know is on the server); the
        # differential tests pin it (``True``: always the kernel).
        self.kernel: bool | None = None
        self._runner: ServerRunner[Any] | None = None  # ``_serialize``'s, kept
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
        if self._kernel_free(server, route):
            return await self._steps(params, route)
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

    def _kernel_free(self, server: Any, route: Any) -> bool:
        """Whether ``_steps`` answers the call: not pinned to the kernel, no
        tracer provider (the kernel's span would record nothing), only the
        lane's, the SDK's span and the session's middleware on the server
        (each a no-op for this call: the connection and the client are known
        once a call is the lane's), no tasks extension declared (S10: the
        kernel's ``declared``), and the session serves ``tools/call``."""
        kernel = traced() if self.kernel is None else self.kernel
        if kernel or server.get_request_handler(_METHOD) is None:
            return False
        if route is not None:
            capabilities = route.client_capabilities
            if isinstance(capabilities, dict) and capabilities.get("extensions"):
                return False
        known = (self._seen, self.session._seen)
        return all(
            m in known or type(m) is OpenTelemetryMiddleware for m in server.middleware
        )

    async def _steps(self, params: dict[str, Any], route: Any) -> Any:
        """``ServerRunner._on_request`` for one plain ``tools/call``, its
        middleware aside (``_kernel_free``): the surface validation, the
        handler's params model, the session's handler (``lane_call``, as
        ``HttpLane`` runs it) and the result shaping, raising what it raises
        (an unmapped failure of a 2026-era call as ``serve_one``'s entry
        maps it)."""
        session = self.session
        if route is None:
            assert self.connection is not None
            version = self.connection.protocol_version
        else:
            version = route.protocol_version
        try:
            try:
                _methods.validate_client_request(_METHOD, version, params)
            except KeyError:
                raise MCPError(
                    code=types.METHOD_NOT_FOUND,
                    message="Method not found",
                    data=_METHOD,
                ) from None
            typed = types.CallToolRequestParams.model_validate(params, by_name=False)
            result = await session.lane_call(typed, params, None, version)
            return _dump_result(self._shaper()._serialize(_METHOD, version, result))
        except (MCPError, ValidationError):
            raise
        except Exception as exc:
            if route is None:
                raise
            error = modern_error_data(exc)  # as ``_run`` maps ``serve_one``'s
            raise MCPError(error.code, error.message, error.data) from exc

    def _shaper(self) -> ServerRunner[Any]:
        """A kernel for ``_serialize`` alone: it reads only the server (cache
        hints, the ``serverInfo`` stamp), the session's for the lane's life."""
        runner = self._runner
        if runner is None:
            connection = Connection.from_envelope(LATEST_MODERN_VERSION, None, None)
            runner = ServerRunner(self.session.server, connection, self.lifespan)
            self._runner = runner
        return runner

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
