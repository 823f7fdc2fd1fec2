"""P8–P13, P15, P16: routing by exact name, hidden and pass-through, observers.

Pattern: end to end with the real SDK client through ``McpProxy`` to a
         FastMCP upstream in process; ``CALLS`` shows what the upstream ran.
Role:    unit tests for the routes of ``gateway/proxy/_session.py``.
Emits:   nothing.

Laws: P1, P8, P9, P10, P11, P12, P13, P15, P16.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from helmlog.gateway import McpProxy, ProxyContext, mark_pass_through_observer

from .proxy_helpers import proxied, redacted, text_of
from .upstream_server import CALLS, UPSTREAM


def _rename(to: str) -> Any:
    async def layer(req: types.CallToolRequest, next: Any, ctx: Any) -> Any:
        params = req.params.model_copy(update={"name": to, "arguments": {}})
        return await next(req.model_copy(update={"params": params}))

    return layer


async def test_p9_a_hidden_tool_is_not_found_with_a_reason() -> None:
    """P9: -32601, 'Tool not found', TOOL_HIDDEN; no upstream, no middleware."""
    ran: list[str] = []

    async def layer(req: Any, next: Any, ctx: Any) -> Any:
        ran.append("layer")
        return await next(req)

    CALLS.clear()
    proxy = McpProxy(
        UPSTREAM, hidden_tools=["delete_everything"], tool_middleware=[layer]
    )
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("delete_everything", {})
        listed = [t.name for t in (await client.list_tools()).tools]
    err = raised.value.error
    assert (-32601, "Tool not found: delete_everything") == (err.code, err.message)
    assert {"rejection_reason": "TOOL_HIDDEN"} == err.data
    assert ([], []) == (ran, CALLS)
    assert "delete_everything" not in listed and "echo" in listed


async def test_p8_visibility_may_depend_on_the_caller() -> None:
    """P8: a predicate (name, ctx) decides; a raising one hides (fail closed)."""

    def hidden(name: str, ctx: ProxyContext) -> bool:
        if name == "refund":
            raise RuntimeError("policy store down")
        return name == "echo" and ctx.identity != "admin"

    for identity, expected in ((None, ["refund", "echo"]), ("admin", ["refund"])):
        proxy = McpProxy(
            UPSTREAM, hidden_tools=hidden, resolve_identity=lambda h, i=identity: i
        )
        async with proxied(proxy) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
        assert [n for n in ("refund", "echo") if n not in listed] == expected


async def test_p10_a_rename_by_middleware_cannot_reach_a_hidden_tool() -> None:
    """P10: the terminal re-checks the forwarded name; telemetry records both names."""
    seen: list[Any] = []
    CALLS.clear()
    proxy = McpProxy(
        UPSTREAM,
        hidden_tools=["delete_everything"],
        tool_middleware=[_rename("delete_everything")],
        on_telemetry=seen.append,
    )
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "x"})
    assert {"rejection_reason": "TOOL_HIDDEN"} == raised.value.error.data
    assert [] == CALLS
    assert [("echo", "delete_everything", "rejected", "TOOL_HIDDEN")] == [
        (e.tool, e.forwarded_tool, e.outcome, e.rejection_reason) for e in seen
    ]


async def test_p9_a_hidden_resource_is_not_found_and_not_listed() -> None:
    """P9: -32600, 'Resource not found', RESOURCE_HIDDEN; listing loses the URI."""
    proxy = McpProxy(UPSTREAM, hidden_resources=["data://secret"])
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource("data://secret")  # type: ignore[arg-type]
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        public = await client.read_resource("data://public")  # type: ignore[arg-type]
    err = raised.value.error
    assert (-32600, "Resource not found: data://secret") == (err.code, err.message)
    assert {"rejection_reason": "RESOURCE_HIDDEN"} == err.data
    assert ["data://public"] == listed
    assert "public data" == public.contents[0].text  # type: ignore[union-attr]


async def test_p1_prompts_pass_unchanged() -> None:
    """P1: prompts are not interceptable; they reach the upstream as sent."""
    async with proxied(McpProxy(UPSTREAM, hidden_tools=["echo"])) as client:
        names = [p.name for p in (await client.list_prompts()).prompts]
        got = await client.get_prompt("greet", {"name": "ann"})
    assert ["greet"] == names
    assert "Hello ann" == got.messages[0].content.text  # type: ignore[union-attr]


async def test_p12_a_pass_through_tool_skips_transforming_middleware() -> None:
    """P12: the original params go up, the raw result comes back, no layer runs."""
    ran: list[str] = []

    async def transformer(req: Any, next: Any, ctx: Any) -> Any:
        ran.append("transformer")
        return redacted(await next(req), "changed")

    proxy = McpProxy(
        UPSTREAM, tool_middleware=[transformer], pass_through_tools=["echo"]
    )
    async with proxied(proxy) as client:
        out = await client.call_tool("echo", {"word": "raw"})
        other = await client.call_tool("refund", {"amount": 1})
    assert ("RAW", "changed") == (text_of(out), text_of(other))
    assert ["transformer"] == ran


async def test_p13_pass_through_observers_see_the_call_and_change_nothing() -> None:
    """P13: an observer runs; its rewrites, returns, skips and raises change nothing."""
    seen: list[str] = []

    async def rewrites(req: Any, next: Any, ctx: Any) -> Any:
        seen.append(f"rewrites:{req.params.name}")
        await next(
            req.model_copy(
                update={
                    "params": req.params.model_copy(
                        update={"arguments": {"word": "evil"}}
                    )
                }
            )
        )
        return redacted(await _nothing(), "observer's own")

    async def never_calls_next(req: Any, next: Any, ctx: Any) -> Any:
        seen.append("skips")
        return await _nothing()

    async def raises(req: Any, next: Any, ctx: Any) -> Any:
        seen.append("raises")
        raise RuntimeError("observer broke")

    async def plain(req: Any, next: Any, ctx: Any) -> Any:
        seen.append("plain")
        return await next(req)

    for observer in (rewrites, never_calls_next, raises):
        CALLS.clear()
        marked = mark_pass_through_observer(observer)
        assert marked is not observer
        proxy = McpProxy(
            UPSTREAM, tool_middleware=[plain, marked], pass_through_tools=["echo"]
        )
        async with proxied(proxy) as client:
            out = await client.call_tool("echo", {"word": "orig"})
        assert ("ORIG", ["echo"]) == (text_of(out), CALLS)
    assert ["rewrites:echo", "skips", "raises"] == seen


async def _nothing() -> types.CallToolResult:
    return types.CallToolResult(content=[])


async def test_p13_an_observer_is_an_ordinary_layer_on_other_calls() -> None:
    """P13: on a routed call a marked layer rewrites like any other."""

    async def upper(req: Any, next: Any, ctx: Any) -> Any:
        return redacted(await next(req), "observed")

    proxy = McpProxy(
        UPSTREAM,
        tool_middleware=[mark_pass_through_observer(upper)],
        pass_through_tools=["refund"],
    )
    async with proxied(proxy) as client:
        out = await client.call_tool("echo", {"word": "x"})
    assert "observed" == text_of(out)


async def test_p15_telemetry_fires_once_per_call_on_every_route() -> None:
    """P15: one event per call, with route outcome; an is_error result is a success."""
    seen: list[Any] = []
    proxy = McpProxy(
        UPSTREAM,
        hidden_tools=["delete_everything"],
        pass_through_tools=["echo"],
        on_telemetry=seen.append,
    )
    async with proxied(proxy) as client:
        await client.call_tool("echo", {"word": "x"})
        await client.call_tool("explode", {})
        with pytest.raises(MCPError):
            await client.call_tool("delete_everything", {})
    assert [
        ("tool_call", "echo", "echo", "success", None, "pass-through"),
        ("tool_call", "explode", "explode", "success", None, "pipeline"),
        ("tool_call", "delete_everything", None, "rejected", "TOOL_HIDDEN", "hidden"),
    ] == [
        (e.type, e.tool, e.forwarded_tool, e.outcome, e.rejection_reason, e.route)
        for e in seen
    ]
    assert all(e.duration_ms >= 0 and e.request_id for e in seen)


async def test_p16_a_failing_observer_never_fails_a_call() -> None:
    """P16: on_telemetry raising: results, upstream errors and reasons are kept."""

    def broken(event: Any) -> None:
        raise RuntimeError("telemetry down")

    proxy = McpProxy(
        UPSTREAM,
        hidden_tools=["delete_everything"],
        on_telemetry=broken,
        on_event=broken,
    )
    async with proxied(proxy) as client:
        ok = await client.call_tool("echo", {"word": "x"})
        with pytest.raises(MCPError) as hidden:
            await client.call_tool("delete_everything", {})
        unknown = await client.call_tool("no_such_tool", {})
    assert "X" == text_of(ok)
    assert {"rejection_reason": "TOOL_HIDDEN"} == hidden.value.error.data
    assert (True, "Unknown tool: no_such_tool") == (unknown.is_error, text_of(unknown))
