"""The shared scenario through LangChain: the native loop's rows, row for row.

Pattern: ``scenario.py``'s two conversations played by LangChain's own fake
         chat model inside ``create_agent`` (real LangGraph, a real
         checkpointer), governed by ``governance(...)`` with the scenario's
         act-table; each session's ledger is compared whole with
         ``expected_rows()``, the native loop's.
Role:    issue 27 items 1, 5 and 6 for LangChain: the ask approved through
         LangGraph's ``Command(resume=...)``, and from a second process
         (``helmlog approve`` on a real Redis) then read back on resume.

Laws: G15, G21, G33, G39, G59–G64, R9, R3 (the chain ``verify`` checks),
R18 (``asks``, ``approve``, ``verify``, ``replay`` on the command line).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as lc_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from helmlog import Tool, check_in_approved
from helmlog.events import EventStore, MemoryEventStore, open_event_store
from helmlog.integrations import Governance
from helmlog.integrations.langchain import RECORDED, SESSION_KEY, governance
from helmlog.runtime.providers import framework_model

from . import scenario as sc

APPROVER_AGENT = "tests.integration.integrations.scenario:governance"
NATIVE_AGENT = "tests.integration.integrations.scenario:native_agent"


class ScriptedChat(FakeMessagesListChatModel):
    """LangChain's list-of-replies fake model, with the no-op tool binding
    ``create_agent`` needs (as LangChain's own agent tests' fake model)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:
        return self


def _model(name: str) -> ScriptedChat:
    """The scenario's replies for conversation ``name``, as LangChain messages."""
    return ScriptedChat(
        responses=[
            AIMessage(
                content=r.content,
                tool_calls=[
                    {"name": c.name, "args": dict(c.args), "id": c.id}
                    for c in r.tool_calls
                ],
            )
            for r in sc.SCRIPTS[name]
        ]
    )


def _tools() -> list[BaseTool]:
    """The scenario's two functions as LangChain tools (``@tool``)."""
    return [lc_tool(sc.lookup_order), lc_tool(sc.refund)]


def _agent(store: EventStore, name: str) -> Any:
    tools = _tools()
    rules = Governance(
        sc.build_agent(
            store,
            framework_model("langchain"),
            tools=[Tool.from_langchain(t) for t in tools],
        )
    )
    return create_agent(
        _model(name),
        tools,
        middleware=[governance(rules)],
        checkpointer=InMemorySaver(),
    )


def _start(name: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(sc.MESSAGES[name])], SESSION_KEY: f"lc-{name}"}


