"""The proxy's routes, and the one place that picks the model path or the JSON path.

Pattern: ``Routing`` holds what the options compile to (onion pipelines,
         pass-through observers, visibility, governance, the upstream) and
         runs the one tool route in two forms, ``tool`` on SDK models and
         on the upstream's JSON (``tool_raw``; ``tool_governed`` with
         governance); ``raw_params``/``governed_params`` pick.
Role:    gateway layer; ``McpProxy`` builds one; sessions route through it.
Emits:   nothing; the caller's ``Accounting`` records and tells.

Laws: P8, P10, P12, P13, P14, P25; the paths' two rules (below): the
progress rule and the same-route rule.

Why two forms of one route on v2: both go through the SDK on both sides (its
server checks the answer, its client sends the call); the JSON form only
skips building result models a plain call never needs (bench/proxy.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import X_MCP_HEADER_KEY

from .._tasks import ASK_META
from ..upstream import Upstream
from ._calls import CallState, tool_hidden
from ._governance import Governance
from ._layers import (
    Composed,
    Layer,
    ProxyContext,
    RejectionReason,
    compose,
    is_pass_through_observer,
    layers_of,
    visibility,
)
from ._outputs import Outputs

log = logging.getLogger("helmlog.proxy")

# -- which path answers a message ----------------------------------------------
#
# The two rules the model path and the JSON path share, stated and checked here:
#   The progress rule: a request whose params carry a ``progressToken`` takes
#      the model path, which relays progress: ``has_progress`` is the one test.
#   The same-route rule: the JSON path runs the model path's route
#      (``Routing.tool``) and answers what it would; ``Routing.tool_raw`` is
#      that route with no layer (hence no pass-through observer, a marked
#      layer) and no governance, on simple params: ``raw_params`` decides and
#      ``tool_raw`` refuses to run where it would differ. ``test_proxy_fast.py``
#      compares both paths' answers and audit rows; ``test_proxy_paths.py``
#      checks both rules here. ``Routing.tool_governed`` is that route with
#      governance and no layer (no pass-through tool, no ask named in
#      ``_meta``): ``governed_params`` decides; ``test_proxy_governed_json.py``
#      compares its answers and every row of the session's stream.


def has_progress(params: Any) -> bool:
    """The progress rule: whether a request's params ask for progress (a
    ``progressToken``)."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    return isinstance(meta, Mapping) and meta.get("progressToken") is not None


def simple_params(params: Any) -> dict[str, Any] | None:
    """``params`` without ``None`` fields when it needs no validation, else ``None``.

    Simple: a name that is a string, arguments an object (or absent), a
    ``_meta`` an object (or absent), no ``task``. Anything else is validated
    by the SDK's model, which answers exactly as the SDK session does.
    """
    if isinstance(params, Mapping) and not isinstance(params, dict):
        params = dict(params)
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    args, meta = params.get("arguments"), params.get("_meta")
    if not (args is None or isinstance(args, dict)) or "task" in params:
        return None
    if meta is not None:
        if not isinstance(meta, dict):
            return None
        if None in meta.values():
            params = {
                **params,
                "_meta": {k: v for k, v in meta.items() if v is not None},
            }
    out: dict[str, Any] = params
    if None in out.values():
        out = {k: v for k, v in out.items() if v is not None}
    return out


# -- the routes ----------------------------------------------------------------


def _sequence(option: Iterable[Layer], what: str) -> tuple[Layer, ...]:
    layers = tuple(option)
    for layer in layers:
        if not callable(layer):
            raise TypeError(f"{what}: {layer!r} is not a middleware callable")
    return layers


