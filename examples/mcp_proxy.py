"""A governance proxy in front of a real MCP server it did not write.

Pattern: one file, three roles: ``serve`` runs the upstream (an MCPServer
         server with an ordinary, a destructive, a PII-returning and a
         refund tool); ``POLICY`` is the mapping of ``McpProxy`` options that
         ``helmlog mcp-proxy --policy mcp_proxy:POLICY`` loads; running it
         with no argument puts the proxy in front of the upstream (as a
         subprocess) and calls it through the proxy with the real MCP client.
Role:    a documented recipe (not part of the ``helmlog`` API); run it with
         ``uv run python examples/mcp_proxy.py``, or serve it from the shell::

             cd examples && helmlog mcp-proxy \\
                 --upstream "python mcp_proxy.py serve" --policy mcp_proxy:POLICY

Emits:   the proxy's telemetry and its governance rows; it prints each case.

Laws it leans on: P3 (``tool_middleware=[mask_ssn, audit_log]``: the audit
layer starts first and records a response already masked), P9 (a hidden tool
is not found, with ``TOOL_HIDDEN``), P13 (the audit layer is a pass-through
observer), P14 (a governance link denies a large refund; the client reads
its reason, ``_meta`` says ``POLICY_DENIED``), P15 (telemetry per call).
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from pathlib import Path
from typing import Any

import mcp.types as types

from helmlog import ToolMiddleware, allow, deny
from helmlog.gateway import McpProxy, mark_pass_through_observer

SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
AUDIT_LOG: list[str] = []


async def mask_ssn(req: Any, next: Any, ctx: Any) -> Any:
    """Mask SSNs in every text block of a tool result (innermost: first to see it)."""
    out = await next(req)
    blocks = [
        b.model_copy(update={"text": SSN.sub("***-**-****", b.text)})
        if isinstance(b, types.TextContent)
        else b
        for b in out.content
    ]
    structured = out.structured_content
    if isinstance(structured, dict) and isinstance(structured.get("result"), str):
        structured = {"result": SSN.sub("***-**-****", structured["result"])}
    return out.model_copy(update={"content": blocks, "structured_content": structured})


async def _audit_log(req: Any, next: Any, ctx: Any) -> Any:
    out = await next(req)
    text = " ".join(b.text for b in out.content if isinstance(b, types.TextContent))
    AUDIT_LOG.append(f"audit: {req.params.name} -> {text}")
    return out


audit_log = mark_pass_through_observer(_audit_log)

refund_ceiling = ToolMiddleware(
    name="refund-ceiling",
    on_tool_call=lambda call: (
        deny("refunds over $10,000 go to the finance desk")
        if call.tool_name == "refund" and float(call.args.get("amount", 0)) > 10_000
        else allow()
    ),
)

POLICY: dict[str, Any] = {
    "name": "support-gate",
    "hidden_tools": ["drop_database"],
    "tool_middleware": [mask_ssn, audit_log],
    "governance": [refund_ceiling],
}


def serve() -> None:
    """The upstream: an MCPServer (the SDK's; FastMCP of v1) on stdio."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("support-desk")

    @server.tool()
    def order_status(order: int) -> str:
        """Where an order is."""
        return f"order {order} shipped"

    @server.tool()
    def customer(name: str) -> str:
        """A customer record (it holds an SSN)."""
        return f"{name}, ssn 123-45-6789, gold tier"

    @server.tool()
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        return f"refunded ${amount:,.2f} on order {order}"

    @server.tool()
    def drop_database() -> str:
        """Destroys everything."""
        return "dropped"

    server.run("stdio")


async def main() -> None:
    """Put the proxy in front of the upstream and show each case."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from helmlog.gateway import mcp_client
    from helmlog.gateway._client import McpToolError

    # The SDK logs a closed SSE stream at error level when a session ends.
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.CRITICAL)
    upstream = [sys.executable, str(Path(__file__).resolve()), "serve"]
    proxy = McpProxy(upstream, **POLICY)
    async with proxy, proxy.http_server() as url:
        async with mcp_client("gate", url=url) as tools:
            print("tools the client sees:", ", ".join(sorted(t.name for t in tools)))
            by_name = {t.name: t for t in tools}
            print("ordinary call:", await by_name["order_status"].execute(order=7))
            print("masked:", await by_name["customer"].execute(name="Ann"))
            print(AUDIT_LOG[-1])
            try:
                await by_name["refund"].execute(order=7, amount=50_000)
            except McpToolError as exc:
                print("denied:", exc)
            print("small refund:", await by_name["refund"].execute(order=7, amount=25))
        async with Client(url) as session:
            try:
                await session.call_tool("drop_database", {})
            except MCPError as exc:
                reason = (exc.error.data or {})["rejection_reason"]
                print(f"hidden: {exc.error.message} ({reason})")


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        asyncio.run(main())
