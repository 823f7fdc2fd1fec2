"""R4 — a decision is stored once; its fact is a projection, delivered.

Pattern: law-named unit tests on the governed one-tool turn of
         ``bench/turns.py`` (three pass-throughs at before-tool, one transform
         at after-tool) on a memory store, looking at the stream, the
         listeners, a live JSONL sink and the store's facts list.
Role:    unit tests for the journal's filing and delivery (issue 8 item 1).
Emits:   nothing.

Laws: R4 (the stream stores each row once, as ``decision.filed``; listeners,
sinks and the facts stream get one fact per row, with the row's seq, and no
value), G49, R12 (every record the journal makes carries its type and its
session id; only seq 1 stores the session id).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    DecisionFiled,
    MemoryEventStore,
    MiddlewareDecisionEvent,
    StoredEvent,
    decode_event,
    fact_of,
)
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted
from helmlog.sinks import JsonlSink

SECRET = "card 4111-1111-1111-1111"


@tool
def lookup(order: int) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "status": 1, "note": SECRET}


def respond(request: ProviderRequest) -> Reply:
    """One tool call for a fresh user message, then the answer."""
    if request.messages[-1].role == "user":
        return Reply(
            tool_calls=[ToolCallRequest(id="c0", name="lookup", args={"order": 7})]
        )
    return Reply(content="Done.")


def governed(store: MemoryEventStore, *watchers: Any) -> Agent:
    """The governed one-tool turn: 3 ``allow()`` before, 1 transform after."""
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda res: allow({**res.result, "checked": True}, "stamped"),
    )
    builder = (
        Agent.create(provider=scripted(respond=respond), model="m", store=store)
        .tool(lookup)
        .tool_middleware(*passes, stamp)
    )
    if watchers:
        builder = builder.watch(*watchers)
    return builder.build()


async def run_turn(*watchers: Any) -> tuple[Agent, MemoryEventStore, list[StoredEvent]]:
    store = MemoryEventStore()
    agent = governed(store, *watchers)
    assert "Done." == await agent.run("Look order 7 up.")
    sid = agent.session_id
    assert sid is not None
    return agent, store, await store.read(sid)


def rows_of(records: list[StoredEvent]) -> list[DecisionFiled]:
    return [e for e in (r.decode() for r in records) if isinstance(e, DecisionFiled)]


async def test_r4_the_stream_of_a_governed_turn_holds_no_middleware_decision() -> None:
    """R4: the turn stores its four rows once each, and no stored fact."""
    _agent, _store, records = await run_turn()
    types = [r.decode().type for r in records]
    assert 17 == len(records)
    assert 0 == types.count("middleware.decision")
    assert 4 == types.count("decision.filed")


async def test_r4_listeners_get_one_fact_per_row_with_its_seq_and_no_value() -> None:
    """R4/G49: each row is heard once, as ``fact_of`` it, at the row's seq."""
    store = MemoryEventStore()
    agent = governed(store)
    heard: list[Any] = []
    agent.on("middleware.decision", heard.append)
    filings: list[Any] = []
    agent.on("decision.filed", filings.append)
    await agent.run("Look order 7 up.")
    rows = rows_of(await store.read(agent.session_id or ""))
    assert [] == filings
    assert [fact_of(r) for r in rows] == heard
    assert [r.seq for r in rows] == [f.seq for f in heard]
    assert {MiddlewareDecisionEvent} == {type(f) for f in heard}
    assert [] == [f for f in heard if SECRET in msgspec.json.encode(f).decode()]
    assert SECRET in json.dumps(msgspec.to_builtins(rows[-1].row.before))


async def test_r4_a_live_jsonl_sink_writes_one_fact_per_row_with_its_seq(
    tmp_path: Path,
) -> None:
    """R4/R16: a sink attached live writes each row as its fact, never the row."""
    path = tmp_path / "live.jsonl"
    _agent, _store, records = await run_turn(JsonlSink(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    facts = [line for line in lines if line["type"] == "middleware.decision"]
    assert [r.seq for r in rows_of(records)] == [f["seq"] for f in facts]
    assert "decision.filed" not in {line["type"] for line in lines}
    assert [] == [f for f in facts if SECRET in json.dumps(f)]
    assert all(line["replayed"] is False for line in lines)


async def test_r4_the_memory_facts_list_holds_each_rows_projection() -> None:
    """R4: the store's facts list gets one fact per row, at the row's seq."""
    agent, store, records = await run_turn()
    facts = await store.read_facts()
    rows = rows_of(records)
    assert [(agent.session_id, r.seq) for r in rows] == [
        (f.session_id, f.seq) for f in facts
    ]
    assert [fact_of(r) for r in rows] == [decode_event(f.data) for f in facts]
    assert [] == [f for f in facts if SECRET.encode() in f.data]


async def test_r12_journal_records_carry_their_type_and_session() -> None:
    """R12: the journal's records know their type and session; only seq 1
    stores the session id, and decoding stamps it back."""
    agent, _store, records = await run_turn()
    sid = agent.session_id
    assert [r.decode().type for r in records] == [r.type for r in records]
    assert [sid] * 17 == [r.session_id for r in records]
    assert [sid] * 17 == [r.decode().session_id for r in records]
    assert [True] + [False] * 16 == [
        "session_id" in msgspec.json.decode(r.data) for r in records
    ]
