"""The shared scenario through Pydantic AI: the native loop's rows, row for row.

Pattern: ``scenario.py``'s two conversations played by Pydantic AI's own
         ``FunctionModel`` (the scripted replies, their fixed tool call ids)
         inside a real ``pydantic_ai.Agent`` governed by
         ``HelmlogCapability`` with the scenario's act-table; each session's
         ledger is compared whole with ``expected_rows()``, the native loop's.
Role:    issue 27 items 3, 5 and 6 for Pydantic AI: the ask approved through
         Pydantic AI's own ``DeferredToolResults``, and from a second process
         (``helmlog approve|decline`` on a real Redis, the approvals page of
         ``helmlog serve``) then read back on resume.

Laws: G15, G21, G33, G39, G59–G64, R9, R18 (asks listed from the index),
R3 (verify), R14 (replay).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import Tool as PydanticTool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from helmlog import Tool
from helmlog._asks import load_factory
from helmlog.events import EventStore, MemoryEventStore, open_event_store
from helmlog.integrations import Governance
from helmlog.integrations.pydantic_ai import (
    HelmlogCapability,
    deferred_results,
    recorded_results,
)
from helmlog.runtime.providers import framework_model
from tests.e2e.http.server import APPROVER_TOKEN, bearer, running

from . import scenario as sc

APPROVER_AGENT = "tests.integration.integrations.scenario:governance"


def _model(name: str) -> FunctionModel:
    """The scenario's replies for conversation ``name``, as Pydantic AI's
    ``FunctionModel`` answers them (in order, across the runs of one agent)."""
    replies = list(sc.SCRIPTS[name])

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = replies.pop(0)
        parts: list[ModelResponsePart] = []
        if reply.content:
            parts.append(TextPart(reply.content))
        parts.extend(
            ToolCallPart(c.name, dict(c.args), tool_call_id=c.id)
            for c in reply.tool_calls
        )
        return ModelResponse(parts=parts)

    return FunctionModel(respond)


def _tools() -> list[PydanticTool[Any]]:
    """The scenario's two functions as Pydantic AI tools."""
    return [PydanticTool(sc.lookup_order), PydanticTool(sc.refund)]


def _governed(
    store: EventStore, name: str
) -> tuple[PydanticAgent[None, Any], Governance]:
    tools = _tools()
    governance = Governance(
        sc.build_agent(
            store,
            framework_model("pydantic-ai"),
            tools=[Tool.from_pydantic_ai(t) for t in tools],
        )
    )
    agent: PydanticAgent[None, Any] = PydanticAgent(
        _model(name),
        tools=tools,
        output_type=[str, DeferredToolRequests],
        capabilities=[HelmlogCapability(governance)],
    )
    return agent, governance


def _tool_texts(messages: list[ModelMessage]) -> list[tuple[str, str, Any]]:
    return [
        (p.tool_name, p.outcome, p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


def _user_texts(messages: list[ModelMessage]) -> list[Any]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]


async def test_refund_800_approved_through_deferred_results_files_the_native_rows(
    runs_file: Path,
) -> None:
    """Items 3, 6: the ask ends the run with DeferredToolRequests; the next run's
    DeferredToolResults (signed by the approver) runs the real refund once;
    the ledger equals the native loop's, whole."""
    store = MemoryEventStore()
    agent, _ = _governed(store, sc.REFUND_800)
    sid = f"pa-{sc.REFUND_800}"

    first = await agent.run(sc.MESSAGES[sc.REFUND_800], conversation_id=sid)

    asked = first.output
    assert isinstance(asked, DeferredToolRequests)
    assert [("refund", "c2")] == [
        (c.tool_name, c.tool_call_id) for c in asked.approvals
    ]
    meta = asked.metadata["c2"]["helmlog"]
    assert (sid, "four-eyes", "Refund over $500?") == (
        meta["session_id"],
        meta["middleware"],
        meta["question"],
    )
    assert ["lookup_order"] == sc.runs(runs_file)

    done = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=deferred_results(asked, by=sc.APPROVER),
    )

    assert sc.FINAL[sc.REFUND_800] == done.output
    assert ["lookup_order", "refund"] == sc.runs(runs_file)
    assert [
        ("lookup_order", "success", sc.TOOL_RESULTS["lookup_order"]),
        ("refund", "success", sc.TOOL_RESULTS["refund"]),
    ] == _tool_texts(done.all_messages())
    # G33: the run's history keeps the admitted (scrubbed) prompt.
    assert all("123-45-6789" not in t for t in _user_texts(done.all_messages()))
    expected = await sc.expected_rows(sc.REFUND_800)
    assert expected == await sc.session_rows(store, sid)
    # Item 5: not only the rows: the same events, in the same order.
    types = [r.decode().type for r in await store.read(sid)]
    assert await sc.expected_types(sc.REFUND_800) == types


