"""Shared helpers for the proxy's tests: a real SDK client session through a proxy.

Pattern: async context managers over the SDK's in-memory stream pair; the
         proxy runs one stdio-style session on the server end.
Role:    imported by ``tests/unit/gateway/test_proxy_*.py``.
Emits:   nothing.

Laws: none itself; P1–P25 are tested with these.

Why in memory: the tests then speak real MCP to the proxy (initialize, list,
call) with no network, and every stream and task ends with the block.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from helmlog.gateway import McpProxy


@asynccontextmanager
async def through(proxy: McpProxy, **client: Any) -> AsyncIterator[ClientSession]:
    """One initialized client session with a started ``proxy``, in memory."""
    async with (
        create_client_server_memory_streams() as (cs, ss),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(proxy.run, *ss)
        async with ClientSession(*cs, **client) as session:
            await session.initialize()
            yield session
        tg.cancel_scope.cancel()


@asynccontextmanager
async def modern_through(proxy: McpProxy) -> AsyncIterator[ClientSession]:
    """One 2026-era client session (``server/discover``) with ``proxy``, in memory."""
    async with (
        create_client_server_memory_streams() as (cs, ss),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(proxy.run, *ss)
        async with ClientSession(*cs) as session:
            await session.discover()
            yield session
        tg.cancel_scope.cancel()


@asynccontextmanager
async def proxied(proxy: McpProxy, **client: Any) -> AsyncIterator[ClientSession]:
    """Start ``proxy`` (its upstream) and open one client session through it."""
    async with proxy, through(proxy, **client) as session:
        yield session


def text_of(result: types.CallToolResult) -> str:
    """The text of a tool result's blocks, joined."""
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def redacted(result: types.CallToolResult, text: str) -> types.CallToolResult:
    """``result`` with ``text`` in place of its content (FastMCP's ``result`` key)."""
    return result.model_copy(
        update={
            "content": [types.TextContent(type="text", text=text)],
            "structured_content": {"result": text},
        }
    )


class RequestIds:
    """A client's write stream that keeps the id each request went out with."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: dict[str, types.RequestId] = {}

    async def send(self, message: SessionMessage) -> None:
        root = message.message
        if isinstance(root, types.JSONRPCRequest):
            self.sent[root.method] = root.id
        await self.inner.send(message)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> RequestIds:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
