"""G.13 — ``tool_source``: where a tool came from, as every link sees it.

Pattern: law-named unit tests on whole runs with the scripted provider; links
         record the ``tool_source`` of each context they are handed.
Role:    unit tests for ``Tool.source`` as the dispatch pipeline and the resume
         path put it into ``ToolCallContext`` / ``ToolResultContext``.
Emits:   nothing.

Laws: G78 (``tool_source`` is ``Tool.source``: ``None`` for ``@tool`` and for
``Tool(...)`` without a source; the same after a resume; not a row or fact
field; it tells apart two servers' tools that share a name).

Why no MCP client here: ``mcp_client`` tools are ``Tool`` values with
``source`` set to the client's name (S7); the gateway's own tests cover that
end, these cover what the runtime does with any source.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import MiddlewareDecision, MiddlewareDecisionEvent
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from .helpers import Recorder


def search_tool(source: str | None) -> Tool:
    return Tool(
        "search",
        "Search.",
        {"type": "object", "properties": {"q": {"type": "string"}}},
        lambda q: f"results for {q} from {source}",
        source,
    )


@tool
def search(q: str) -> str:
    """Search locally."""
    return f"local results for {q}"


def one_search() -> ScriptedProvider:
    call = ToolCallRequest(id="c1", name="search", args={"q": "refunds"})
    return scripted([Reply(tool_calls=[call]), "Found."])


def source_recorder(seen: list[tuple[str, Any]], name: str = "spy") -> ToolMiddleware:
    def on_call(c: Any) -> Any:
        seen.append(("call", c.tool_source))
        return allow()

    def on_result(r: Any) -> Any:
        seen.append(("result", r.tool_source))
        return allow()

    return ToolMiddleware(name=name, on_tool_call=on_call, on_tool_result=on_result)


def build(model: ScriptedProvider, t: Tool, *links: Any) -> Agent:
    return (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .tool(t)
        .tool_middleware(*links)
        .build()
    )


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (search, None),
        (search_tool(None), None),
        (Tool("search", "Search.", {"type": "object"}, lambda **k: "ok"), None),
        (search_tool("crm-eu"), "crm-eu"),
    ],
)
async def test_g78_tool_source_is_the_tools_source(
    t: Tool, expected: str | None
) -> None:
    """G78: both contexts carry Tool.source (None for @tool and no source)."""
    seen: list[tuple[str, Any]] = []
    agent = build(one_search(), t, source_recorder(seen))
    assert "Found." == await agent.run("find refunds")
    assert [("call", expected), ("result", expected)] == seen


async def test_g78_links_after_a_resume_see_the_same_source() -> None:
    """G78: the links that continue after a resume see the same tool_source."""
    seen: list[tuple[str, Any]] = []

    def asker(c: Any) -> Any:
        seen.append(("ask", c.tool_source))
        return ask("search the CRM?")

    agent = build(
        one_search(),
        search_tool("crm-eu"),
        ToolMiddleware(name="asker", on_tool_call=asker),
        source_recorder(seen),
    )
    paused = await agent.run("find refunds")
    assert is_ask_pause(paused)
    assert "Found." == await agent.resume(
        paused.checkpoint, check_in_approved(by="dana")
    )
    assert [("ask", "crm-eu"), ("call", "crm-eu"), ("result", "crm-eu")] == seen


async def test_g78_source_is_not_a_row_or_fact_field() -> None:
    """G78: tool_source appears in no row and no fact."""
    fields = set(MiddlewareDecision.__struct_fields__) | set(
        MiddlewareDecisionEvent.__struct_fields__
    )
    assert "tool_source" not in fields
    agent = build(one_search(), search_tool("crm-eu"), source_recorder([]))
    recorder = Recorder()
    agent.attach(recorder)
    await agent.run("find refunds")
    rows = agent.last_snapshot().middleware_decisions
    facts = recorder.of("middleware.decision")
    assert (2, 2) == (len(rows), len(facts))
    assert [] == [
        item for item in (*rows, *facts) if b"crm-eu" in msgspec.json.encode(item)
    ]


async def test_g78_one_link_tells_apart_two_servers_tools_sharing_a_name() -> None:
    """G78: the same link decides differently for 'search' from two sources."""

    def trusted_only(c: Any) -> Any:
        if c.tool_source == "web-server":
            return deny("web search is not allowed here")
        return allow()

    guard = ToolMiddleware(name="trusted-only", on_tool_call=trusted_only)
    docs_model, web_model = one_search(), one_search()
    docs_agent = build(docs_model, search_tool("docs-server"), guard)
    web_agent = build(web_model, search_tool("web-server"), guard)
    await docs_agent.run("find refunds")
    await web_agent.run("find refunds")
    assert (
        "results for refunds from docs-server",
        "web search is not allowed here",
    ) == (
        docs_model.requests[1].messages[-1].content,
        web_model.requests[1].messages[-1].content,
    )
