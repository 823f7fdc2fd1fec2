"""The facts contract: what an append publishes to the facts streams (R4).

Pattern: a contract suite (eventsourcing-style): module-level tests taking a
         ``store`` fixture, run against any adapter of the ``EventStore``
         port (``helmlog.events.testing``'s header says how).
Role:    events layer, shipped tests; this repository runs them on memory,
         Redis and Redis Cluster (``tests/contracts/test_store_contract.py``).
Emits:   nothing.

Laws: R4 (each decision fact, and nothing else, reaches the facts streams,
with its row's session and seq; the stream holds the row once and its fact
is a projection; a legacy row and its stored fact publish one fact), G49
(a published fact carries no value).

Why every read of the facts waits with a deadline (``support.eventually``):
a remote adapter publishes facts after the append's round trip (R4), so a
read right after ``append`` may legitimately see fewer. The outbox and the
consumer groups have their own suites (``facts_outbox``, ``facts_groups``).
"""

from __future__ import annotations

import msgspec

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    FactRecord,
    MiddlewareDecisionEvent,
    decode_event,
    fact_for,
)

from .support import SECRET, decision, eventually, filed, new_session, turn

__all__ = [
    "test_r4_a_legacy_row_and_its_stored_fact_publish_one_fact",
    "test_r4_a_row_is_stored_once_and_published_as_its_fact",
    "test_r4_facts_are_published_with_session_and_seq",
]


async def test_r4_facts_are_published_with_session_and_seq(store: EventStore) -> None:
    """R4: each decision fact, and nothing else, reaches the facts stream."""
    a, b = new_session(), new_session()
    seq_a = await store.append(a, turn(1), 0)
    seq_a = await store.append(a, decision(1), seq_a)
    seq_b = await store.append(b, decision(2) + decision(3), 0)
    facts: list[FactRecord] = await eventually(store.read_facts, lambda f: len(f) >= 3)
    # Facts keep each session's order; sessions on other shards interleave.
    got = [(f.session_id, f.seq) for f in facts]
    assert [(a, 7), (b, 2), (b, 4)] == sorted(got)
    assert [(b, 2), (b, 4)] == [f for f in got if f[0] == b]
    stored = {(a, r.seq): r.decode() for r in await store.read(a)}
    stored |= {(b, r.seq): r.decode() for r in await store.read(b)}
    for fact in facts:
        assert stored[(fact.session_id, fact.seq)] == decode_event(fact.data)
        event = msgspec.json.decode(fact.data)
        assert event["type"] == "middleware.decision"
        assert not {"before", "after", "row"} & set(event)
    assert len({f.id for f in facts}) == 3

    assert await store.read_facts(after_id=facts[-1].id) == []
    await store.append(b, decision(4), seq_b)
    later = await eventually(
        lambda: store.read_facts(after_id=facts[-1].id), lambda f: len(f) >= 1
    )
    assert [(b, 6)] == [(f.session_id, f.seq) for f in later]
    assert isinstance(
        msgspec.json.decode(later[0].data, type=MiddlewareDecisionEvent), Event
    )


async def test_r4_a_row_is_stored_once_and_published_as_its_fact(
    store: EventStore,
) -> None:
    """R4: the stream holds the row only; the facts stream gets one fact per row,
    its projection, with the row's session and seq, and no value."""
    sid = new_session()
    seq = await store.append(sid, turn(1) + filed(1) + filed(2), 0)
    assert seq == 7
    records = await store.read(sid)
    types = [r.decode().type for r in records]
    assert "middleware.decision" not in types
    assert types[5:] == ["decision.filed", "decision.filed"]
    facts: list[FactRecord] = await eventually(
        store.read_facts, lambda f: len([x for x in f if x.session_id == sid]) >= 2
    )
    mine = [f for f in facts if f.session_id == sid]
    assert [(sid, 6), (sid, 7)] == [(f.session_id, f.seq) for f in mine]
    for fact, record in zip(mine, records[5:], strict=True):
        event = msgspec.json.decode(fact.data, type=MiddlewareDecisionEvent)
        filed_row = record.decode()
        assert isinstance(filed_row, DecisionFiled)
        assert (sid, fact.seq, filed_row.timestamp, filed_row.prev_hash) == (
            event.session_id,
            event.seq,
            event.timestamp,
            event.prev_hash,
        )
        assert (
            msgspec.structs.replace(
                fact_for(filed_row.row),
                session_id=sid,
                seq=fact.seq,
                timestamp=event.timestamp,
                prev_hash=event.prev_hash,
            )
            == event
        )
        assert SECRET.encode() not in fact.data
        assert not {"before", "after", "row"} & set(msgspec.json.decode(fact.data))


async def test_r4_a_legacy_row_and_its_stored_fact_publish_one_fact(
    store: EventStore,
) -> None:
    """R4: a batch holding a row and its stored fact (an older writer's)
    publishes that fact as stored, never a second one for the row."""
    sid = new_session()
    await store.append(sid, decision(1) + filed(2), 0)
    facts = await eventually(
        store.read_facts, lambda f: len([x for x in f if x.session_id == sid]) >= 2
    )
    mine = [f for f in facts if f.session_id == sid]
    assert [(sid, 2), (sid, 3)] == [(f.session_id, f.seq) for f in mine]
    records = await store.read(sid)
    assert records[1].decode() == decode_event(mine[0].data)
    assert sid == decode_event(mine[0].data).session_id
