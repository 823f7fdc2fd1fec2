"""One client session of the MCP proxy: its SDK ``Server`` and its handlers.

Pattern: an adapter over the SDK's low-level ``Server`` (v2: ``on_*``
         handlers) whose handlers route the interceptable requests through
         the proxy's ``Routing`` inside its ``Accounting`` and forward the
         rest unchanged; the SDK serves both eras (``server/discover`` of
         2026-07-28 and the ``initialize`` handshake) and checks every result.
Role:    gateway layer; ``McpProxy.open_session`` makes one per stdio run,
         per HTTP session (P17) and per 2026-era HTTP request.
Emits:   through the accounting: telemetry, audit events, governance rows.

Laws: P1 (only tools/call, resources/read and tools/list intercepted), P5,
P9, P17, H4 (a handler's failure answers a fixed message and an error id),
P25 (capabilities mirrored, progress relayed, list_changed to the client),
P14/S10 (with governance: the tasks extension, ``tasks/*``, a paused call's task).

Why a plain ``tools/call`` may return the upstream's JSON: the SDK validates
and shapes a handler's dict for the negotiated version as it does a model,
so no model is built twice (``_routing``'s same-route rule; bench/proxy.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._tasks import TASKS_EXTENSION, TaskParams, declared
from .._withheld import withheld
from ..upstream import CALL_ERA, Upstream
from ._accounting import Accounting
from ._asks import ASKED, Asked
from ._calls import CallState, resource_hidden
from ._layers import ProxyContext, clean_headers, uuid4_text
from ._listen import Listening
from ._outputs import judge
from ._routing import Routing, has_progress, pass_through
from ._subscriptions import Subscriptions, subscribe_upstream

log = logging.getLogger("helmlog.proxy")

Ctx = ServerRequestContext[Any, Any]
Handler = Callable[[Ctx, Any], Awaitable[Any]]

# Requests forwarded unchanged (P1): method, params model, result type, and
# the upstream capability that makes the proxy serve it.
_FORWARDED: tuple[tuple[str, type, type, str], ...] = (
    ("prompts/list", types.PaginatedRequestParams, types.ListPromptsResult, "prompts"),
    ("prompts/get", types.GetPromptRequestParams, types.GetPromptResult, "prompts"),
    (
        "resources/templates/list",
        types.PaginatedRequestParams,
        types.ListResourceTemplatesResult,
        "resources",
    ),
    (
        "completion/complete",
        types.CompleteRequestParams,
        types.CompleteResult,
        "completions",
    ),
    ("logging/setLevel", types.SetLevelRequestParams, types.EmptyResult, "logging"),
)
_REQUESTS: dict[str, type] = {
    "prompts/list": types.ListPromptsRequest,
    "prompts/get": types.GetPromptRequest,
    "resources/templates/list": types.ListResourceTemplatesRequest,
    "completion/complete": types.CompleteRequest,
    "logging/setLevel": types.SetLevelRequest,
}
_ENVELOPE = "io.modelcontextprotocol/"  # the 2026 per-request keys: the SDK's


def forwarded_meta(meta: Any) -> Any:
    """P25: the caller's ``_meta`` without the protocol's own envelope keys,
    which belong to the client's connection, not to the upstream's."""
    if not isinstance(meta, Mapping):
        return meta
    if not any(isinstance(k, str) and k.startswith(_ENVELOPE) for k in meta):
        return meta
    kept = {k: v for k, v in meta.items() if not str(k).startswith(_ENVELOPE)}
    return kept or None


def _clean_raw(params: Mapping[str, Any]) -> dict[str, Any]:
    """``_clean`` for params on the wire's JSON: a copy whose ``_meta`` is
    ``forwarded_meta``'s (left out where nothing of it is forwarded)."""
    forward = dict(params)
    meta = forwarded_meta(forward.get("_meta"))
    if meta is None:
        forward.pop("_meta", None)
    else:
        forward["_meta"] = meta
    return forward


def _clean(params: Any) -> Any:
    """A request's params with ``forwarded_meta`` applied to its ``_meta``."""
    meta = getattr(params, "meta", None)
    if meta is None:
        return params
    kept = forwarded_meta(meta)
    return params if kept is meta else params.model_copy(update={"meta": kept})


def _guarded(handler: Handler) -> Handler:
    """H4: a handler whose failure (not an ``MCPError``) reaches the client
    as a fixed message and an error id; the SDK would answer -32603 with no id."""

    async def guarded(ctx: Ctx, params: Any) -> Any:
        return await _withholding(ctx.method, lambda: handler(ctx, _clean(params)))

    return guarded


