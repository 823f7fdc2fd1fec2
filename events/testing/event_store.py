"""The event-store contract: appends, and what a record read back carries.

Pattern: a contract suite (eventsourcing-style): module-level tests taking a
         ``store``/``make_store`` fixture, run against any adapter of the
         ``EventStore`` port (``helmlog.events.testing``'s header says how).
Role:    events layer, shipped tests; this repository runs them on memory,
         Redis and Redis Cluster (``tests/contracts/test_store_contract.py``).
Emits:   nothing.

Laws: R2 (seq, atomic appends, conflicts), R10 (unknown types), R12 (a record
carries its type and session id). The chain and head records are ``chain``'s
(R3, R19); what appends publish is ``facts_published``'s (R4).

Why the suite is split by law family and re-assembled in ``__init__``: an
adapter author reads one family at a time, and the star import still
collects every test under the same names.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from helmlog.events import (
    Event,
    EventStore,
    SequenceConflictError,
    StoredEvent,
    StoreError,
    TurnStarted,
    UnknownEvent,
    fold,
    seal,
    verify_chain,
)

from .support import (
    KEY,
    StoreFactory,
    decision,
    filed,
    new_session,
    turn,
    unknown_record,
)

__all__ = [
    "test_r2_append_is_atomic_on_conflict",
    "test_r2_concurrent_writers_one_wins",
    "test_r2_long_stream_round_trips",
    "test_r2_new_stream_expects_zero",
    "test_r2_records_must_follow_expected_seq",
    "test_r2_seq_starts_at_one_without_gaps",
    "test_r2_sessions_are_independent",
    "test_r10_unknown_event_type_is_reported_not_a_crash",
    "test_r12_a_records_session_id_is_restored_on_read",
    "test_r12_stored_event_type_is_set_on_every_path",
]


async def test_r2_seq_starts_at_one_without_gaps(store: EventStore) -> None:
    """R2: seqs run 1, 2, 3 … across batches; append returns the new last seq."""
    sid = new_session()
    assert await store.head(sid) == (0, "")
    assert await store.append(sid, turn(1), 0) == 5
    assert await store.append(sid, decision(1), 5) == 7
    records = await store.read(sid)
    assert list(range(1, 8)) == [r.seq for r in records]
    assert (7, records[-1].hash) == await store.head(sid)
    events = [r.decode() for r in records]
    assert [sid] * 7 == [e.session_id for e in events]
    assert list(range(1, 8)) == [e.seq for e in events]
    assert records[3:] == await store.read(sid, after_seq=3)
    assert await store.read(sid, after_seq=7) == []


async def test_r2_append_is_atomic_on_conflict(store: EventStore) -> None:
    """R2: a batch with a wrong expected_seq appends nothing and says why."""
    sid = new_session()
    await store.append(sid, decision(1), 0)
    before = await store.read(sid)
    for wrong in (0, 1, 3, 99):
        with pytest.raises(SequenceConflictError) as info:
            await store.append(sid, turn(2), wrong)
        err = info.value
        assert (sid, wrong, 2) == (err.session_id, err.expected, err.actual)
        assert err.code == "ERR_SEQUENCE_CONFLICT"
        assert isinstance(err, StoreError)
    _, records = seal(sid, turn(3), after_seq=1, prev_hash=before[0].hash)
    with pytest.raises(SequenceConflictError):
        await store.append_sealed(sid, records, 1)
    assert before == await store.read(sid)


async def test_r2_new_stream_expects_zero(store: EventStore) -> None:
    """R2: the first append to a stream must expect 0."""
    sid = new_session()
    with pytest.raises(SequenceConflictError) as info:
        await store.append(sid, turn(1), 1)
    assert (info.value.expected, info.value.actual) == (1, 0)
    assert await store.read(sid) == []
    assert sid not in await store.sessions()


async def test_r2_concurrent_writers_one_wins(store: EventStore) -> None:
    """R2: two appends expecting the same seq: exactly one lands."""
    sid = new_session()
    await store.append(sid, turn(1), 0)
    results = await asyncio.gather(
        store.append(sid, decision(1), 5),
        store.append(sid, turn(2), 5),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, int)]
    losses = [r for r in results if isinstance(r, SequenceConflictError)]
    assert (len(wins), len(losses)) == (1, 1)
    records = await store.read(sid)
    assert wins[0] == records[-1].seq
    assert losses[0].expected == 5
    assert None is verify_chain(records)


async def test_r2_records_must_follow_expected_seq(store: EventStore) -> None:
    """R2: sealed records that do not continue at expected_seq + 1 are refused."""
    sid = new_session()
    _, records = seal(sid, turn(1), after_seq=1, prev_hash="")
    with pytest.raises(ValueError):
        await store.append_sealed(sid, records, 0)
    assert await store.read(sid) == []


async def test_r2_sessions_are_independent(store: EventStore) -> None:
    """R2: streams of different sessions interleave freely; sessions() lists them."""
    a, b = new_session(), new_session()
    seq_a = seq_b = 0
    for n in range(3):
        seq_a = await store.append(a, decision(n), seq_a)
        seq_b = await store.append(b, turn(n), seq_b)
    assert (seq_a, seq_b) == (6, 15)
    assert {a, b} == set(await store.sessions())
    assert None is verify_chain(await store.read(a))
    assert None is verify_chain(await store.read(b))


async def test_r2_long_stream_round_trips(store: EventStore) -> None:
    """R2: 5,000 events read back exactly as appended, paging included."""
    sid = new_session()
    sealed: list[StoredEvent] = []
    seq, prev = 0, ""
    for n in range(500):
        batch = turn(n) + decision(n) + decision(n + 1) + [TurnStarted(turn=n)]
        _, records = seal(sid, batch, after_seq=seq, prev_hash=prev)
        seq = await store.append_sealed(sid, records, seq)
        prev = records[-1].hash
        sealed.extend(records)
    assert seq == 5_000
    assert sealed == await store.read(sid)
    assert sealed[4_321:] == await store.read(sid, after_seq=4_321)
    assert None is verify_chain(sealed)


async def test_r12_stored_event_type_is_set_on_every_path(store: EventStore) -> None:
    """R12: ``seal``, ``read`` and ``append_sealed`` of hand-built records give
    every ``StoredEvent`` its type, unknown types included."""
    sid = new_session()
    batch = turn(1) + filed(1)
    _, sealed = seal(sid, batch, after_seq=0, prev_hash="")
    assert [e.type for e in batch] == [r.type for r in sealed]
    await store.append_sealed(sid, sealed, 0)
    # Built by hand, with no type: the store types it from its bytes.
    later = msgspec.structs.replace(
        unknown_record(sid, 7, sealed[-1].hash, None), type="", session_id=""
    )
    await store.append_sealed(sid, [later], 6)
    records = await store.read(sid)
    assert [*[e.type for e in batch], "future.thing_happened"] == [
        r.type for r in records
    ]
    assert [r.decode().type for r in records] == [r.type for r in records]
    assert [r.type for r in records[3:]] == [r.type for r in await store.read(sid, 3)]


async def test_r12_a_records_session_id_is_restored_on_read(store: EventStore) -> None:
    """R12: only seq 1 stores the session id; every record read carries it and
    every decoded event has it back."""
    sid = new_session()
    seq = await store.append(sid, turn(1), 0)
    await store.append(sid, filed(1), seq)
    records = await store.read(sid)
    assert ["session_id" in msgspec.json.decode(r.data) for r in records] == [True] + [
        False
    ] * 5
    assert [sid] * 6 == [r.session_id for r in records]
    assert [sid] * 6 == [r.decode().session_id for r in records]
    assert [sid] * 3 == [r.decode().session_id for r in await store.read(sid, 3)]
    assert None is verify_chain(records)
    decoded = [e for e in (r.decode() for r in records) if isinstance(e, Event)]
    assert None is verify_chain(decoded)  # re-encoded as seal encodes


async def test_r10_unknown_event_type_is_reported_not_a_crash(
    make_store: StoreFactory,
) -> None:
    """R10: an unknown type decodes to UnknownEvent, folds as reported, verifies."""
    store = make_store(chain_key=KEY)
    sid = new_session()
    seq = await store.append(sid, turn(1), 0)
    _, last_hash = await store.head(sid)
    novel = unknown_record(sid, seq + 1, last_hash, KEY)
    assert seq + 1 == await store.append_sealed(sid, [novel], seq)
    assert seq + 3 == await store.append(sid, decision(1), seq + 1)

    records = await store.read(sid)
    assert novel == records[seq]
    event = records[seq].decode()
    assert isinstance(event, UnknownEvent)
    assert ("future.thing_happened", seq + 1) == (event.type, event.seq)
    assert novel.data == event.data
    state = fold(r.decode() for r in records)
    assert ((seq + 1, "future.thing_happened"),) == state.unknown_events
    assert len(state.middleware_decisions) == 1
    assert seq + 3 == state.last_seq
    assert None is verify_chain(records, KEY)
