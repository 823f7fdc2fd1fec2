"""P14: helmlog tool links as the proxy's innermost layer, on the one pipeline.

Pattern: end to end with the real SDK client through ``McpProxy`` to a
         FastMCP upstream in process; the rows are read from the proxy
         session's stream in its store.
Role:    unit tests for ``gateway/proxy/_governance.py``.
Emits:   nothing.

Laws: P14 (S2–S4 in the proxy; ``_meta`` on a refusal; rows in the proxy
session's stream), R7 (``tool.dispatched`` before execute), R4 (facts to
``on_event``), P25 (an unchanged result is the upstream's own).
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest

from helmlog import ToolMiddleware, allow, ask, deny
from helmlog.events import MemoryEventStore, fold
from helmlog.gateway import McpProxy

from .proxy_helpers import proxied, text_of
from .upstream_server import CALLS, UPSTREAM

CEILING = ToolMiddleware(
    name="refund-ceiling",
    on_tool_call=lambda c: (
        deny("refunds over $10,000 go to the finance desk")
        if c.tool_name == "refund" and float(c.args["amount"]) > 10_000
        else allow()
    ),
)


async def _stream(store: MemoryEventStore) -> list[Any]:
    (sid,) = await store.sessions()
    return [r.decode() for r in await store.read(sid)]


async def test_p14_a_governance_denial_is_a_tool_error_with_its_reason() -> None:
    """P14, S4: is_error with the reason, _meta POLICY_DENIED + middleware; not run."""
    CALLS.clear()
    seen: list[Any] = []
    proxy = McpProxy(UPSTREAM, governance=[CEILING], on_telemetry=seen.append)
    async with proxied(proxy) as client:
        out = await client.call_tool("refund", {"amount": 50_000})
    assert (True, "refunds over $10,000 go to the finance desk") == (
        out.is_error,
        text_of(out),
    )
    assert {"rejection_reason": "POLICY_DENIED", "middleware": "refund-ceiling"} == (
        out.meta
    )
    assert [] == CALLS
    assert [("rejected", "POLICY_DENIED")] == [
        (e.outcome, e.rejection_reason) for e in seen
    ]


async def test_p14_rows_and_dispatch_go_to_the_proxy_session_stream() -> None:
    """P14, R7, S2: the agent's row types, tool.dispatched before execute, facts out."""
    store = MemoryEventStore()
    facts: list[Any] = []
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda r: allow(
            f"{r.result} [{r.tool_call_id} from {r.tool_source}]", "stamp"
        ),
    )
    proxy = McpProxy(
        UPSTREAM,
        name="gov",
        governance=[CEILING, stamp],
        store=store,
        on_event=facts.append,
    )
    async with proxied(proxy) as client:
        small = await client.call_tool("refund", {"amount": 5})
        await client.call_tool("refund", {"amount": 20_000})
    events = await _stream(store)
    assert "refunded 5.0 [mcp-gov-1 from upstream]" == text_of(small)
    assert [
        "decision.filed",
        "tool.dispatched",
        "decision.filed",
        "decision.filed",
    ] == [e.type for e in events]
    rows = fold(events).middleware_decisions
    assert [
        ("refund-ceiling", "before-tool", "allow", "mcp-gov-1"),
        ("stamp", "after-tool", "allow", "mcp-gov-1"),
        ("refund-ceiling", "before-tool", "deny", "mcp-gov-2"),
    ] == [(r.middleware, r.moment, r.outcome, r.tool_call_id) for r in rows]
    assert ["middleware.decision"] * 3 == [
        f.type for f in facts if f.type == "middleware.decision"
    ]
    assert {"amount": 5} == events[1].args


async def test_p14_an_ask_is_a_tool_error_in_the_proxy() -> None:
    """P14, S4: there is no pause here: the ask's text, is_error, not run."""
    CALLS.clear()
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("Sure?"))
    async with proxied(McpProxy(UPSTREAM, governance=[four_eyes])) as client:
        out = await client.call_tool("refund", {"amount": 1})
    assert out.is_error and [] == CALLS
    assert text_of(out).startswith("middleware 'four-eyes' asked a person to decide")


async def test_p25_an_unchanged_result_is_the_upstreams_own() -> None:
    """P14, P25: links that allow: the client gets the upstream's result as sent."""
    looked = ToolMiddleware(name="looks", on_tool_result=lambda r: allow())
    async with proxied(McpProxy(UPSTREAM, governance=[looked])) as client:
        out = await client.call_tool("echo", {"word": "x"})
        failed = await client.call_tool("explode", {})
    assert ({"result": "X"}, "X") == (out.structured_content, text_of(out))
    assert (True, "Error executing tool explode") == (  # v2 SDK: no exception text
        failed.is_error,
        text_of(failed),
    )


async def test_p14_governance_runs_after_every_rewrite() -> None:
    """P14: links see the arguments the outer middleware forwarded."""
    seen: list[Any] = []

    async def double(req: types.CallToolRequest, next: Any, ctx: Any) -> Any:
        args = {"amount": float((req.params.arguments or {})["amount"]) * 1000}
        params = req.params.model_copy(update={"arguments": args})
        return await next(req.model_copy(update={"params": params}))

    probe = ToolMiddleware(
        name="probe", on_tool_call=lambda c: seen.append(c.args) or allow()
    )
    proxy = McpProxy(UPSTREAM, tool_middleware=[double], governance=[probe, CEILING])
    async with proxied(proxy) as client:
        out = await client.call_tool("refund", {"amount": 20})
    assert [{"amount": 20_000.0}] == seen
    assert out.is_error


def test_p14_a_link_without_a_tool_hook_is_refused_at_construction() -> None:
    """P14: the same link checks as mcp_serve."""
    with pytest.raises(ValueError, match="McpProxy governance"):
        McpProxy(UPSTREAM, governance=[object()])