async def test_refund_20000_denied_the_model_reads_the_refusal_native_rows(
    runs_file: Path,
) -> None:
    """G15, item 6: the ceiling denies; the refund never runs; the model reads
    the refusal as the tool's (failed) message; the ledger is the native loop's."""
    store = MemoryEventStore()
    agent, _ = _governed(store, sc.REFUND_20000)
    sid = f"pa-{sc.REFUND_20000}"

    result = await agent.run(sc.MESSAGES[sc.REFUND_20000], conversation_id=sid)

    assert sc.FINAL[sc.REFUND_20000] == result.output
    assert [] == sc.runs(runs_file)
    assert [("refund", "failed", sc.REFUSAL)] == _tool_texts(result.all_messages())
    expected = await sc.expected_rows(sc.REFUND_20000)
    assert expected == await sc.session_rows(store, sid)
    types = [r.decode().type for r in await store.read(sid)]
    assert await sc.expected_types(sc.REFUND_20000) == types


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
    """Items 3, 5, 6: on Redis, ``helmlog asks`` lists the Pydantic AI run's
    ask; ``helmlog approve`` (another process) runs the refund; the run resumed
    with ``recorded_results`` reads that result (the refund ran once); the rows
    are the native loop's; ``verify`` says intact; ``replay`` emits it."""
    sid = f"pa-2p-{sc.REFUND_800}"
    store = open_event_store(redis_url)
    try:
        agent, governance = _governed(store, sc.REFUND_800)
        first = await agent.run(sc.MESSAGES[sc.REFUND_800], conversation_id=sid)
        asked = first.output
        assert isinstance(asked, DeferredToolRequests)
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

        done = await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=await recorded_results(governance, sid, asked),
        )

        assert sc.FINAL[sc.REFUND_800] == done.output
        assert ["lookup_order", "refund"] == sc.runs(runs_file)  # exactly once
        assert ("refund", "success", sc.TOOL_RESULTS["refund"]) == _tool_texts(
            done.all_messages()
        )[1]
        expected = await sc.expected_rows(sc.REFUND_800)
        assert expected == await sc.session_rows(store, sid)
    finally:
        await store.close()
    assert [] == json.loads(_cli("asks", "--store", redis_url, "--json").stdout)
    verified = _cli("verify", sid, "--store", redis_url)
    assert 0 == verified.returncode, verified.stdout + verified.stderr
    assert "intact" in verified.stdout
    replayed = _cli("replay", sid, "--store", redis_url, "--json")
    assert 0 == replayed.returncode, replayed.stderr
    assert sc.FINAL[sc.REFUND_800] in replayed.stdout
    flipped = [
        json.loads(
            _cli(
                "whatif",
                sid,
                "--store",
                redis_url,
                "--agent",
                agent,
                "--json",
                env=approver_env,
            ).stdout
        )["whatif"]["flipped"]
        for agent in (
            "tests.integration.integrations.scenario:native_agent",
            "tests.integration.integrations.scenario:stricter_agent",
        )
    ]
    assert [0, 1] == flipped  # the same table, then refunds over $500 denied


@pytest.mark.redis
@pytest.mark.slow
async def test_refund_800_declined_from_a_second_process_is_read_back_as_denied(
    redis_url: str, runs_file: Path, approver_env: dict[str, str]
) -> None:
    """Items 3, 5: ``helmlog decline`` (another process) refuses the refund;
    the run resumed with ``recorded_results`` reads helmlog's refusal as
    Pydantic AI's denied tool return; the refund never runs; the row names
    who declined."""
    sid = f"pa-2p-decline-{sc.REFUND_800}"
    store = open_event_store(redis_url)
    try:
        agent, governance = _governed(store, sc.REFUND_800)
        first = await agent.run(sc.MESSAGES[sc.REFUND_800], conversation_id=sid)
        declined = _cli(
            "decline",
            sid,
            "--note",
            "over budget",
            "--store",
            redis_url,
            "--agent",
            APPROVER_AGENT,
            env=approver_env,
        )
        assert 0 == declined.returncode, declined.stderr

        done = await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=await recorded_results(governance, sid, first.output),
        )

        assert ["lookup_order"] == sc.runs(runs_file)
        # G64: the model reads "declined by human"; the row names who declined.
        assert ("refund", "denied", "declined by human: over budget") == (
            _tool_texts(done.all_messages())[1]
        )
        rows = [
            (r.middleware, r.outcome, r.why) for r in await sc.session_rows(store, sid)
        ]
        assert ("four-eyes", "deny", "declined by dana@ops: over budget") in rows
        assert sc.FINAL[sc.REFUND_800] == done.output
    finally:
        await store.close()


@pytest.mark.redis
async def test_refund_800_approved_on_the_approvals_page_is_read_back_on_resume(
    redis_url: str, runs_file: Path
) -> None:
    """Items 3, 5, 6: ``helmlog serve --agent ...scenario:governance`` (its own
    event loop, sharing only the Redis store) lists the Pydantic AI run's ask
    on the approvals page; dana approves it over HTTP, the page's side runs
    the refund; the run resumed with ``recorded_results`` reads that result
    (the refund ran once); the rows are the native loop's."""
    sid = f"pa-page-{sc.REFUND_800}"
    store = open_event_store(redis_url)
    try:
        agent, governance = _governed(store, sc.REFUND_800)
        first = await agent.run(sc.MESSAGES[sc.REFUND_800], conversation_id=sid)
        with running(load_factory(APPROVER_AGENT), redis_url) as page:
            async with httpx2.AsyncClient(
                base_url=page.url, headers=bearer(APPROVER_TOKEN)
            ) as h:
                listed = (await h.get("/asks")).json()
                assert [(sid, "c2", "four-eyes")] == [
                    (a["session_id"], a["tool_call_id"], a["middleware"])
                    for a in listed
                ]
                decided = await h.post(f"/asks/{sid}/c2/approve", json={})
                assert 200 == decided.status_code, decided.text
        assert ["lookup_order", "refund"] == sc.runs(runs_file)

        done = await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=await recorded_results(governance, sid, first.output),
        )

        assert sc.FINAL[sc.REFUND_800] == done.output
        assert ["lookup_order", "refund"] == sc.runs(runs_file)  # exactly once
        expected = await sc.expected_rows(sc.REFUND_800)
        assert expected == await sc.session_rows(store, sid)
    finally:
        await store.close()
