"""P1–P7: the proxy's middleware model — compose, option order, next(), context.

Pattern: the pure pipeline first (``compose`` over plain values), then the
         same laws end to end through ``McpProxy`` with the real SDK client
         and a FastMCP upstream in process.
Role:    unit tests for ``gateway/proxy/_layers.py`` and the tool route.
Emits:   nothing.

Laws: P2, P3, P4, P5, P6, P7.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from helmlog.gateway import McpProxy, ProxyContext, RejectionReason, compose
from helmlog.gateway.proxy._layers import clean_headers

from .proxy_helpers import proxied, redacted, text_of
from .upstream_server import UPSTREAM


def _tracer(name: str, trace: list[str]) -> Any:
    async def layer(req: Any, next: Any, ctx: Any) -> Any:
        trace.append(f"{name}-enter")
        out = await next([*req, name])
        trace.append(f"{name}-exit")
        return [*out, name]

    return layer


async def test_p2_compose_runs_outermost_first() -> None:
    """P2: a, b enter; the terminal (seeing both rewrites); b, a exit."""
    trace: list[str] = []

    async def terminal(req: Any) -> Any:
        trace.append(f"terminal{req}")
        return ["t"]

    out = await compose([_tracer("a", trace), _tracer("b", trace)])([], terminal)
    assert ["a-enter", "b-enter", "terminal['a', 'b']", "b-exit", "a-exit"] == trace
    assert ["t", "b", "a"] == out


async def test_p2_an_empty_compose_runs_the_terminal_directly() -> None:
    """P2: compose([]) is the terminal."""

    async def terminal(req: Any) -> Any:
        return ("terminal", req)

    assert ("terminal", 7) == await compose([])(7, terminal)


async def test_p4_a_second_next_raises_when_awaited_and_reaches_the_upstream_once() -> (
    None
):
    """P4: next() twice: the second awaitable raises; the first is unaffected."""
    reached: list[Any] = []

    async def terminal(req: Any) -> Any:
        reached.append(req)
        return "first"

    async def twice(req: Any, next: Any, ctx: Any) -> Any:
        first = await next(req)
        second = next(req)  # no raise at call time
        try:
            await second
        except RuntimeError as exc:
            return (first, str(exc))
        return "unreachable"

    assert ("first", "next() called multiple times") == await compose([twice])(
        1, terminal
    )
    assert [1] == reached


async def test_p5_every_layer_of_one_run_gets_the_same_context() -> None:
    """P5: one context object per invocation; none given is a fresh stdio context."""
    seen: list[ProxyContext] = []

    async def grab(req: Any, next: Any, ctx: ProxyContext) -> Any:
        seen.append(ctx)
        return await next(req)

    async def terminal(req: Any) -> Any:
        return req

    await compose([grab, grab])(0, terminal)
    await compose([grab])(0, terminal)
    assert seen[0] is seen[1]
    assert seen[0] is not seen[2]
    assert ("stdio", None) == (seen[0].transport, seen[0].session_id)
    assert seen[0].request_id != seen[2].request_id


async def test_p6_errors_propagate_outward_and_a_layer_may_short_circuit() -> None:
    """P6: an inner raise reaches the outer layers; no next() short-circuits."""
    caught: list[str] = []

    async def outer(req: Any, next: Any, ctx: Any) -> Any:
        try:
            return await next(req)
        except ValueError as exc:
            caught.append(str(exc))
            return "recovered"

    async def failing(req: Any, next: Any, ctx: Any) -> Any:
        raise ValueError("inner")

    async def short(req: Any, next: Any, ctx: Any) -> Any:
        return "short"

    async def terminal(req: Any) -> Any:
        raise AssertionError("the terminal must not run")

    assert "recovered" == await compose([outer, failing])(0, terminal)
    assert ["inner"] == caught
    assert "short" == await compose([short])(0, terminal)


def test_p7_credential_headers_never_reach_the_context() -> None:
    """P7: lowercased keys, repeats joined by ', ', credential headers removed."""
    raw = [
        ("X-Tenant", "a"),
        ("x-tenant", "b"),
        ("Authorization", "Bearer s"),
        ("Cookie", "c=1"),
        ("X-Api-Key", "k"),
        ("Proxy-Authorization", "p"),
        ("Set-Cookie", "s"),
    ]
    assert {"x-tenant": "a, b"} == clean_headers(raw)


def test_p11_rejection_reasons_are_a_closed_set_of_strings() -> None:
    """P11: the eleven reasons, as their own string values (issue 26 added
    OUTPUT_SCHEMA, P27)."""
    assert [
        "TOOL_HIDDEN",
        "RESOURCE_HIDDEN",
        "POLICY_DENIED",
        "SESSION_LIMIT",
        "BODY_LIMIT",
        "LEDGER_UNAVAILABLE",
        "IDENTITY_UNRESOLVED",
        "CONSENT_MISSING",
        "DELEGATION_INVALID",
        "BUDGET_EXCEEDED",
        "OUTPUT_SCHEMA",
    ] == [str(r) for r in RejectionReason]


async def test_p3_option_arrays_are_response_processing_order() -> None:
    """P3: tool_middleware=[pii, audit]: audit starts first, records the redaction."""
    trace: list[str] = []
    audited: list[str] = []

    async def pii(req: Any, next: Any, ctx: Any) -> Any:
        trace.append("pii-enter")
        out = await next(req)
        text = text_of(out).replace("123-45-6789", "***-**-****")
        return redacted(out, text)

    async def audit(req: Any, next: Any, ctx: Any) -> Any:
        trace.append("audit-enter")
        out = await next(req)
        audited.append(text_of(out))
        return out

    option = [pii, audit]
    async with proxied(McpProxy(UPSTREAM, tool_middleware=option)) as client:
        out = await client.call_tool("lookup_customer", {"name": "ann"})
    assert ["audit-enter", "pii-enter"] == trace
    assert ["ann: ssn ***-**-****"] == audited
    assert "ann: ssn ***-**-****" == text_of(out)
    assert [pii, audit] == option  # never mutated


async def test_p7_one_context_per_request_over_the_real_client() -> None:
    """P5, P7: each request's layers share one context; each request gets a new id."""
    seen: list[ProxyContext] = []

    async def grab(req: Any, next: Any, ctx: ProxyContext) -> Any:
        seen.append(ctx)
        return await next(req)

    proxy = McpProxy(UPSTREAM, tool_middleware=[grab, grab], name="p7")
    async with proxied(proxy) as client:
        await client.call_tool("echo", {"word": "a"})
        await client.call_tool("echo", {"word": "b"})
    assert seen[0] is seen[1] and seen[2] is seen[3]
    assert seen[0].request_id != seen[2].request_id
    assert ("stdio", None, None, "p7") == (
        seen[0].transport,
        seen[0].session_id,
        seen[0].headers,
        seen[0].server_name,
    )


async def test_p6_a_layer_error_reaches_the_client_as_an_mcp_error() -> None:
    """P6, H4: a layer that raises fails the request with a fixed message and
    an error id (its text is only logged); the upstream is not called."""

    async def broken(req: Any, next: Any, ctx: Any) -> Any:
        raise ValueError("layer broke")

    async with proxied(McpProxy(UPSTREAM, tool_middleware=[broken])) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "a"})
    error = raised.value.error
    assert isinstance(error.data, dict)
    eid = error.data["error_id"]
    assert f"the proxy could not complete this tool call (error id {eid})" == (
        error.message
    )
