"""One client session of the MCP proxy: its server, its fast lane, its handlers.

Pattern: an adapter over the SDK's low-level ``Server`` whose request
         handlers route the interceptable requests through the proxy's
         ``Routing`` inside its ``Accounting``, and forward the rest unchanged.
Role:    gateway layer; ``McpProxy.open_session`` makes one per stdio run and
         per HTTP session (P17); it holds its server and its ``FastCalls``.
Emits:   through the accounting: telemetry, audit events, governance rows.

Laws: P1 (only tools/call, resources/read and tools/list intercepted), P5,
P9 (tools/list filtered before and after its middleware), P17, H4 (a
handler's failure answers a fixed message and an error id), P25 (capabilities
mirrored, progress relayed, list_changed sent on the session's own stream).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage

from .._withheld import withheld
from ..upstream import Upstream
from ._accounting import Accounting
from ._calls import CallState, resource_hidden
from ._lane import FastCalls, checked_result, validated
from ._layers import ProxyContext, clean_headers
from ._routing import Routing, pass_through

log = logging.getLogger("helmlog.proxy")

# Requests forwarded unchanged (P1), with the result type each expects.
_FORWARDED: dict[type, type] = {
    types.ListPromptsRequest: types.ListPromptsResult,
    types.GetPromptRequest: types.GetPromptResult,
    types.ListResourceTemplatesRequest: types.ListResourceTemplatesResult,
    types.CompleteRequest: types.CompleteResult,
    types.SubscribeRequest: types.EmptyResult,
    types.UnsubscribeRequest: types.EmptyResult,
    types.SetLevelRequest: types.EmptyResult,
}


def _guarded(
    handler: Callable[[Any], Awaitable[types.ServerResult]],
) -> Callable[[Any], Awaitable[types.ServerResult]]:
    """H4: a handler whose failure (not an ``McpError``) reaches the client
    as a fixed message and an error id; the SDK would send its text."""

    async def guarded(req: Any) -> types.ServerResult:
        try:
            return await handler(req)
        except McpError:
            raise
        except Exception as exc:
            raise withheld(
                "the proxy could not answer this request",
                exc,
                detail=getattr(req, "method", type(req).__name__),
            ) from exc

    return guarded


class ProxySession:
    """One client session: a low-level ``Server`` whose handlers route (P17).

    It holds its server and its fast lane (``calls``); the proxy's routing,
    accounting and upstream are handed in, shared by every session.
    """

    def __init__(
        self,
        *,
        name: str,
        version: str,
        upstream: Upstream,
        routing: Routing,
        accounting: Accounting,
        fast: bool = True,
        transport: str,
        session_id: str | None,
        identity: Any = None,
        delegated_from: tuple[Any, ...] = (),
        audit_session: str,
    ) -> None:
        self.name = name
        self.version = version
        self.upstream = upstream
        self.routing = routing
        self.accounting = accounting
        self.transport = transport
        self.session_id = session_id
        self.identity = identity
        self.delegated_from = delegated_from
        self.audit_session = audit_session
        self.client: Any = None  # the SDK ServerSession, once a request came in
        self._write: Any = None  # the session's outgoing stream, once it runs
        server: Server[Any, Any] = Server(name, version=version)
        handlers = server.request_handlers
        handlers[types.CallToolRequest] = _guarded(self._call_tool)
        handlers[types.ListToolsRequest] = _guarded(self._list_tools)
        handlers[types.ReadResourceRequest] = _guarded(self._read_resource)
        handlers[types.ListResourcesRequest] = _guarded(self._list_resources)
        for request_type in _FORWARDED:
            handlers[request_type] = _guarded(self._forward)
        self.server = server
        self.calls = FastCalls(self.call_tool_fast, enabled=fast)

    def initialization_options(self) -> InitializationOptions:
        """P25: the upstream's capabilities and instructions, the proxy's name."""
        init = self.upstream.init
        if init is None:
            raise RuntimeError("McpProxy is not started: use `async with proxy`")
        return InitializationOptions(
            server_name=self.name,
            server_version=self.version,
            capabilities=init.capabilities,
            instructions=init.instructions,
        )

    async def run(self, read_stream: Any, write_stream: Any, **kw: Any) -> None:
        """Serve this session over a pair of SDK streams until it closes."""
        self._write = write_stream
        await self.server.run(
            read_stream, write_stream, self.initialization_options(), **kw
        )

    # -- the context ------------------------------------------------------

    def context(self) -> ProxyContext:
        """P5, P7: the one context of the request being handled."""
        rc = self.server.request_context
        self.client = rc.session
        raw = getattr(rc.request, "headers", None)
        return self.fresh_context(raw.raw if raw is not None else None)

    def fresh_context(self, headers: Any = None) -> ProxyContext:
        """P5, P7: a request's context; ``headers`` are raw HTTP byte pairs."""
        return ProxyContext(
            request_id=str(uuid.uuid4()),
            transport=self.transport,
            session_id=self.session_id,
            headers=None
            if headers is None
            else clean_headers(
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in headers
            ),
            identity=self.identity,
            delegated_from=self.delegated_from,
            server_name=self.name,
            server_version=self.version,
        )

    def _progress(self, meta: Any) -> Callable[..., Awaitable[None]] | None:
        """P25: relay the upstream's progress to the caller's progress token."""
        token = getattr(meta, "progressToken", None) if meta is not None else None
        if token is None:
            return None
        rc = self.server.request_context
        client, request_id = rc.session, rc.request_id

        async def relay(
            progress: float, total: float | None, message: str | None
        ) -> None:
            await client.send_progress_notification(
                token, progress, total, message, related_request_id=str(request_id)
            )

        return relay

    # -- tools/call: the SDK path and the fast lane, one route (``_routing``) --

    async def _call_tool(self, req: types.CallToolRequest) -> types.ServerResult:
        ctx = self.context()
        out = await self._routed(req, ctx, self._progress(req.params.meta))
        assert isinstance(out, types.CallToolResult)
        return types.ServerResult(out)

    async def _routed(
        self, req: types.CallToolRequest, ctx: ProxyContext, progress: Any = None
    ) -> types.CallToolResult | dict[str, Any]:
        """``req`` along the tool route, audited and told (P15, P20)."""
        p = req.params
        sid = self.audit_session
        out: types.CallToolResult | dict[str, Any] = await self.accounting.run(
            sid,
            ctx,
            p.name,
            p.arguments,
            p.meta,
            lambda s: self.routing.tool(req, ctx, s, progress, sid),
        )
        return out

    async def call_tool_fast(
        self, request_id: types.RequestId, params: Any, headers: Any = None
    ) -> dict[str, Any]:
        """One ``tools/call`` of the fast lane: its JSON-RPC ``result`` (P25).

        The same route as the SDK path's (the same-route rule, ``_routing.py``);
        SDK models are built only when a layer or governance needs them (or
        the params need validating).

        Raises:
            McpError: what the SDK path answers (malformed params included).
        """
        ctx = self.fresh_context(headers)
        simple = self.routing.raw_params(params)
        out: types.CallToolResult | dict[str, Any]
        if simple is None:
            out = await self._routed(validated(request_id, params), ctx)
        else:
            out = await self.accounting.run(
                self.audit_session,
                ctx,
                simple["name"],
                simple.get("arguments"),
                simple.get("_meta"),
                lambda s: self._raw(simple, ctx, s),
            )
        if isinstance(out, dict):
            return out
        return out.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def _raw(
        self, params: dict[str, Any], ctx: ProxyContext, state: CallState
    ) -> dict[str, Any]:
        return checked_result(await self.routing.tool_raw(params, ctx, state))

    # -- tools/list -------------------------------------------------------

    async def _list_tools(self, req: types.ListToolsRequest) -> types.ServerResult:
        ctx = self.context()
        upstream = self.upstream

        async def terminal(forward: types.ListToolsRequest) -> types.ListToolsResult:
            listed = await upstream.request(forward, types.ListToolsResult)
            return self._visible_tools(listed, ctx)

        out = await self.routing.list_tools_pipeline(req, terminal, ctx)
        return types.ServerResult(self._visible_tools(out, ctx))

    def _visible_tools(
        self, listed: types.ListToolsResult, ctx: ProxyContext
    ) -> types.ListToolsResult:
        hidden = self.routing.is_hidden_tool
        keep = [t for t in listed.tools if not hidden(t.name, ctx)]
        if len(keep) == len(listed.tools):
            return listed  # P9: nothing hidden, unchanged
        return listed.model_copy(update={"tools": keep})

    # -- resources --------------------------------------------------------

    async def _read_resource(
        self, req: types.ReadResourceRequest
    ) -> types.ServerResult:
        ctx = self.context()
        routing = self.routing
        uri = str(req.params.uri)
        if routing.is_hidden_resource(uri, ctx):
            raise resource_hidden(uri)

        async def upstream(forward: types.ReadResourceRequest) -> Any:
            return await self.upstream.request(forward, types.ReadResourceResult)

        if uri in routing.pass_through_resources:
            out = await pass_through(req, ctx, routing.resource_observers, upstream)
            return types.ServerResult(out)

        async def terminal(forward: types.ReadResourceRequest) -> Any:
            if routing.is_hidden_resource(str(forward.params.uri), ctx):  # P10
                raise resource_hidden(str(forward.params.uri))
            return await upstream(forward)

        out = await routing.resource_pipeline(req, terminal, ctx)
        return types.ServerResult(out)

    async def _list_resources(
        self, req: types.ListResourcesRequest
    ) -> types.ServerResult:
        ctx = self.context()
        listed = await self.upstream.request(req, types.ListResourcesResult)
        hidden = self.routing.is_hidden_resource
        keep = [r for r in listed.resources if not hidden(str(r.uri), ctx)]
        if len(keep) != len(listed.resources):
            listed = listed.model_copy(update={"resources": keep})
        return types.ServerResult(listed)

    # -- everything else --------------------------------------------------

    async def _forward(self, req: Any) -> types.ServerResult:
        self.context()
        result_type = _FORWARDED[type(req)]
        out = await self.upstream.request(req, result_type)
        return types.ServerResult(out)

    async def notify(self, notification: types.ServerNotification) -> None:
        """P25: send one upstream notification (list_changed) to this client.

        It goes onto the session's own outgoing stream, so it reaches a
        client that has sent nothing since initialize (over HTTP, on its
        standalone GET stream).
        """
        write = self._write
        if write is None:
            return
        root: Any = notification.root
        message = types.JSONRPCNotification(
            jsonrpc="2.0",
            **root.model_dump(
                by_alias=True,
                mode="json",
                exclude_none=True,
                include={"method", "params"},
            ),
        )
        await write.send(SessionMessage(types.JSONRPCMessage(message)))
