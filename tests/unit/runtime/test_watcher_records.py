"""Record takers: a watcher with ``on_records`` is handed appends as stored (G84, R4).

A watcher that declares ``on_records(records)`` (``OtelProcess``) is handed
every append's ``StoredEvent``s, once, in seq order, instead of one
``on_event`` call per appended event; the others are handed events as
before. A journal that serves a redacted form hands that form to everyone,
takers included, through ``on_event``: the stored bytes may keep values the
served form hides (G86, G87).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, allow, conversation_redaction, tool
from helmlog.events import AgentBuildError, DecisionFiled, StoredEvent, fact_of
from helmlog.runtime.providers import scripted

from .helpers import call, calls


@tool
def refund(order: int, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount}"


class Taker:
    """Keeps the records and the events it is handed."""

    readonly = True

    def __init__(self, *, raise_on_records: bool = False) -> None:
        self.appends: list[list[StoredEvent]] = []
        self.events: list[Any] = []
        self.raise_on_records = raise_on_records

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    def on_records(self, records: list[StoredEvent]) -> None:
        self.appends.append(list(records))
        if self.raise_on_records:
            raise RuntimeError("a taker that fails")

    @property
    def records(self) -> list[StoredEvent]:
        return [r for append in self.appends for r in append]


class Keep:
    readonly = True

    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)


def _agent(*watchers: Any, turns: int = 1, **options: Any) -> Agent:
    model = scripted([calls(call("c1", "refund", order=1, amount=5)), "done"] * turns)
    gate = ToolMiddleware(name="gate", on_tool_call=lambda _call: allow())
    builder = Agent.create(provider=model, model="m", **options).tool(refund)
    return builder.tool_middleware(gate).watch(*watchers).build()


async def _stored(agent: Agent) -> list[StoredEvent]:
    assert agent.session_id is not None
    return await agent.store.read(agent.session_id)


async def test_g84_a_record_taker_is_handed_every_append_as_stored_once() -> None:
    """G84: the taker's records are the stream, byte for byte, in seq order,
    one call per append; no appended event reaches its ``on_event``."""
    taker = Taker()
    agent = _agent(taker)
    assert "done" == await agent.run("refund")
    stored = await _stored(agent)
    assert [(r.seq, r.data, r.hash) for r in stored] == [
        (r.seq, r.data, r.hash) for r in taker.records
    ]
    assert [r.type for r in stored] == [r.type for r in taker.records]
    assert {agent.session_id} == {r.session_id for r in taker.records}
    assert 1 < len(taker.appends) < len(stored)
    assert [] == [e for e in taker.events if e.seq is not None]


async def test_r4_beside_a_taker_the_others_are_handed_events_and_facts() -> None:
    """R4: a plain watcher beside a taker still gets every event, rows as facts,
    and what the taker holds projects to the same facts."""
    taker, keep = Taker(), Keep()
    agent = _agent(taker, keep)
    assert "done" == await agent.run("refund")
    assert [r.seq for r in await _stored(agent)] == [e.seq for e in keep.events]
    facts = [e for e in keep.events if e.type == "middleware.decision"]
    assert facts
    projected = [
        fact_of(event)
        for event in (r.decode() for r in taker.records)
        if isinstance(event, DecisionFiled)
    ]
    assert facts == projected


async def test_g86_with_a_served_form_a_taker_is_handed_the_served_events() -> None:
    """G86: a redacting agent hands takers its served events, never the stored
    records, whose bytes may keep values the served form hides."""
    taker, keep = Taker(), Keep()
    agent = _agent(taker, keep, redact=conversation_redaction())
    assert "done" == await agent.run("refund")
    assert [] == taker.appends
    assert [e.seq for e in keep.events] == [e.seq for e in taker.events]
    assert keep.events == taker.events


async def test_g84_a_raising_taker_changes_nothing_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """G84: a taker that raises on every append is logged; the run, the stream
    and the other watchers are as without it."""
    failing, keep = Taker(raise_on_records=True), Keep()
    agent = _agent(failing, keep)
    with caplog.at_level(logging.ERROR, logger="helmlog"):
        assert "done" == await agent.run("refund")
    stored = await _stored(agent)
    assert [r.seq for r in stored] == [r.seq for r in failing.records]
    assert [r.seq for r in stored] == [e.seq for e in keep.events]
    assert any("failed on records" in r.getMessage() for r in caplog.records)


async def test_g82_an_async_on_records_is_refused_when_attached() -> None:
    """G82: ``on_records`` is called inline by the run, so it must be plain."""

    class AsyncTaker(Taker):
        async def on_records(self, records: list[StoredEvent]) -> None:  # type: ignore[override]
            return None

    with pytest.raises(AgentBuildError, match="on_records must be a plain method"):
        _agent(AsyncTaker())


async def test_g82_an_unsubscribed_taker_is_handed_nothing_more() -> None:
    """G82: after its unsubscribe, a taker gets no records; a later run still
    delivers to the rest."""
    taker, keep = Taker(), Keep()
    agent = _agent(keep, turns=2)
    stop = agent.attach(taker)
    assert "done" == await agent.run("refund")
    seen = len(taker.appends)
    assert seen > 0
    stop()
    before = len(keep.events)
    assert "done" == await agent.run("refund")
    assert seen == len(taker.appends)
    assert len(keep.events) > before
