"""The stream recorder's contract: appends, records, the chain, what a store keeps.

Pattern: a contract suite for the ``StreamRecorder`` port: module-level tests
         on ``store``/``make_store`` (and ``erase``, an operator deleting a
         stream and head behind the port's back).
Role:    events layer, shipped tests; see ``helmlog.events.testing``.

Laws: R2, R3 (first broken seq; a chain key catches recomputed hashes), R10,
R12, R19, R25, R26 (a stream without its head is refused; ``upgrade_head``).

Why tampering works on copies of what ``read`` returned: a store must hand
back exactly what it keeps, so no store-specific back door is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest

from helmlog.events import (
    Event,
    EventStore,
    MemoryEventStore,
    Message,
    MessageCommitted,
    RedisEventStore,
    SequenceConflictError,
    StoredEvent,
    StoreError,
    StreamTamperedError,
    TurnStarted,
    UnknownEvent,
    fold,
    read_verified,
    verify_chain,
    verify_records,
)
from helmlog.events._chain import head_of
from helmlog.events.lowlevel import hash_bytes, seal
from helmlog.events.redis.keys import head_key, stream_key

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
    "erase",
    "test_r2_append_is_atomic_on_conflict",
    "test_r2_concurrent_writers_one_wins",
    "test_r2_long_stream_round_trips",
    "test_r2_new_stream_expects_zero",
    "test_r2_records_must_follow_expected_seq",
    "test_r2_seq_starts_at_one_without_gaps",
    "test_r2_sessions_are_independent",
    "test_r3_chain_verifies_and_names_first_broken_seq",
    "test_r3_keyed_chain_detects_recomputed_hashes",
    "test_r10_unknown_event_type_is_reported_not_a_crash",
    "test_r12_a_records_session_id_is_restored_on_read",
    "test_r12_stored_event_type_is_set_on_every_path",
    "test_r19_every_append_writes_the_head_record",
    "test_r19_verify_chain_names_a_cut_tail_a_deleted_stream_and_a_bad_head",
    "test_r25_a_store_remembers_a_session_whose_keys_were_deleted",
    "test_r25_a_store_remembers_only_sessions_it_created",
    "test_r26_a_stream_without_its_head_is_refused_on_a_store_that_writes_heads",
    "test_r26_upgrade_head_restores_a_head_explicitly",
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


async def test_r3_chain_verifies_and_names_first_broken_seq(store: EventStore) -> None:
    """R3: a chain verifies; an edit, deletion, insertion, reorder is named
    at its position (the seq it should hold, not the seq found there)."""
    sid = new_session()
    seq = 0
    for n in range(3):
        seq = await store.append(sid, turn(n) + decision(n), seq)
    records = await store.read(sid)
    assert len(records) == 21
    assert None is verify_chain(records)
    assert [hash_bytes(r.data) for r in records] == [r.hash for r in records]

    def edited(i: int, **changes: Any) -> list[StoredEvent]:
        copy = list(records)
        copy[i] = msgspec.structs.replace(copy[i], **changes)
        return copy

    edit = records[8].data.replace(b"question 1", b"question X")
    assert edit != records[8].data
    assert verify_chain(edited(8, data=edit)) == 9
    assert verify_chain(edited(8, hash="0" * 64)) == 9
    assert verify_chain(edited(8, seq=70)) == 9  # renumbered in the store only
    deleted = records[:9] + records[10:]
    assert verify_chain(deleted) == 10
    assert verify_chain(records[:-2] + records[-1:]) == 20
    reordered = list(records)
    reordered[4], reordered[5] = reordered[5], reordered[4]
    assert verify_chain(reordered) == 5
    inserted = [*records[:12], records[11], *records[12:]]
    assert verify_chain(inserted) == 13
    # A renumbering that re-seals its own record still breaks at that seq:
    # its body now disagrees with its position, or the next prev_hash does.
    ev = records[8].decode()
    assert isinstance(ev, MessageCommitted)
    forged = msgspec.json.encode(msgspec.structs.replace(ev, seq=10))
    assert verify_chain(edited(8, data=forged, hash=hash_bytes(forged))) == 9


async def test_r3_keyed_chain_detects_recomputed_hashes(
    make_store: StoreFactory,
) -> None:
    """R3: with a chain key, an attacker who recomputes SHA-256 hashes is caught."""
    store = make_store(chain_key=KEY)
    assert store.chain_key == KEY
    sid = new_session()
    seq = 0
    for n in range(3):
        seq = await store.append(sid, turn(n) + decision(n), seq)
    records = await store.read(sid)
    assert None is verify_chain(records, KEY)
    assert [hash_bytes(r.data, KEY) for r in records] == [r.hash for r in records]
    assert verify_chain(records) == 1  # HMAC hashes are not plain SHA-256
    assert verify_chain(records, b"another key") == 1

    # The attacker edits seq 9 and re-seals everything after it, consistently.
    events = [r.decode() for r in records]
    victim = events[8]
    assert isinstance(victim, MessageCommitted)
    events[8] = msgspec.structs.replace(
        victim, message=Message(role="assistant", content="something else")
    )
    tail: list[Event] = [e for e in events[8:] if isinstance(e, Event)]
    _, resealed = seal(sid, tail, after_seq=8, prev_hash=records[7].hash, key=None)
    forged = records[:8] + resealed
    assert verify_chain(forged, KEY) == 9

    # The same forgery on an unkeyed chain passes: the key is what makes
    # recomputing the hashes useless.
    known = [e for e in (r.decode() for r in records) if isinstance(e, Event)]
    _, plain = seal(sid, known, after_seq=0, prev_hash="", key=None)
    _, replain = seal(sid, tail, after_seq=8, prev_hash=plain[7].hash, key=None)
    assert plain[8] != replain[0]
    assert None is verify_chain(plain[:8] + replain)


@pytest.mark.parametrize("key", [None, KEY], ids=["no-key", "chain-key"])
async def test_r19_every_append_writes_the_head_record(
    make_store: StoreFactory, key: bytes | None
) -> None:
    """R19: ``read_head`` is ``None`` for a new session, then names the last
    seq and hash of every append (MACed under a chain key, never without);
    a conflicting append leaves it as it was."""
    store = make_store(chain_key=key)
    sid = new_session()
    assert None is await store.read_head(sid)
    seq = 0
    for n in range(3):
        seq = await store.append(sid, turn(n) + decision(n), seq)
        records = await store.read(sid)
        head = await store.read_head(sid)
        assert head_of(sid, seq, records[-1].hash, key) == head
        assert (key is not None) == (head is not None and head.mac is not None)
        assert None is verify_chain(records, key, head)
    with pytest.raises(SequenceConflictError):
        await store.append(sid, decision(9), seq - 1)
    assert head == await store.read_head(sid)
    assert None is await store.read_head(new_session())


async def test_r19_verify_chain_names_a_cut_tail_a_deleted_stream_and_a_bad_head(
    make_store: StoreFactory,
) -> None:
    """R19: against its head, a stream missing its last records breaks at the
    first missing seq, an empty one at 1, and a head whose MAC or hash does not
    verify at the head's seq; no head checks the chain alone."""
    store = make_store(chain_key=KEY)
    sid = new_session()
    seq = await store.append(sid, turn(1) + decision(1) + turn(2), 0)
    records = await store.read(sid)
    head = await store.read_head(sid)
    assert head is not None and seq == head.seq
    assert seq - 2 == verify_chain(records[:-3], KEY, head)
    assert verify_chain([], KEY, head) == 1
    forged = msgspec.structs.replace(head, mac=hash_bytes(b"forged", KEY))
    assert seq == verify_chain(records, KEY, forged)
    unkeyed = head_of(sid, seq, records[-1].hash)
    assert seq == verify_chain(records, KEY, unkeyed)  # no MAC under a key
    elsewhere = head_of(sid, seq - 1, records[-1].hash, KEY)
    assert seq - 1 == verify_chain(records, KEY, elsewhere)  # its hash is not seq's
    assert None is verify_chain(records[:-3], KEY)  # no head: the chain alone
    with pytest.raises(StreamTamperedError) as caught:
        verify_records(sid, records[:-3], KEY, head=head)
    assert (sid, seq - 2, "truncated") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )
    with pytest.raises(StreamTamperedError) as caught:
        verify_records(sid, [], KEY, head=head)
    assert (caught.value.seq, caught.value.reason) == (1, "deleted")
    assert await read_verified(store, new_session()) == []  # never appended to


