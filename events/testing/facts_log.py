"""The facts log's contract: publication, the outbox, consumer groups (R4).

Pattern: a contract suite for the ``FactsLog`` port: module-level tests
         taking a ``store``/``make_store`` fixture, run against any adapter
         (``helmlog.events.testing``'s header says how).
Role:    events layer, shipped tests; run on memory, Redis and Redis Cluster.

Laws: R4 (each decision fact, and nothing else, reaches the facts streams with
its row's session and seq; ``publish_facts`` is an outbox behind a per-session
cursor, twice is once; a consumer group gives each fact to one consumer,
keeps it pending until acked, and lets an idle one be claimed), G49 (a
published fact carries no value). Reads wait with a deadline
(``support.eventually``): a remote store publishes after the append's round
trip, so a read right after ``append`` may legitimately see fewer.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import msgspec
import pytest

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    FactDelivery,
    FactRecord,
    MiddlewareDecision,
    MiddlewareDecisionEvent,
    StoredEvent,
    StoreError,
    TurnEnded,
    TurnStarted,
    decode_event,
)
from helmlog.events.lowlevel import fact_for

from .._facts import fact_records
from .support import (
    SECRET,
    StoreFactory,
    decision,
    eventually,
    filed,
    new_session,
    turn,
)

__all__ = [
    "test_r4_a_blocking_group_read_wakes_on_a_new_fact",
    "test_r4_a_delivered_fact_stays_pending_until_acked",
    "test_r4_a_legacy_row_and_its_stored_fact_publish_one_fact",
    "test_r4_a_new_group_from_the_end_skips_older_facts",
    "test_r4_a_row_is_stored_once_and_published_as_its_fact",
    "test_r4_an_idle_consumers_facts_can_be_claimed",
    "test_r4_claim_takes_at_most_count_per_shard",
    "test_r4_facts_are_published_with_session_and_seq",
    "test_r4_group_gives_each_fact_to_one_consumer",
    "test_r4_publish_facts_after_every_fact_is_out_publishes_nothing",
    "test_r4_publish_facts_of_an_unknown_session_publishes_nothing",
    "test_r4_reading_a_missing_group_is_a_store_error",
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


_ids = itertools.count(1)


def new_name(kind: str) -> str:
    """A session or group name no other test uses."""
    return f"{kind}-g{next(_ids)}"


def legacy_decision(n: int) -> list[Event]:
    """A decision row and its stored fact, as walkers filed them before facts
    were projections (R4: still one fact per row)."""
    row = MiddlewareDecision(
        middleware="guard",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=False,
        tool_name="search",
        tool_call_id=f"call-{n}",
    )
    return [DecisionFiled(row=row), fact_for(row)]


async def publish(store: EventStore, per_session: int, sessions: int) -> set[Any]:
    """Append ``per_session`` decisions to each of ``sessions`` new sessions;
    wait until every fact is on the facts streams; return their keys."""
    expected: set[tuple[str, int]] = set()
    for _ in range(sessions):
        sid = new_name("s")
        seq = 0
        for n in range(per_session):
            seq = await store.append(sid, legacy_decision(n), seq)
            expected.add((sid, seq))
    await eventually(
        store.read_facts,
        lambda facts: expected <= {(f.session_id, f.seq) for f in facts},
    )
    return expected


def keys(deliveries: list[FactDelivery]) -> list[tuple[str, int]]:
    return [(d.fact.session_id, d.fact.seq) for d in deliveries]


async def read_all(
    store: EventStore, group: str, consumer: str, *, count: int = 100
) -> list[FactDelivery]:
    """Every new fact the group hands ``consumer``, until it hands none."""
    out: list[FactDelivery] = []
    while batch := await store.read_facts_group(group, consumer, count=count):
        out.extend(batch)
    return out


async def test_r4_group_gives_each_fact_to_one_consumer(store: EventStore) -> None:
    """R4: two consumers of one group split the facts: each to one, all to both."""
    expected = await publish(store, per_session=3, sessions=4)
    group = new_name("group")
    await store.create_facts_group(group)
    a: list[FactDelivery] = []
    b: list[FactDelivery] = []
    while True:
        got_a = await store.read_facts_group(group, "a", count=2)
        got_b = await store.read_facts_group(group, "b", count=2)
        a.extend(got_a)
        b.extend(got_b)
        if not (got_a or got_b):
            break
    assert expected == set(keys(a)) | set(keys(b))
    assert set() == set(keys(a)) & set(keys(b))
    assert len(expected) == len(a) + len(b)
    assert a != []
    assert b != []
    stored = {
        (sid, r.seq): r.decode()
        for sid in {k[0] for k in expected}
        for r in await store.read(sid)
    }
    for d in a + b:
        assert stored[(d.fact.session_id, d.fact.seq)] == decode_event(d.fact.data)


async def test_r4_a_delivered_fact_stays_pending_until_acked(
    store: EventStore,
) -> None:
    """R4: a consumer's unacknowledged facts come back to it; acked ones never."""
    expected = await publish(store, per_session=2, sessions=2)
    group = new_name("group")
    await store.create_facts_group(group)
    first = await read_all(store, group, "a")
    assert expected == set(keys(first))
    pending = await store.read_facts_group(group, "a", pending=True)
    assert sorted(keys(first)) == sorted(keys(pending))
    assert await store.read_facts_group(group, "b", pending=True) == []

    assert await store.ack_facts(group, first[:1]) == 1
    assert await store.ack_facts(group, first[:1]) == 0
    left = await store.read_facts_group(group, "a", pending=True)
    assert sorted(keys(first[1:])) == sorted(keys(left))
    assert len(first) - 1 == await store.ack_facts(group, left)
    assert await store.read_facts_group(group, "a", pending=True) == []
    assert await store.read_facts_group(group, "a") == []


