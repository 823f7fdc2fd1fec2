"""The HTTP lane: a plain 2026-07-28 ``tools/call`` POST beside the SDK's entry.

Pattern: ``HttpLane.route`` claims a POST whose body is a plain ``tools/call``
         (no progress token, no task, no tasks extension) that passes every
         check the SDK's ``handle_modern_request`` makes before its kernel
         (content type, Accept, routing headers given once, the envelope
         ladder, ``Mcp-Param-*`` headers); ``answer`` runs the kernel's steps
         for that method (validation, the session's handler, ``ServerRunner``'s
         shaping on one template server), the kernel itself where a tracer
         provider is set (its span), and writes the SDK's JSON answer.
Role:    gateway layer; ``ProxyHttpApp`` hands it each 2026-era request in
         its own session (P17, P18); ``McpProxy.fast_calls`` off.
Emits:   nothing of its own; the session's route records and tells.

Laws: P25 (the SDK's answer, errors included: ``test_proxy_lane_http.py``,
lane on and off, with and without the kernel), P20 (the same rows).

Why: the entry re-parses the body and answers through pydantic; its kernel
makes a session, a connection, a ``Server`` and a span per request.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, cast

import mcp.types as types
from mcp.server._streamable_http_modern import (
    _SingleExchangeDispatchContext,
    _to_jsonrpc_response,
    _write,
)
from mcp.server.connection import Connection
from mcp.server.runner import (
    ServerRunner,
    _dump_result,
    modern_error_data,
    serve_one,
)
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    MCP_PARAM_HEADER_PREFIX,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import JSONRPCError, JSONRPCResponse
from mcp_types import methods as _methods
from mcp_types.version import LATEST_MODERN_VERSION
from opentelemetry import trace
from starlette.datastructures import Headers
from starlette.requests import Request

_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_JSON_HEADERS = [(b"content-type", b"application/json")]
_METHOD = "tools/call"


class _Headed:
    """What ``check_accept_headers`` reads of a request: its headers."""

    __slots__ = ("headers",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers


@functools.lru_cache(maxsize=256)
def _accepts_json(accept: str) -> bool:
    """``check_accept_headers``'s JSON verdict on an ``Accept`` value (all it
    reads of a request), kept per value."""
    return check_accept_headers(cast(Any, _Headed({"accept": accept})))[0]


def traced() -> bool:
    """Whether the SDK's span records: a tracer provider is set (else its
    ``OpenTelemetryMiddleware`` opens an invalid span, which nothing reads)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class HttpLane:
    """Plain ``tools/call`` POSTs of the 2026-07-28 revision (see the module)."""

    def __init__(self) -> None:
        self.answered = 0  # calls the lane answered (the differential tests)
        # ``None``: through the SDK's kernel exactly when ``traced()``; the
        # differential tests pin it (``True``: always the kernel).
        self.kernel: bool | None = None
        self._runners: dict[tuple[str, str], ServerRunner[Any]] = {}

    def route(
        self, message: Any, scope: Any, head: Mapping[str, str]
    ) -> InboundModernRoute | None:
        """The envelope if the lane answers ``message``; ``head``: the
        request's headers by lowercased name, the first of repeats (as
        Starlette's ``Headers`` reads them, which the SDK's checks take)."""
        if scope["method"] != "POST" or not isinstance(message, dict):
            return None
        if message.get("method") != _METHOD or message.get("jsonrpc") != "2.0":
            return None
        rid = message.get("id")
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            return None
        params = message.get("params")
        if not message.keys() <= _REQUEST_KEYS or not isinstance(params, dict):
            return None
        meta = params.get("_meta")
        if "task" in params or not isinstance(meta, dict) or "progressToken" in meta:
            return None
        if progress_token_from_params(params) is not None:
            return None
        kind = head.get("content-type")
        if kind is None or not kind.lower().startswith("application/json"):
            return None  # the SDK answers 400
        if not _accepts_json(head.get("accept", "")):
            return None  # the SDK answers 406
        raw = scope["headers"]
        names = [k.decode("latin-1").lower() for k, _v in raw]
        if len(set(names)) != len(names) and (
            find_duplicated_routing_header((n, "") for n in names) is not None
        ):
            return None  # a repeated name: the SDK's check decides
        route = classify_inbound_request(message, headers=head)
        if not isinstance(route, InboundModernRoute):
            return None  # the SDK answers the ladder's rejection
        capabilities = route.client_capabilities
        if isinstance(capabilities, dict) and capabilities.get("extensions"):
            return None  # a task may answer it (S10): the kernel's ``declared``
        return route

    async def answer(
        self,
        session: Any,
        route: InboundModernRoute,
        message: dict[str, Any],
        scope: Any,
        receive: Any,
        send: Any,
    ) -> bool:
        """Answer ``message`` for ``session`` (a ``ProxySession``); ``False``
        (nothing sent) where its ``Mcp-Param-*`` headers are the SDK's to
        refuse or the session serves no tools."""
        init = session.upstream.init
        if init is None or init.capabilities.tools is None:
            return False  # the kernel answers "Method not found"
        params = message["params"]
        headers = scope["headers"]
        if not _params_pass(session.routing, params, headers):
            return False
        self.answered += 1
        rid = message["id"]
        kernel = traced() if self.kernel is None else self.kernel
        result: dict[str, Any]
        if kernel:
            answer = await self._through_kernel(session, route, message, scope, receive)
            if not isinstance(answer, JSONRPCResponse):
                await _write(answer, scope, receive, send)
                return True
            result = answer.result
        else:
            try:  # ``_to_jsonrpc_response``'s boundary, no response model built
                result = await self._serve(
                    session, route.protocol_version, params, headers
                )
            except Exception as exc:  # noqa: BLE001 — answered as the SDK's error
                data = modern_error_data(exc)  # H4: no handler internals on the wire
                await _write(
                    JSONRPCError(jsonrpc="2.0", id=rid, error=data),
                    scope,
                    receive,
                    send,
                )
                return True
        # as ``_write`` writes a result: the model's fields in order, compact
        body = {"jsonrpc": "2.0", "id": rid, "result": result}
        await _send_json(send, json.dumps(body, separators=(",", ":")).encode())
        return True

    async def _serve(
        self, session: Any, version: str, params: dict[str, Any], headers: Any
    ) -> dict[str, Any]:
        """``ServerRunner._on_request`` for one ``tools/call`` on a born-ready
        2026-era connection, its middleware aside (its span records nothing,
        the session's ``_seen`` keeps a client no notification reaches here):
        the same validations, handler and shaping, raising what it raises."""
        try:
            _methods.validate_client_request(_METHOD, version, params)
        except KeyError:
            raise MCPError(
                code=types.METHOD_NOT_FOUND, message="Method not found", data=_METHOD
            ) from None
        typed = types.CallToolRequestParams.model_validate(params, by_name=False)
        result = await session.lane_call(typed, params, headers, version)
        runner = self._runner(session)
        return _dump_result(runner._serialize(_METHOD, version, result))

    def _runner(self, session: Any) -> ServerRunner[Any]:
        """One kernel per proxy identity, on the server a session would make:
        its shaping reads only the server (cache hints, the ``serverInfo``
        stamp), which every session of one proxy makes alike."""
        key = (session.name, session.version)
        runner = self._runners.get(key)
        if runner is None:
            connection = Connection.from_envelope(LATEST_MODERN_VERSION, None, None)
            runner = ServerRunner(session.server, connection, {})
            self._runners[key] = runner
        return runner

    async def _through_kernel(
        self,
        session: Any,
        route: InboundModernRoute,
        message: dict[str, Any],
        scope: Any,
        receive: Any,
    ) -> Any:
        """The answer of the SDK's own kernel (``serve_one``), span included."""
        request = Request(scope, receive)
        rid = message["id"]
        dctx = _SingleExchangeDispatchContext(
            transport=TransportContext(
                kind="streamable-http", can_send_request=False, headers=request.headers
            ),
            request_id=rid,
            message_metadata=ServerMessageMetadata(request_context=request),
        )
        connection = Connection.from_envelope(
            route.protocol_version, route.client_info, route.client_capabilities
        )
        return await _to_jsonrpc_response(
            rid,
            serve_one(
                session.server,
                dctx,
                _METHOD,
                message["params"],
                connection=connection,
                lifespan_state={},
            ),
        )