Erase = Callable[..., Awaitable[None]]
"""``await erase(store, session_id, *, stream=True, head=True)``."""


@pytest.fixture
def erase() -> Erase:
    """Delete a session's stream and/or head record behind the store's back.

    Override this fixture for an adapter of another kind.
    """

    async def go(
        store: EventStore, session_id: str, *, stream: bool = True, head: bool = True
    ) -> None:
        if isinstance(store, MemoryEventStore):
            if stream:
                store._streams.pop(session_id, None)
            if head:
                store._heads.pop(session_id, None)
        elif isinstance(store, RedisEventStore):
            keys = [stream_key(session_id)] if stream else []
            keys += [head_key(session_id)] if head else []
            for key in keys:
                await store._routes.one(key, "DEL", key)
        else:
            pytest.fail(
                f"override the `erase` fixture for {type(store).__name__}: "
                "delete a session's stream and head record as an operator would"
            )

    return go


async def test_r25_a_store_remembers_only_sessions_it_created(
    store: EventStore,
) -> None:
    """R25: ``remembers`` is false for a session never appended to (a refused
    first append included) and true once an append created it."""
    sid, other = new_session(), new_session()
    before = [await store.remembers(sid), await store.remembers(other)]
    await store.append(sid, turn(1), 0)
    with pytest.raises(SequenceConflictError):
        await store.append(other, turn(1), 3)
    after = [await store.remembers(sid), await store.remembers(other)]
    assert before + after == [False, False, True, False]