async def _withholding(method: str, call: Callable[[], Awaitable[Any]]) -> Any:
    """``call()``'s answer; a failure that is not an ``MCPError`` withheld (H4)."""
    try:
        return await call()
    except MCPError:
        raise
    except Exception as exc:
        raise withheld(
            "the proxy could not answer this request", exc, detail=method
        ) from exc


def _undeclared() -> bool:
    return False


class ProxySession:
    """One client session: a low-level ``Server`` whose handlers route (P17).

    The proxy's routing, accounting and upstream are handed in, shared by
    every session.
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
        subscriptions: Subscriptions | None = None,
        listening: Listening | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.upstream = upstream
        self.routing = routing
        self.accounting = accounting
        self.fast = fast
        self.transport = transport
        self.session_id = session_id
        # The resource subscriptions of every session of the proxy (P25).
        self.subscriptions = (
            subscriptions if subscriptions is not None else (Subscriptions())
        )
        # The proxy's listen streams (P25: a 2026-era client's changes).
        self.listening = listening if listening is not None else Listening()
        self.identity = identity
        self.delegated_from = delegated_from
        self.audit_session = audit_session
        self.client: Any = None  # the SDK ServerSession, once a message came in
        self.answered = 0  # calls the JSON path answered (the differential tests)
        self.governed = 0  # governed calls on the JSON (the differential tests)
        self._server: Server[Any] | None = None

    @property
    def server(self) -> Server[Any]:
        """This session's SDK server, made on first use (the proxy is started)."""
        if self._server is None:
            self._server = self._make_server()
        return self._server

    def _make_server(self) -> Server[Any]:
        init = self.upstream.init
        if init is None:
            raise RuntimeError("McpProxy is not started: use `async with proxy`")
        name, version = self.name, self.version
        caps = init.capabilities
        server: Server[Any] = Server(
            name,
            version=version,
            instructions=init.instructions,
            # 2026 ``Mcp-Param-*`` header checks read the schemas the proxy
            # last listed (else none: the upstream checks its own), never a
            # ``tools/list`` run upstream per call.
            get_tool_input_schema=self.routing.input_schema,
        )
        add = server.add_request_handler
        if caps.tools is not None:
            add("tools/list", types.PaginatedRequestParams, _guarded(self._list_tools))
            add("tools/call", types.CallToolRequestParams, _guarded(self._call_tool))
        if caps.resources is not None:
            add(
                "resources/list",
                types.PaginatedRequestParams,
                _guarded(self._list_resources),
            )
            add(
                "resources/read",
                types.ReadResourceRequestParams,
                _guarded(self._read_resource),
            )
        for method, params_type, _result, capability in _FORWARDED:
            if getattr(caps, capability, None) is not None:
                add(method, params_type, _guarded(self._forward))
        if caps.resources is not None and caps.resources.subscribe:
            add(
                "resources/subscribe",
                types.SubscribeRequestParams,
                _guarded(self._subscribe),
            )
            add(
                "resources/unsubscribe",
                types.UnsubscribeRequestParams,
                _guarded(self._unsubscribe),
            )
        add(
            "subscriptions/listen",
            types.SubscriptionsListenRequestParams,
            _guarded(self._listen),
        )
        governance = self.routing.governance
        if governance is not None and governance.asks is not None:
            # S10 through P14: a governance ask waits as a task.
            asks = governance.asks
            server.extensions[TASKS_EXTENSION] = {}

            async def task_get(ctx: Ctx, params: TaskParams) -> dict[str, Any]:
                return await asks.task_get(ctx, params, self.identity)

            add("tasks/get", TaskParams, task_get)
            add("tasks/update", TaskParams, asks.task_ack)
            add("tasks/cancel", TaskParams, asks.task_ack)
        add("server/discover", types.RequestParams, self._discover)
        server.middleware.append(self._seen)
        return server

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

    async def _discover(
        self, ctx: Ctx, params: types.RequestParams | None
    ) -> types.DiscoverResult:
        """P25 on a 2026-era connection: the upstream's capabilities (the
        change notifications and resource subscriptions announced are
        delivered on ``subscriptions/listen``, ``_listen``)."""
        init = self.upstream.init
        assert init is not None
        caps = init.capabilities
        update: dict[str, Any] = {}
        if self.server.extensions:  # the proxy's own (S10 through P14)
            update["extensions"] = {**(caps.extensions or {}), **self.server.extensions}
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=caps.model_copy(update=update),
            instructions=init.instructions,
        )

    async def _seen(self, ctx: Ctx, call_next: Any) -> Any:
        """Keep the client's session (initialize included) for list_changed."""
        if self.client is None:
            self.client = ctx.session
        return await call_next(ctx)

    async def run(self, read_stream: Any, write_stream: Any) -> None:
        """Serve this session over a pair of SDK streams until it closes."""
        await self.server.run(read_stream, write_stream, self.initialization_options())

    # -- the context ------------------------------------------------------

    def context(self, ctx: Ctx) -> ProxyContext:
        """P5, P7: the one context of the request being handled."""
        request = ctx.request
        headers = getattr(request, "headers", None)
        raw = getattr(headers, "raw", None)
        return self.fresh_context(raw)

    def fresh_context(self, headers: Any = None) -> ProxyContext:
        """P5, P7: a request's context; ``headers`` are raw HTTP byte pairs."""
        return ProxyContext(
            request_id=uuid4_text(),
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

    @staticmethod
    def _progress(ctx: Ctx) -> Callable[..., Awaitable[None]] | None:
        """P25: relay the upstream's progress to the caller's progress token."""
        if not has_progress(ctx.params):
            return None
        session = ctx.session

        async def relay(
            progress: float, total: float | None, message: str | None
        ) -> None:
            await session.report_progress(progress, total, message)

        return relay

    # -- tools/call: one route, on models or on the upstream's JSON --------

    async def _call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return await self._tool_call(
            params,
            ctx.params,
            self.context(ctx),
            ctx.protocol_version,
            self._progress(ctx),
            lambda: declared(ctx),
        )

    async def lane_call(
        self,
        params: types.CallToolRequestParams,
        wire: Mapping[str, Any],
        headers: Any,
        version: str,
    ) -> Any:
        """The ``tools/call`` handler as ``gateway.fast.HttpLane`` runs it for a
        plain call (no progress token, no task, no tasks extension declared):
        the same body and the same H4 guard as the SDK's kernel runs;
        ``headers`` are the request's raw HTTP byte pairs."""
        pctx = self.fresh_context(headers)
        return await _withholding(
            "tools/call",
            lambda: self._tool_call(params, wire, pctx, version, None, _undeclared),
        )

    async def _tool_call(
        self,
        params: types.CallToolRequestParams,
        wire: Any,
        pctx: ProxyContext,
        version: str,
        progress: Callable[..., Awaitable[None]] | None,
        tasks: Callable[[], bool],
    ) -> Any:
        """One ``tools/call``: ``wire`` its params as sent, ``version`` the
        request's revision (the upstream's call is in its era, P25),
        ``tasks()`` whether it may be answered with a task."""
        era = CALL_ERA.set(version)
        try:
            simple = self.routing.raw_params(wire) if self.fast else None
            sid = self.audit_session
            if simple is not None:
                self.answered += 1
                forward = _clean_raw(simple)
                raw = await self.accounting.run(
                    sid,
                    pctx,
                    simple["name"],
                    simple.get("arguments"),
                    forward.get("_meta"),
                    lambda s: self._judged(
                        simple["name"], self.routing.tool_raw(forward, pctx, s), s
                    ),
                )
                if version in MODERN_PROTOCOL_VERSIONS and isinstance(raw, dict):
                    # a handshake-era upstream's answer to a 2026-era client: the
                    # one field that revision requires (the model path's default)
                    raw = {"resultType": "complete", **raw}
                return raw
            governed = (
                self.routing.governed_params(wire)
                if self.fast and progress is None
                else None
            )
            asked = Asked()
            token = ASKED.set(asked)
            try:
                if governed is None:
                    req = types.CallToolRequest(params=_clean(params))
                    out = await self.routed(req, pctx, progress, wire)
                else:
                    out = await self._governed(governed, wire, pctx)
            finally:
                ASKED.reset(token)
            if asked.view is not None and tasks():
                return asked.view.wire(result_type="task")  # S10 through P14
            if version in MODERN_PROTOCOL_VERSIONS and isinstance(out, dict):
                out = {"resultType": "complete", **out}  # as the JSON path's
            return out
        finally:
            CALL_ERA.reset(era)

    async def _governed(
        self, simple: dict[str, Any], wire: Any, pctx: ProxyContext
    ) -> Any:
        """``routed`` for a governed plain call on the wire's JSON (the
        same-route rule): the same audit, walk and rows; the upstream's own
        JSON where no link changed it, else the models ``routed`` answers."""
        self.governed += 1
        forward = _clean_raw(simple)
        name = simple["name"]
        sid = self.audit_session
        return await self.accounting.run(
            sid,
            pctx,
            name,
            simple.get("arguments"),
            forwarded_meta(wire.get("_meta")) if isinstance(wire, Mapping) else None,
            lambda s: self._judged(
                name, self.routing.tool_governed(forward, pctx, s, sid), s
            ),
        )

    async def routed(
        self,
        req: types.CallToolRequest,
        ctx: ProxyContext,
        progress: Any = None,
        wire: Any = None,
    ) -> types.CallToolResult:
        """``req`` along the tool route, audited and told (P15, P20)."""
        p = req.params
        meta = forwarded_meta(wire.get("_meta")) if isinstance(wire, Mapping) else None
        out: types.CallToolResult = await self.accounting.run(
            self.audit_session,
            ctx,
            p.name,
            p.arguments,
            meta,
            lambda s: self._judged(
                p.name,
                self.routing.tool(req, ctx, s, progress, self.audit_session),
                s,
            ),
        )
        return out

    async def _judged(self, name: str, route: Awaitable[Any], state: CallState) -> Any:
        """P27: the route's answer, judged by the output schema the proxy
        advertises for ``name`` (a refusal, recorded, where it breaks it)."""
        result = await route
        schema = await self.routing.outputs.schema(name, self.upstream)
        return judge(result, schema, name, state)

    # -- tools/list -------------------------------------------------------

    async def _list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        pctx = self.context(ctx)
        upstream = self.upstream
        req = types.ListToolsRequest(params=params)

        async def terminal(forward: types.ListToolsRequest) -> types.ListToolsResult:
            listed = await upstream.request(forward, types.ListToolsResult)
            self.routing.listed(listed, whole=forward.params is None)
            return self._visible_tools(listed, pctx)

        out = await self.routing.list_tools_pipeline(req, terminal, pctx)
        return self._visible_tools(out, pctx)

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
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> Any:
        pctx = self.context(ctx)
        routing = self.routing
        req = types.ReadResourceRequest(params=params)
        uri = str(params.uri)
        if routing.is_hidden_resource(uri, pctx):
            raise resource_hidden(uri)

        async def upstream(forward: types.ReadResourceRequest) -> Any:
            return await self.upstream.request(forward, types.ReadResourceResult)

        if uri in routing.pass_through_resources:
            return await pass_through(req, pctx, routing.resource_observers, upstream)

        async def terminal(forward: types.ReadResourceRequest) -> Any:
            if routing.is_hidden_resource(str(forward.params.uri), pctx):  # P10
                raise resource_hidden(str(forward.params.uri))
            return await upstream(forward)

        return await routing.resource_pipeline(req, terminal, pctx)

    async def _list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        pctx = self.context(ctx)
        req = types.ListResourcesRequest(params=params)
        listed: types.ListResourcesResult = await self.upstream.request(
            req, types.ListResourcesResult
        )
        hidden = self.routing.is_hidden_resource
        keep = [r for r in listed.resources if not hidden(str(r.uri), pctx)]
        if len(keep) != len(listed.resources):
            listed = listed.model_copy(update={"resources": keep})
        return listed

    async def _subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> Any:
        """P25, P8: subscribe upstream (a hidden resource is not found), and
        file it, so the upstream's updates of ``uri`` reach this session."""
        uri = str(params.uri)
        if self.routing.is_hidden_resource(uri, self.context(ctx)):
            raise resource_hidden(uri)
        return await subscribe_upstream(self.upstream, self.subscriptions, self, params)

    async def _listen(
        self, ctx: Ctx, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """P25, P8: one ``subscriptions/listen`` stream of this session, served
        until the client ends it (``_listen.Listening``)."""
        return await self.listening.serve(self, ctx, params)

    async def _unsubscribe(
        self, ctx: Ctx, params: types.UnsubscribeRequestParams
    ) -> Any:
        """P25: this session's subscription ends; the upstream's only with
        its last subscriber's (the upstream sees one session for all)."""
        if not self.subscriptions.remove(self, str(params.uri)):
            return types.EmptyResult()
        return await self.upstream.request(
            types.UnsubscribeRequest(params=params), types.EmptyResult
        )

    # -- everything else --------------------------------------------------

    async def _forward(self, ctx: Ctx, params: Any) -> Any:
        method = ctx.method
        result_type = next(r for m, _p, r, _c in _FORWARDED if m == method)
        request = _REQUESTS[method](params=params)
        return await self.upstream.request(request, result_type)

    async def notify(self, notification: Any) -> None:
        """P25: send one upstream notification (list_changed) to this client,
        on the connection's own channel (over HTTP, its standalone GET stream)."""
        client = self.client
        if client is None:
            return
        await client.send_notification(notification)
