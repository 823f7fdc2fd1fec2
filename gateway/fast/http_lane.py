"""The HTTP lane: a plain 2026-07-28 ``tools/call`` POST beside the SDK's entry.

Pattern: ``HttpLane.route`` claims a POST whose body is a plain ``tools/call``
         (no progress token, no task) that passes every check the SDK's
         ``handle_modern_request`` makes before its kernel (content type,
         Accept, routing headers given once, the envelope ladder, the
         ``Mcp-Param-*`` headers); ``answer`` runs it through that kernel
         (``serve_one``) and writes the SDK's JSON answer. Anything else, a
         refusal included, is left to ``handle_modern_request``.
Role:    gateway layer; ``ProxyHttpApp`` hands it each 2026-era request in
         its own session (P17, P18 unchanged); ``McpProxy.fast_calls`` off.
Emits:   nothing of its own; the session's route records and tells.

Laws: P25 (the answer, errors included, is the SDK's: ``test_proxy_lane_http.py``
compares them whole with the lane on and off), P20 (the same handler runs).

Why: the entry re-reads and re-parses the body (json, pydantic), builds its
security settings and a pydantic answer per request (bench/proxy.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from mcp.server._streamable_http_modern import (
    _SingleExchangeDispatchContext,
    _to_jsonrpc_response,
    _write,
)
from mcp.server.connection import Connection
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
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
from mcp_types import JSONRPCResponse
from starlette.requests import Request

_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_JSON_HEADERS = [(b"content-type", b"application/json")]


class _Headed:
    """What ``check_accept_headers`` reads of a request: its headers."""

    __slots__ = ("headers",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers


class HttpLane:
    """Plain ``tools/call`` POSTs of the 2026-07-28 revision (see the module)."""

    def __init__(self) -> None:
        self.answered = 0  # calls the lane answered (the differential tests)

    def route(
        self, message: Any, scope: Any, head: Mapping[str, str]
    ) -> InboundModernRoute | None:
        """The envelope if the lane answers ``message``; ``head``: the
        request's headers by lowercased name, the first of repeats (as
        Starlette's ``Headers`` reads them, which the SDK's checks take)."""
        if scope["method"] != "POST" or not isinstance(message, dict):
            return None
        if message.get("method") != "tools/call" or message.get("jsonrpc") != "2.0":
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
        if not check_accept_headers(cast(Any, _Headed(head)))[0]:
            return None  # the SDK answers 406
        names = (k.decode("latin-1") for k, _v in scope["headers"])
        if find_duplicated_routing_header((n, "") for n in names) is not None:
            return None
        route = classify_inbound_request(message, headers=head)
        if not isinstance(route, InboundModernRoute):
            return None  # the SDK answers the ladder's rejection
        return route

    async def answer(
        self,
        server: Any,
        route: InboundModernRoute,
        message: dict[str, Any],
        scope: Any,
        receive: Any,
        send: Any,
    ) -> bool:
        """Answer ``message`` through ``server``'s kernel; ``False`` (nothing
        sent) where its ``Mcp-Param-*`` headers are the SDK's to refuse."""
        request = Request(scope, receive)
        params = message["params"]
        if not _params_pass(server, params, request.headers):
            return False
        self.answered += 1
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
        answer = await _to_jsonrpc_response(
            rid,
            serve_one(
                server,
                dctx,
                "tools/call",
                params,
                connection=connection,
                lifespan_state={},
            ),
        )
        if not isinstance(answer, JSONRPCResponse):
            await _write(answer, scope, receive, send)
            return True
        # as ``_write`` writes a result: the model's fields in order, compact
        body = {"jsonrpc": "2.0", "id": rid, "result": answer.result}
        await _send_json(send, json.dumps(body, separators=(",", ":")).encode())
        return True


def _params_pass(server: Any, params: dict[str, Any], headers: Any) -> bool:
    """Whether the SDK's ``Mcp-Param-*`` check passes (``_mcp_param_rejection``
    with the server's schema lookup); ``False`` leaves the call to the SDK."""
    lookup = server.get_tool_input_schema
    if lookup is None:
        return False  # the SDK lists the tools itself for the schema
    name = params.get("name")
    arguments = params.get("arguments")
    if not isinstance(name, str) or (
        arguments is not None and not isinstance(arguments, Mapping)
    ):
        return True  # no check applies
    arguments = arguments or {}
    if not arguments and not any(h.startswith(_PARAM_PREFIX) for h in headers):
        return True
    try:
        schema = lookup(name)
    except Exception:  # noqa: BLE001 — the SDK logs it and checks nothing
        return False
    if schema is None:
        return True
    return validate_mcp_param_headers(schema, arguments, headers) is None


async def _send_json(send: Any, body: bytes) -> None:
    """A 200 JSON answer with the headers Starlette's ``Response`` writes."""
    headers = [(b"content-length", str(len(body)).encode()), *_JSON_HEADERS]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
