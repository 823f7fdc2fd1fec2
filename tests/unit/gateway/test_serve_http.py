"""mcp_serve over Streamable HTTP, reached by mcp_client(url=...); R7 when served.

Pattern: ``mcp_serve``'s ASGI app on uvicorn on a free loopback port in this
         process, and the helmlog MCP client over HTTP against it.
Role:    unit tests for ``ServedTools.http_app``/``http_server`` and the
         client's HTTP transport.
Emits:   nothing.

Laws: S7 (over Streamable HTTP), S6 (one serving session per MCP session; a
2026-07-28 request over HTTP is one, as that revision has no session), R7 (a
served call appends ``tool.dispatched`` before ``execute``; a refused append
means the tool never runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from mcp.client import Client

from helmlog import Tool, ToolMiddleware, allow, deny
from helmlog.events import MemoryEventStore, StoredEvent
from helmlog.gateway import mcp_client, mcp_serve
from helmlog.gateway._client import McpToolError

from .helpers import text_of

ran: list[str] = []


def _echo() -> Tool:
    def execute(word: str) -> str:
        ran.append(word)
        return word.upper()

    schema = {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
    }
    return Tool("echo", "Echo a word.", schema, execute)


NO_ZERO = ToolMiddleware(
    name="no-zero",
    on_tool_call=lambda c: (
        deny("zero is not a word") if c.args.get("word") == "zero" else allow()
    ),
)


async def test_s7_mcp_client_over_http_reaches_mcp_serve() -> None:
    """S7, S6: list and call over Streamable HTTP; a denial is a raised tool error.

    ``mcp_client`` lands on 2026-07-28, where each HTTP request stands alone,
    so its two calls are two serving sessions (one under mcp 1.x's handshake).
    """
    served = mcp_serve([_echo()], name="desk", tool_middleware=[NO_ZERO])
    async with served.http_server() as url, mcp_client("desk-http", url=url) as tools:
        assert [("echo", "desk-http")] == [(t.name, t.source) for t in tools]
        assert "HI" == await tools[0].execute(word="hi")
        with pytest.raises(McpToolError) as raised:
            await tools[0].execute(word="zero")
    assert (
        "MCP tool 'echo' (server 'desk-http') returned an error: zero is not a word"
    ) == str(raised.value)
    assert 2 == len(served.session_ids)


async def test_s6_a_handshake_era_http_session_is_one_serving_session() -> None:
    """S6: a 2025-era client's ``Mcp-Session-Id`` session files both calls in one."""
    served = mcp_serve([_echo()], name="desk", tool_middleware=[NO_ZERO])
    async with (
        served.http_server() as url,
        Client(url, mode="legacy", cache=None) as client,
    ):
        assert "2025-11-25" == client.protocol_version
        assert ("HI", False) == text_of(await client.call_tool("echo", {"word": "hi"}))
        assert ("zero is not a word", True) == text_of(
            await client.call_tool("echo", {"word": "zero"})
        )
    assert 1 == len(served.session_ids)


async def test_r7_a_served_call_appends_tool_dispatched_before_execute() -> None:
    """R7: the stream holds tool.dispatched, with the arguments, before the result."""
    seen: list[Any] = []
    served = mcp_serve([_echo()], name="desk", tool_middleware=[NO_ZERO])
    served.on("tool.dispatched", lambda e: seen.append((e.tool_name, list(ran))))
    ran.clear()
    async with served.http_server() as url, mcp_client("d", url=url) as tools:
        await tools[0].execute(word="go")
    events = [r.decode() for r in await served.store.read(served.session_ids[0])]
    assert ["decision.filed", "tool.dispatched"] == [e.type for e in events]
    assert ({"word": "go"}, "mcp-desk-1") == (events[1].args, events[1].tool_call_id)
    assert [("echo", [])] == seen  # delivered before the tool ran


class _RefusesDispatch(MemoryEventStore):
    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if any(r.type == "tool.dispatched" for r in records):
            raise OSError("disk full")
        return await super().append_sealed(session_id, records, expected_seq)


async def test_r7_an_unrecorded_dispatch_never_executes() -> None:
    """R7, R5, S6: the dispatch append fails: an MCP error, the tool never ran."""
    ran.clear()
    served = mcp_serve([_echo()], name="desk", store=_RefusesDispatch())
    async with served.http_server() as url, mcp_client("d", url=url) as tools:
        with pytest.raises(McpToolError) as raised:
            await tools[0].execute(word="go")
    assert "could not record this call" in str(raised.value)
    assert [] == ran