async def test_r4_an_idle_consumers_facts_can_be_claimed(store: EventStore) -> None:
    """R4: facts pending on a dead consumer are claimed by one idle long enough."""
    expected = await publish(store, per_session=2, sessions=3)
    group = new_name("group")
    await store.create_facts_group(group)
    dead = await read_all(store, group, "dead")
    assert expected == set(keys(dead))
    assert await store.claim_facts(group, "alive", min_idle_ms=3_600_000) == []

    claimed = await store.claim_facts(group, "alive", min_idle_ms=0)
    assert sorted(keys(dead)) == sorted(keys(claimed))
    assert await store.read_facts_group(group, "dead", pending=True) == []
    mine = await store.read_facts_group(group, "alive", pending=True)
    assert sorted(keys(dead)) == sorted(keys(mine))
    assert len(dead) == await store.ack_facts(group, claimed)
    assert await store.claim_facts(group, "alive", min_idle_ms=0) == []


async def test_r4_claim_takes_at_most_count_per_shard(store: EventStore) -> None:
    """R4: a claim takes at most ``count`` facts of a shard; the rest stay claimable."""
    expected = await publish(store, per_session=3, sessions=2)
    group = new_name("group")
    await store.create_facts_group(group)
    await read_all(store, group, "dead")
    some = await store.claim_facts(group, "alive", min_idle_ms=0, count=1)
    shards = [d.shard for d in some]
    assert sorted(set(shards)) == sorted(shards)
    assert len(expected) > len(some)
    rest = await store.claim_facts(group, "other", min_idle_ms=0, count=100)
    # Idle for 0 ms covers what "alive" just claimed: "other" takes all.
    assert expected == set(keys(rest))
    assert await store.read_facts_group(group, "alive", pending=True) == []


async def test_r4_a_new_group_from_the_end_skips_older_facts(
    store: EventStore,
) -> None:
    """R4: ``from_start=False`` starts a group after the newest fact."""
    await publish(store, per_session=2, sessions=1)
    group = new_name("group")
    await store.create_facts_group(group, from_start=False)
    await store.create_facts_group(group)  # exists: its position is kept
    assert await store.read_facts_group(group, "c") == []
    later = await publish(store, per_session=1, sessions=1)
    assert later == set(keys(await read_all(store, group, "c")))


async def test_r4_a_blocking_group_read_wakes_on_a_new_fact(
    make_store: StoreFactory,
) -> None:
    """R4: ``read_facts_group(block_ms=...)`` returns once a fact arrives."""
    store = make_store()
    group = new_name("group")
    await store.create_facts_group(group)
    await read_all(store, group, "c")
    waiting = asyncio.ensure_future(store.read_facts_group(group, "c", block_ms=5_000))
    sid = new_name("s")
    await store.append(sid, legacy_decision(1), 0)
    got = await asyncio.wait_for(waiting, timeout=10)
    assert [(sid, 2)] == keys(got)


async def test_r4_reading_a_missing_group_is_a_store_error(store: EventStore) -> None:
    """R4/R5: a group never created is a typed ``StoreError``, never a driver error."""
    await publish(store, per_session=1, sessions=1)
    with pytest.raises(StoreError, match="no consumer group"):
        await store.read_facts_group(new_name("missing"), "c")


def fact_seqs(session_id: str, records: list[StoredEvent]) -> list[int]:
    """The seqs of the facts ``records`` project (what the facts streams owe)."""
    return [seq for seq, _data in fact_records(session_id, records)]


async def published(store: EventStore, session_id: str) -> list[int]:
    """The seqs of every fact of ``session_id`` on the facts streams, repeats kept."""
    return sorted(f.seq for f in await store.read_facts() if f.session_id == session_id)


async def a_governed_session(store: EventStore, session_id: str) -> int:
    """Three batches with decisions, the turn closed; return the last seq."""
    seq = await store.append(session_id, [TurnStarted(turn=1), *decision(1)], 0)
    seq = await store.append(session_id, decision(2) + decision(3), seq)
    return await store.append(
        session_id, [*decision(4), TurnEnded(turn=1, final_content="ok")], seq
    )


async def test_r4_publish_facts_after_every_fact_is_out_publishes_nothing(
    make_store: StoreFactory,
) -> None:
    """R4: with every fact published, publish_facts publishes none again."""
    writer = make_store()
    sid = new_session()
    await a_governed_session(writer, sid)
    expected = fact_seqs(sid, await writer.read(sid))
    await eventually(lambda: published(writer, sid), lambda got: got == expected)
    # Another process on the same store (memory lives in this one process).
    other = writer
    if writer.url != "memory://":
        await writer.close()
        other = make_store()
    assert await other.publish_facts(sid) == 0
    assert await other.publish_facts(sid) == 0
    assert expected == await published(other, sid)


async def test_r4_publish_facts_of_an_unknown_session_publishes_nothing(
    store: EventStore,
) -> None:
    """R4: a session the store lacks has no facts to publish."""
    assert await store.publish_facts(new_session()) == 0