class Routing:
    """The proxy's compiled options and its one tool route (P3, P8–P14)."""

    def __init__(
        self,
        upstream: Upstream,
        governance: Governance | None = None,
        *,
        tool_middleware: Iterable[Layer] = (),
        resource_middleware: Iterable[Layer] = (),
        list_tools_middleware: Iterable[Layer] = (),
        hidden_tools: Any = None,
        hidden_resources: Any = None,
        pass_through_tools: Iterable[str] = (),
        pass_through_resources: Iterable[str] = (),
    ) -> None:
        self.upstream = upstream
        tools = layers_of(_sequence(tool_middleware, "tool_middleware"))
        resources = layers_of(_sequence(resource_middleware, "resource_middleware"))
        lists = layers_of(_sequence(list_tools_middleware, "list_tools_middleware"))
        self.tool_pipeline = compose(tools)
        self.resource_pipeline = compose(resources)
        self.list_tools_pipeline = compose(lists)
        # P13: the marked layers, at their positions (the same-route rule: a
        # subset of the layers)
        self.tool_observers = compose(x for x in tools if is_pass_through_observer(x))
        self.resource_observers = compose(
            x for x in resources if is_pass_through_observer(x)
        )
        self._hidden_tools = visibility(hidden_tools, "hidden_tools")
        self._hidden_resources = visibility(hidden_resources, "hidden_resources")
        self.pass_through_tools = frozenset(pass_through_tools)
        self.pass_through_resources = frozenset(pass_through_resources)
        self.governance = governance  # P14: the innermost layer, or none
        # The upstream's input schemas as last listed through the proxy, and
        # its output schemas, which every answer is judged by (P27).
        self._schemas: dict[str, Any] = {}
        self._headed: dict[str, bool] = {}  # may a schema declare a header?
        self.outputs = Outputs()

    def listed(self, result: types.ListToolsResult, *, whole: bool = False) -> None:
        """Keep the schemas of an upstream ``tools/list`` answer."""
        for tool in result.tools:
            self._schemas[tool.name] = tool.input_schema
            self._headed[tool.name] = _may_declare_headers(tool.input_schema)
        self.outputs.listed(result, whole=whole)

    def forget_schemas(self) -> None:
        """The upstream's tools changed: their schemas are unknown again."""
        self._schemas.clear()
        self._headed.clear()
        self.outputs.forget()

    def input_schema(self, name: str) -> Any:
        """A tool's input schema as last listed, or ``None`` (nothing to check)."""
        return self._schemas.get(name)

    def declares_headers(self, name: str) -> bool:
        """Whether ``name``'s input schema as last listed may declare an
        ``Mcp-Param-*`` header (``x-mcp-header`` anywhere in it; ``True`` when
        unknown): without one, the SDK's header check has nothing to compare."""
        return self._headed.get(name, True)

    def is_hidden_tool(self, name: str, ctx: ProxyContext) -> bool:
        """P8: hidden by name or predicate; a raising predicate hides (fail closed)."""
        return _decide(self._hidden_tools, name, ctx, "hidden_tools")

    def is_hidden_resource(self, uri: str, ctx: ProxyContext) -> bool:
        """P8: the same on the exact URI."""
        return _decide(self._hidden_resources, uri, ctx, "hidden_resources")

    # -- the path of one tools/call (the same-route rule) -------------------

    def raw_params(self, params: Any) -> dict[str, Any] | None:
        """The same-route rule: ``params`` (simplified) if ``tool_raw`` is the
        route for them, ``None`` if the call must take ``tool`` on the SDK's
        models."""
        if self.tool_pipeline.layers or self.governance is not None:
            return None
        if has_progress(params):  # the progress rule
            return None
        return simple_params(params)

    def governed_params(self, params: Any) -> dict[str, Any] | None:
        """The same-route rule with governance: ``params`` (simplified) if
        ``tool_governed`` is the route for them (governance, no layer, no
        progress, not a pass-through tool, no ask named in ``_meta``), else
        ``None`` (``tool`` on the SDK's models)."""
        if self.tool_pipeline.layers or self.governance is None:
            return None
        if has_progress(params):  # the progress rule
            return None
        meta = params.get("_meta") if isinstance(params, Mapping) else None
        if isinstance(meta, Mapping) and ASK_META in meta:
            return None  # S4's read-back (or its refusal): ``Governance.call``'s
        simple = simple_params(params)
        if simple is None or simple["name"] in self.pass_through_tools:
            return None
        return simple

    async def tool(
        self,
        req: types.CallToolRequest,
        ctx: ProxyContext,
        state: CallState,
        progress: Any,
        audit_session: str,
    ) -> types.CallToolResult:
        """The tool route (P8–P14): hidden, pass-through, or the onion."""
        requested = req.params.name
        if self.is_hidden_tool(requested, ctx):
            state.route, state.reason = "hidden", RejectionReason.TOOL_HIDDEN
            raise tool_hidden(requested)
        if requested in self.pass_through_tools:
            state.route, state.forwarded = "pass-through", requested
            raw = await pass_through(req, ctx, self.tool_observers, self.forward)
            assert isinstance(raw, types.CallToolResult)
            return raw
        governance = self.governance

        async def terminal(forward: types.CallToolRequest) -> types.CallToolResult:
            name = forward.params.name
            state.forwarded, state.forwarded_args = name, forward.params.arguments
            if self.is_hidden_tool(name, ctx):  # P10: no rename reaches it
                state.reason = RejectionReason.TOOL_HIDDEN
                raise tool_hidden(name)
            if governance is not None:
                return await governance.call(
                    audit_session, forward, ctx, state, progress, self.forward
                )
            return await self.forward(forward, progress)

        out = await self.tool_pipeline(req, terminal, ctx)
        if not isinstance(out, types.CallToolResult):
            raise TypeError(
                f"tool middleware returned {type(out).__name__}, not a CallToolResult"
            )
        return out

    async def tool_raw(
        self, params: dict[str, Any], ctx: ProxyContext, state: CallState
    ) -> Any:
        """``tool`` with no layer and no governance, on raw dicts (the same-route rule).

        Returns the upstream's raw ``result`` (the caller checks it).
        """
        if self.tool_pipeline.layers or self.governance is not None:
            raise RuntimeError("same-route rule: the raw route runs only with no layer")
        requested = params["name"]
        if self.is_hidden_tool(requested, ctx):
            state.route, state.reason = "hidden", RejectionReason.TOOL_HIDDEN
            raise tool_hidden(requested)
        if requested in self.pass_through_tools:
            state.route, state.forwarded = "pass-through", requested
        else:
            state.forwarded = requested
            state.forwarded_args = params.get("arguments")
            if self.is_hidden_tool(requested, ctx):  # P10, as the terminal does
                state.reason = RejectionReason.TOOL_HIDDEN
                raise tool_hidden(requested)
        return unstamped(await self.upstream.call_raw("tools/call", params))

    async def tool_governed(
        self,
        params: dict[str, Any],
        ctx: ProxyContext,
        state: CallState,
        audit_session: str,
    ) -> Any:
        """``tool`` with governance and no layer, on raw dicts (the same-route
        rule): the same checks and walk; the upstream's raw ``result`` where
        no link changed it, else the model ``tool`` returns."""
        governance = self.governance
        if self.tool_pipeline.layers or governance is None:
            raise RuntimeError("same-route rule: the governed route takes no layer")
        requested = params["name"]
        if self.is_hidden_tool(requested, ctx):
            state.route, state.reason = "hidden", RejectionReason.TOOL_HIDDEN
            raise tool_hidden(requested)
        # as ``tool``'s terminal (no layer: the request as it came)
        state.forwarded, state.forwarded_args = requested, params.get("arguments")
        if self.is_hidden_tool(requested, ctx):  # P10
            state.reason = RejectionReason.TOOL_HIDDEN
            raise tool_hidden(requested)
        return await governance.call_raw(
            audit_session, params, ctx, state, self.forward_raw
        )

    async def forward_raw(self, params: dict[str, Any]) -> dict[str, Any]:
        """``forward`` on the wire's JSON: the upstream's result, unstamped."""
        raw: dict[str, Any] = unstamped(
            await self.upstream.call_raw("tools/call", params)
        )
        return raw

    async def forward(
        self, req: types.CallToolRequest, progress: Any = None
    ) -> types.CallToolResult:
        """One ``tools/call`` to the upstream, on the SDK's models."""
        result = await self.upstream.request(req, types.CallToolResult, progress)
        assert isinstance(result, types.CallToolResult)
        meta = result.meta
        if isinstance(meta, dict) and types.SERVER_INFO_META_KEY in meta:
            kept = {k: v for k, v in meta.items() if k != types.SERVER_INFO_META_KEY}
            result = result.model_copy(update={"meta": kept or None})
        return result


