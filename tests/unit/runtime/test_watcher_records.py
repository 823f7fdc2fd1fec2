"""Record takers: only a ``RecordTaker`` is handed appends as stored (G95, G84, R4).

An instance of ``helmlog.events.lowlevel.RecordTaker`` (``OtelProcess``) is
handed every append's ``StoredEvent``s, once, in seq order, instead of one
``on_event`` call per appended event; the others are handed events as
before. Any other watcher hears facts and the documented events, whatever
attributes it has: an ``on_records`` of its own is never called (G95). A
journal that serves a redacted form hands that form to everyone, takers
included, through ``on_event``: the stored bytes may keep values the served
form hides (G86, G87).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, allow, conversation_redaction, tool
from helmlog.events import DecisionFiled, StoredEvent, fact_of
from helmlog.events.lowlevel import RecordTaker
from helmlog.runtime import AgentBuildError
from helmlog.runtime.providers import scripted

from .helpers import call, calls


@tool
def refund(order: int, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount}"


class Taker(RecordTaker):
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


class DuckTaker:
    """A user's watcher that happens to answer ``on_records``: not a taker."""

    def __init__(self) -> None:
        self.appends: list[list[StoredEvent]] = []
        self.events: list[Any] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    def on_records(self, records: list[StoredEvent]) -> None:
        self.appends.append(list(records))


def _rewriting_agent(*watchers: Any) -> Agent:
    """One refund whose amount a rule rewrites: its row holds before/after."""
    model = scripted([calls(call("c1", "refund", order=1, amount=5)), "done"])
    cap = ToolMiddleware(
        name="cap",
        on_tool_call=lambda c: allow({**c.args, "amount": 3}, "capped at 3"),
    )
    builder = Agent.create(provider=model, model="m").tool(refund)
    return builder.tool_middleware(cap).watch(*watchers).build()


def _values_in(event: Any) -> list[str]:
    """The value-bearing row fields an event carries (none for a fact)."""
    fields = getattr(event, "__struct_fields__", ())
    return [f for f in ("row", "before", "after") if f in fields]


async def test_g95_a_duck_typed_on_records_watcher_hears_facts_never_values() -> None:
    """G95: a watcher with an ``on_records`` of its own is not a record taker:
    it is handed every event through ``on_event``, rows as facts, and no
    ``before``/``after`` value anywhere; its ``on_records`` is never called."""
    duck = DuckTaker()
    agent = _rewriting_agent(duck)
    assert "done" == await agent.run("refund")
    stored = await _stored(agent)
    assert [] == duck.appends
    assert [r.seq for r in stored] == [e.seq for e in duck.events]
    assert [] == [e for e in duck.events if isinstance(e, DecisionFiled)]
    assert [] == [(e.type, _values_in(e)) for e in duck.events if _values_in(e)]
    rows = [e for e in (r.decode() for r in stored) if isinstance(e, DecisionFiled)]
    assert [row.row.after for row in rows] == [{"order": 1, "amount": 3}]
    facts = [e for e in duck.events if e.type == "middleware.decision"]
    assert [fact_of(row) for row in rows] == facts
    assert [("cap", "allow", True, "capped at 3")] == [
        (f.middleware, f.outcome, f.changed, f.why) for f in facts
    ]


async def test_g95_attach_and_on_never_switch_a_watcher_to_records() -> None:
    """G95: ``attach()`` of a duck-typed taker, and ``on("*", ...)`` of its
    bound ``on_event``, both deliver events and facts, never records; an
    async ``on_records`` of such a watcher is not refused, just ignored."""

    class AsyncDuck(DuckTaker):
        async def on_records(self, records: list[StoredEvent]) -> None:  # type: ignore[override]
            raise AssertionError("never called")

    duck, listened = AsyncDuck(), DuckTaker()
    agent = _rewriting_agent()
    agent.attach(duck)
    agent.on("*", listened.on_event)
    assert "done" == await agent.run("refund")
    assert [] == duck.appends
    assert [r.seq for r in await _stored(agent)] == [e.seq for e in duck.events]
    assert duck.events == listened.events
    assert ["middleware.decision"] == [
        e.type for e in duck.events if e.type.startswith("middleware")
    ]


async def test_g95_the_explicit_taker_still_takes_records() -> None:
    """G95: a ``RecordTaker`` subclass is handed the stored records (rows and
    all) beside a duck-typed watcher, which is handed facts."""
    taker, duck = Taker(), DuckTaker()
    agent = _rewriting_agent(taker, duck)
    assert "done" == await agent.run("refund")
    stored = await _stored(agent)
    assert [r.seq for r in stored] == [r.seq for r in taker.records]
    assert [] == duck.appends
    assert [r.seq for r in stored] == [e.seq for e in duck.events]


def test_g95_the_face_does_not_hand_out_record_taking() -> None:
    """G95: ``RecordTaker`` is internal: neither the face nor the sinks'
    public names nor ``helmlog.runtime`` export it."""
    import helmlog.events.lowlevel
    import helmlog.runtime
    import helmlog.sinks

    for module in (helmlog, helmlog.runtime, helmlog.sinks):
        assert "RecordTaker" not in module.__all__
        assert not hasattr(module, "RecordTaker")
    assert "RecordTaker" in helmlog.events.lowlevel.__all__


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