async def test_r25_a_store_remembers_a_session_whose_keys_were_deleted(
    make_store: Callable[..., EventStore], erase: Erase
) -> None:
    """R25: with its stream and head record deleted, a session reads as
    absent and is still remembered, by this store and by another opened on
    the same storage."""
    store = make_store(chain_key=KEY)
    sid = new_session()
    seq = await store.append(sid, turn(1), 0)
    await store.append(sid, decision(1), seq)
    await erase(store, sid)
    left = (await store.read(sid), await store.read_head(sid))
    assert left == ([], None)
    assert await store.remembers(sid)
    if not isinstance(store, MemoryEventStore):
        assert await make_store(chain_key=KEY).remembers(sid)


async def test_r26_a_stream_without_its_head_is_refused_on_a_store_that_writes_heads(
    store: EventStore, erase: Erase
) -> None:
    """R26: once written, a store says it writes head records; a stream whose
    head was deleted is then refused by ``read_verified`` ("no-head")."""
    sid = new_session()
    await store.append(sid, turn(1), 0)
    assert await store.writes_heads()
    await erase(store, sid, stream=False)
    assert None is await store.read_head(sid)
    with pytest.raises(StreamTamperedError) as caught:
        await read_verified(store, sid)
    assert (sid, 0, "no-head") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )


async def test_r26_upgrade_head_restores_a_head_explicitly(
    make_store: Callable[..., EventStore], erase: Erase
) -> None:
    """R26: ``upgrade_head`` verifies a headless stream and gives it the head
    of its last record (once); a session with its head, or none, is left."""
    store = make_store(chain_key=KEY)
    sid, absent = new_session(), new_session()
    seq = await store.append(sid, turn(1), 0)
    seq = await store.append(sid, decision(1), seq)
    kept = await store.read_head(sid)
    assert None is await store.upgrade_head(sid)  # it has its head
    await erase(store, sid, stream=False)
    head = await store.upgrade_head(sid)
    assert head is not None and kept == head
    assert seq == head.seq
    records = await read_verified(store, sid)
    assert None is verify_chain(records, KEY, head)
    assert None is await store.upgrade_head(sid)
    assert None is await store.upgrade_head(absent)
    assert not await store.remembers(absent)