def _cfg(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


async def _types(store: EventStore, out: dict[str, Any]) -> list[str]:
    """The session's event types in order (item 5: the native loop's events)."""
    return [r.decode().type for r in await store.read(out[SESSION_KEY])]


def _tool_texts(messages: list[Any]) -> list[tuple[str | None, str, str]]:
    return [
        (m.name, m.status, m.content) for m in messages if isinstance(m, ToolMessage)
    ]


async def test_refund_800_approved_through_command_resume_files_the_native_rows(
    runs_file: Path,
) -> None:
    """Items 1, 5, 6: the ask interrupts; ``Command(resume=check_in_approved)``
    runs the real refund once; the ledger equals the native loop's, whole,
    and so do the session's events, type for type."""
    store = MemoryEventStore()
    agent = _agent(store, sc.REFUND_800)
    cfg = _cfg(sc.REFUND_800)
    out = await agent.ainvoke(_start(sc.REFUND_800), cfg)
    (pending,) = out["__interrupt__"]
    assert ("four-eyes", "Refund over $500?", "refund", "c2") == (
        pending.value["rule"],
        pending.value["question"],
        pending.value["tool"],
        pending.value["tool_call_id"],
    )
    assert ["lookup_order"] == sc.runs(runs_file)
    out = await agent.ainvoke(Command(resume=check_in_approved(sc.APPROVER)), cfg)
    assert sc.FINAL[sc.REFUND_800] == out["messages"][-1].content
    assert ["lookup_order", "refund"] == sc.runs(runs_file)
    assert [
        ("lookup_order", "success", sc.TOOL_RESULTS["lookup_order"]),
        ("refund", "success", sc.TOOL_RESULTS["refund"]),
    ] == _tool_texts(out["messages"])
    # G33: the thread keeps the admitted (scrubbed) user message.
    assert "123-45-6789" not in out["messages"][0].content
    expected = await sc.expected_rows(sc.REFUND_800)
    assert expected == await sc.session_rows(store, out[SESSION_KEY])
    assert await sc.expected_types(sc.REFUND_800) == await _types(store, out)


async def test_refund_20000_denied_the_model_reads_the_refusal_native_rows(
    runs_file: Path,
) -> None:
    """G15, item 6: the ceiling denies; the refund never runs; the model reads
    the refusal as the tool's error message; the ledger is the native loop's."""
    store = MemoryEventStore()
    agent = _agent(store, sc.REFUND_20000)
    out = await agent.ainvoke(_start(sc.REFUND_20000), _cfg(sc.REFUND_20000))
    assert "__interrupt__" not in out
    assert [] == sc.runs(runs_file)
    assert [("refund", "error", sc.REFUSAL)] == _tool_texts(out["messages"])
    assert sc.FINAL[sc.REFUND_20000] == out["messages"][-1].content
    expected = await sc.expected_rows(sc.REFUND_20000)
    assert expected == await sc.session_rows(store, out[SESSION_KEY])
    assert await sc.expected_types(sc.REFUND_20000) == await _types(store, out)


def _cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helmlog.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.redis
@pytest.mark.slow
async def test_refund_800_approved_from_a_second_process_is_read_back_on_resume(
    redis_url: str, runs_file: Path, approver_env: dict[str, str]
) -> None:
    """Items 1, 5, 6: on Redis, ``helmlog asks`` lists the LangChain run's ask;
    ``helmlog approve`` (another process) runs the refund; the run resumed with
    ``Command(resume=RECORDED)`` reads that result (the refund ran once); the
    rows are the native loop's; ``verify`` says intact; ``replay`` emits it;
    ``whatif`` under the same table flips nothing."""
    store = open_event_store(redis_url)
    try:
        agent = _agent(store, sc.REFUND_800)
        cfg = _cfg(sc.REFUND_800)
        out = await agent.ainvoke(_start(sc.REFUND_800), cfg)
        sid = out["__interrupt__"][0].value["session_id"]
        asks = _cli("asks", "--store", redis_url, "--json")
        assert 0 == asks.returncode, asks.stderr
        assert [(sid, "ask", "refund", "c2", "four-eyes", "Refund over $500?")] == [
            (
                a["session_id"],
                a["kind"],
                a["tool_name"],
                a["tool_call_id"],
                a["middleware"],
                a["question"],
            )
            for a in json.loads(asks.stdout)
        ]
        approved = _cli(
            "approve",
            sid,
            "--store",
            redis_url,
            "--agent",
            APPROVER_AGENT,
            env=approver_env,
        )
        assert 0 == approved.returncode, approved.stderr
        assert ["lookup_order", "refund"] == sc.runs(runs_file)
        out = await agent.ainvoke(Command(resume=RECORDED), cfg)
        assert sc.FINAL[sc.REFUND_800] == out["messages"][-1].content
        assert ["lookup_order", "refund"] == sc.runs(runs_file)  # exactly once
        assert ("refund", "success", sc.TOOL_RESULTS["refund"]) == _tool_texts(
            out["messages"]
        )[1]
        expected = await sc.expected_rows(sc.REFUND_800)
        assert expected == await sc.session_rows(store, sid)
        assert await sc.expected_types(sc.REFUND_800) == await _types(store, out)
    finally:
        await store.close()
    assert [] == json.loads(_cli("asks", "--store", redis_url, "--json").stdout)
    verified = _cli("verify", sid, "--store", redis_url)
    assert 0 == verified.returncode, verified.stdout + verified.stderr
    assert "intact" in verified.stdout
    replayed = _cli("replay", sid, "--store", redis_url, "--json")
    assert 0 == replayed.returncode, replayed.stderr
    assert sc.FINAL[sc.REFUND_800] in replayed.stdout
    # Re-judged under the same table, nothing flips (exit 0).
    judged = _cli(
        "whatif", sid, "--store", redis_url, "--agent", NATIVE_AGENT, env=approver_env
    )
    assert 0 == judged.returncode, judged.stdout + judged.stderr