def unstamped(raw: Any) -> Any:
    """P25: a 2026-era upstream's result without its ``serverInfo`` stamp, so
    the client reads the proxy's name (the SDK stamps it) as at initialize."""
    meta = raw.get("_meta") if isinstance(raw, dict) else None
    if isinstance(meta, dict) and types.SERVER_INFO_META_KEY in meta:
        kept = {k: v for k, v in meta.items() if k != types.SERVER_INFO_META_KEY}
        raw = (
            {**raw, "_meta": kept}
            if kept
            else {k: v for k, v in raw.items() if k != "_meta"}
        )
    return raw


async def pass_through(
    req: Any,
    ctx: ProxyContext,
    observers: Composed,
    forward: Callable[[Any], Awaitable[Any]],
) -> Any:
    """P12, P13: forward the original request exactly once; raw outcome back."""
    done = False
    value: Any = None
    failure: BaseException | None = None

    async def once(_ignored: Any = None) -> Any:
        nonlocal done, value, failure
        if not done:
            done = True
            try:
                value = await forward(req)
            except MCPError as exc:
                failure = exc
        if failure is not None:
            raise failure
        return value

    if observers.layers:
        try:
            await observers(req, once, ctx)
        except MCPError as exc:
            if exc is not failure:
                log.warning("proxy: a pass-through observer raised", exc_info=True)
        except Exception:  # P13: an observer changes nothing
            log.warning("proxy: a pass-through observer raised", exc_info=True)
    return await once()


def _may_declare_headers(schema: Any) -> bool:
    """Whether ``x-mcp-header`` (the annotation that declares an ``Mcp-Param-*``
    header) occurs anywhere in ``schema``: computed once per listing."""
    return X_MCP_HEADER_KEY in json.dumps(schema, default=str)


def _decide(
    rule: Callable[[str, ProxyContext], bool], name: str, ctx: ProxyContext, what: str
) -> bool:
    try:
        return bool(rule(name, ctx))
    except Exception:  # governance fails closed: hidden
        log.warning(
            "proxy: %s predicate raised for %r; hiding it", what, name, exc_info=True
        )
        return True
