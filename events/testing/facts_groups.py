"""The facts consumer-group contract: what ``FactsConsumer`` relies on.

Pattern: a contract suite over the group primitives of the ``EventStore``
         port, run against any adapter (see ``helmlog.events.testing``).
Role:    events layer, shipped tests; this repository runs them on memory,
         Redis and Redis Cluster.
Emits:   nothing.

Laws: R4 (facts read through a consumer group: each new fact goes to one
consumer of the group; a delivered fact stays pending for its consumer until
acknowledged; an idle pending fact can be claimed by another consumer).

Why each test first waits for ``read_facts`` to show every fact: a remote
store may publish facts in the round trip after their append (R4), so a group
read right after ``append`` may legitimately see fewer.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    FactDelivery,
    MiddlewareDecision,
    StoreError,
    decode_event,
    fact_for,
)

from .support import StoreFactory, eventually

__all__ = [
    "test_r4_a_blocking_group_read_wakes_on_a_new_fact",
    "test_r4_a_delivered_fact_stays_pending_until_acked",
    "test_r4_a_new_group_from_the_end_skips_older_facts",
    "test_r4_an_idle_consumers_facts_can_be_claimed",
    "test_r4_claim_takes_at_most_count_per_shard",
    "test_r4_group_gives_each_fact_to_one_consumer",
    "test_r4_reading_a_missing_group_is_a_store_error",
]


_ids = itertools.count(1)


def new_name(kind: str) -> str:
    """A session or group name no other test uses."""
    return f"{kind}-g{next(_ids)}"


def decision(n: int) -> list[Event]:
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
            seq = await store.append(sid, decision(n), seq)
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
    await store.append(sid, decision(1), 0)
    got = await asyncio.wait_for(waiting, timeout=10)
    assert [(sid, 2)] == keys(got)


async def test_r4_reading_a_missing_group_is_a_store_error(store: EventStore) -> None:
    """R4/R5: a group never created is a typed ``StoreError``, never a driver error."""
    await publish(store, per_session=1, sessions=1)
    with pytest.raises(StoreError, match="no consumer group"):
        await store.read_facts_group(new_name("missing"), "c")
