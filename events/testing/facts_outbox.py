"""The facts outbox contract: ``publish_facts`` on any adapter (R4).

Pattern: a contract suite over the outbox method of the ``EventStore`` port,
         run against any adapter (see ``helmlog.events.testing``).
Role:    events layer, shipped tests; ``publish_facts`` means the same on
         every store: facts after the session's cursor are published, the
         cursor moves only past published facts, twice is once.
Emits:   nothing.

Laws: R4 (publication is an outbox behind a per-session cursor, idempotent).

Why the writing store is closed before another one publishes: a store may
note its cursor moves in memory and send them when idle; closing sends them,
so the second store sees the cursor the first one earned.
"""

from __future__ import annotations

from helmlog.events import EventStore, StoredEvent, TurnEnded, TurnStarted

from .._facts import fact_records
from .support import StoreFactory, decision, eventually, new_session

__all__ = [
    "test_r4_publish_facts_after_every_fact_is_out_publishes_nothing",
    "test_r4_publish_facts_of_an_unknown_session_publishes_nothing",
]


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