def _params_pass(routing: Any, params: dict[str, Any], raw: Any) -> bool:
    """Whether the SDK's ``Mcp-Param-*`` check passes (``_mcp_param_rejection``
    with the server's schema lookup, ``Routing.input_schema``); ``False``
    leaves the call to the SDK. ``raw``: the request's header byte pairs."""
    lookup = routing.input_schema
    name = params.get("name")
    arguments = params.get("arguments")
    if not isinstance(name, str) or (
        arguments is not None and not isinstance(arguments, Mapping)
    ):
        return True  # no check applies
    arguments = arguments or {}
    prefix = _PARAM_PREFIX.encode("latin-1")
    if not arguments and not any(k.startswith(prefix) for k, _v in raw):
        return True
    try:
        schema = lookup(name)
    except Exception:  # noqa: BLE001 — the SDK logs it and checks nothing
        return False
    if schema is None or not routing.declares_headers(name):
        return True  # no annotation: the SDK's check compares nothing
    return validate_mcp_param_headers(schema, arguments, Headers(raw=raw)) is None


async def _send_json(send: Any, body: bytes) -> None:
    """A 200 JSON answer with the headers Starlette's ``Response`` writes."""
    headers = [(b"content-length", str(len(body)).encode()), *_JSON_HEADERS]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
