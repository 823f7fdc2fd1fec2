"""S4 with real clients that take no tasks: the pending ask, then its outcome.

Pattern: the served refund desk (``task_server``) over Streamable HTTP,
         reached by FastMCP 4's client and by the MCP Inspector's CLI (npx),
         neither of which declares the tasks extension; a person decides
         through ``decide_pending`` (what the approvals page calls).
Role:    unit tests of ``gateway/_serve.py``'s S4 path with real clients.
Emits:   nothing.

Laws: S4 (an ask is a tool error naming the pending ask; the asking call,
repeated with ``_meta`` naming it, reads the outcome), R9 (the tool runs
once), R18 (the asks index lists it).

Why both: FastMCP's client can carry ``_meta`` and reads the outcome back;
the Inspector's CLI cannot, and still learns the ask and where to decide it.
"""

from __future__ import annotations

from typing import Any

from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport

from helmlog.events import MemoryEventStore
from helmlog.gateway._tasks import ASK_META
from helmlog.runtime.lowlevel import decide_pending

from .task_server import build
from .test_serve_clients import _fast_text, _inspector, needs_npx


def _ask_id(text: str) -> str:
    return text.split("waits as ask '", 1)[1].split("'", 1)[0]


async def test_s4_fastmcp_reads_back_the_outcome_of_a_decided_ask() -> None:
    """S4, R9: FastMCP 4 gets the tool error naming the ask; once dana
    approves, the same call with ``_meta`` naming it returns the real result,
    and the tool ran once."""
    served = build(MemoryEventStore())
    ran: list[int] = []
    tool = served.tools["refund"]
    original = tool.execute

    def counted(amount: int) -> Any:
        ran.append(amount)
        return original(amount=amount)

    tool.execute = counted
    async with (
        served.http_server() as url,
        FastMCPClient(StreamableHttpTransport(url)) as c,
    ):
        asked = await c.call_tool("refund", {"amount": 250}, raise_on_error=False)
        text, is_error = _fast_text(asked)
        ask_id = _ask_id(text)
        await decide_pending(
            served.store,
            ask_id.partition("/")[0],
            served.resume,
            approved=True,
            by="dana",
            note=None,
        )
        read = await c.call_tool("refund", {"amount": 250}, meta={ASK_META: ask_id})
    assert is_error and "helmlog approve" in text
    assert ("refunded 250", False) == _fast_text(read)
    assert [250] == ran


@needs_npx
async def test_s4_the_inspector_cli_is_told_the_pending_ask() -> None:
    """S4, R18: the Inspector's ``tools/call`` exits as a tool error whose text
    names the ask, ``helmlog approve`` and the approvals page."""
    served = build(MemoryEventStore())
    async with served.http_server() as url:
        called = await _inspector(
            url,
            "--transport",
            "http",
            "--method",
            "tools/call",
            "--tool-name",
            "refund",
            "--tool-arg",
            "amount=250",
            tool_error=True,
        )
    text = called["content"][0]["text"]
    session_id = _ask_id(text).partition("/")[0]
    assert called["isError"]
    assert f"`helmlog approve {session_id}`" in text and "approvals page" in text
    assert session_id in served.session_ids
