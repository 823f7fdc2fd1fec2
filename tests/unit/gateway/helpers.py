"""Shared helpers for the gateway's tests: an in-memory MCP session, the stored rows.

Pattern: small async context managers and readers, no fixtures with state.
Role:    imported by the ``tests/unit/gateway`` modules.
Emits:   nothing.

Laws: S6 (``rows`` and ``facts`` read the serving session's stream from its
store, which is where the ledger lives).

Why the SDK's own ``Client`` over ``ServedTools.memory_streams``: the tests
then speak real MCP (discover or initialize, list, call) with no network, in
either protocol era, and close every stream when the block ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import mcp.types as types
from mcp.client import Client

from helmlog.events import MiddlewareDecision
from helmlog.gateway._serve import ServedTools

#: The two ways a v2 client connects: 2026-07-28 (``auto`` lands there on a
#: v2 server) and the ``initialize`` handshake of the 2025 revisions.
MODES: tuple[Literal["auto", "legacy"], ...] = ("auto", "legacy")


@asynccontextmanager
async def connected(
    served: ServedTools, mode: Literal["auto", "legacy"] = "auto"
) -> AsyncIterator[Client]:
    """One MCP connection to ``served``, in memory, in the protocol era ``mode``."""
    async with Client(served.memory_streams(), mode=mode, cache=None) as client:
        yield client


def text_of(result: types.CallToolResult) -> tuple[str, bool]:
    """What the client received: the one text block and the error flag."""
    assert 1 == len(result.content)
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text, bool(result.is_error)


async def call(
    served: ServedTools, name: str, arguments: dict[str, Any] | None = None
) -> tuple[str, bool]:
    """Call one tool over a fresh in-memory session."""
    async with connected(served) as session:
        return text_of(await session.call_tool(name, arguments))


async def stored(served: ServedTools, index: int = 0) -> list[Any]:
    """Every event of the ``index``-th serving session, decoded, in seq order."""
    sid = served.session_ids[index]
    return [record.decode() for record in await served.store.read(sid)]


async def rows(served: ServedTools, index: int = 0) -> list[MiddlewareDecision]:
    """The ledger rows of one serving session, in order."""
    return [e.row for e in await stored(served, index) if e.type == "decision.filed"]
