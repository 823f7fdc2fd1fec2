"""P25: the one decision between the SDK path and the fast lane, and its two rules.

Pattern: the decision functions of ``gateway/proxy/_routing.py`` over plain
         JSON-RPC dicts, and a ``McpProxy``'s ``Routing`` with and without
         layers or governance (no upstream is started).
Role:    unit tests for ``_routing.py``'s progress rule and same-route
         rule; ``test_proxy_fast.py`` compares the two paths' answers end to end.
Emits:   nothing.

Laws: P25 (progress stays on the SDK path; the lane is the same route).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helmlog import ToolMiddleware, allow
from helmlog.gateway import McpProxy, ProxyContext
from helmlog.gateway.proxy._calls import CallState
from helmlog.gateway.proxy._routing import has_progress

from .upstream_server import UPSTREAM

ALLOW = ToolMiddleware(name="allow-all", on_tool_call=lambda c: allow())


def _call(params: Any, rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


MESSAGES = [
    _call({"name": "echo", "arguments": {"word": "x"}}),
    _call({"name": "echo", "_meta": {"progressToken": 7}}),
    _call({"name": "echo", "_meta": {"progressToken": None}}),
    _call({"name": "echo", "_meta": "not an object"}),
    _call({"name": "echo"}, rid=True),
    _call(None),
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}},
]


@pytest.mark.parametrize("message", MESSAGES)
def test_p25_progress_rule_a_progress_token_keeps_a_request_on_the_sdk_path(
    message: dict[str, Any],
) -> None:
    """The progress rule: the JSON path never takes what asks for progress
    (issue 26: the lane and the two HTTP transports are gone; the rule is
    ``Routing.raw_params``'s)."""
    routing = McpProxy(UPSTREAM).routing
    params = message.get("params")
    if has_progress(params):
        assert None is routing.raw_params(params)
    if routing.raw_params(params) is not None:
        assert not has_progress(params)


def test_p25_same_route_rule_the_raw_route_only_where_it_is_the_same_route() -> None:
    """The same-route rule: with no layer and no governance a plain call takes
    the raw route; a layer or governance sends it to the SDK models, and the raw route
    refuses to run there."""

    async def layer(req: Any, next: Any, ctx: Any) -> Any:
        return await next(req)

    params = {"name": "echo", "arguments": {"word": "x"}, "_meta": None}
    plain = McpProxy(UPSTREAM).routing
    assert {"name": "echo", "arguments": {"word": "x"}} == plain.raw_params(params)
    assert None is plain.raw_params({"name": 3})
    for routing in (
        McpProxy(UPSTREAM, tool_middleware=[layer]).routing,
        McpProxy(UPSTREAM, governance=[ALLOW]).routing,
    ):
        assert None is routing.raw_params(params)
        with pytest.raises(RuntimeError, match="same-route rule"):
            asyncio.run(
                routing.tool_raw(params, ProxyContext(), CallState("echo", None))
            )
