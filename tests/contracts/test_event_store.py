"""The event-store contract: one suite, every adapter.

Pattern: a contract suite (eventsourcing-style) parametrized over the
         adapters of one port; the Redis run is the same suite on a real
         server, plus the few laws only a remote store can break.
Role:    tests/contracts; ``MemoryEventStore`` and ``RedisEventStore`` must
         both pass every test not marked Redis-only.
Emits:   nothing.

Laws: R2 (seq, atomic appends, conflicts), R3 (the chain and its first broken
seq, keyed chains), R4 (the facts stream), R5 (a failing store is a
``StoreError``, never a driver error, and loses nothing it acknowledged),
R10 (unknown types), R11 (URLs, hash-tagged keys).

Why the tampering tests work on copies of what ``read`` returned: the store
must hand back exactly what it keeps, so tampering with its output is
tampering with the record as a verifier sees it, without needing a
store-specific back door.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    FactRecord,
    LlmStarted,
    MemoryEventStore,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    MiddlewareDecisionEvent,
    SequenceConflictError,
    StoredEvent,
    StoreError,
    StreamTamperedError,
    TurnEnded,
    TurnStarted,
    UnknownEvent,
    decode_event,
    fact_for,
    fact_of,
    fold,
    hash_bytes,
    open_event_store,
    read_verified,
    seal,
    verify_chain,
    verify_records,
)
from helmlog.events._chain import encode_head, head_of
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events._redis_scripts import APPEND_LUA
from helmlog.events._redis_store import (
    RedisEventStore,
    head_key,
    shard_keys,
    stream_key,
)
from tests.contracts.conftest import StoreFactory
from tests.fixtures_redis import RedisServer

# Invariant: tests and async fixtures share one loop, so a client opened in a
# fixture is used and closed on the loop it connected on.
pytestmark = pytest.mark.asyncio(loop_scope="session")

KEY = b"chain-key-for-tests"
_ids = itertools.count(1)


def new_session() -> str:
    """A session id no other test or example uses."""
    return f"s-{next(_ids)}"


def row(n: int, *, outcome: str = "allow") -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware="guard",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome=outcome,
        changed=False,
        tool_name="search",
        tool_call_id=f"call-{n}",
    )


def decision(n: int) -> list[Event]:
    """A decision row and its stored fact: the batch walkers filed before facts
    were projections (R4: such a batch still publishes one fact per row)."""
    r = row(n)
    return [DecisionFiled(row=r), fact_for(r)]


SECRET = "4111-1111-1111-1111"


def filed(n: int) -> list[Event]:
    """A decision row, stored once: the batch a walker files (R4)."""
    r = msgspec.structs.replace(
        row(n), changed=True, why="masked", before=SECRET, after="[card]"
    )
    return [DecisionFiled(row=r)]


def turn(n: int) -> list[Event]:
    """A small turn with no decisions."""
    return [
        TurnStarted(turn=n),
        MessageCommitted(message=Message(role="user", content=f"question {n}")),
        LlmStarted(iteration=1, model="scripted"),
        MessageCommitted(message=Message(role="assistant", content=f"answer {n}")),
        TurnEnded(turn=n, final_content=f"answer {n}"),
    ]


def stamped(
    events: Sequence[Event], records: Sequence[StoredEvent], session_id: str
) -> list[Event]:
    """``events`` as a store stamps them, given the records it kept."""
    out: list[Event] = []
    prev = records[0].decode().prev_hash if records else ""
    for ev, rec in zip(events, records, strict=True):
        out.append(
            msgspec.structs.replace(
                ev, session_id=session_id, seq=rec.seq, prev_hash=prev, replayed=False
            )
        )
        prev = rec.hash
    return out


async def eventually(
    probe: Callable[[], Awaitable[Any]],
    until: Callable[[Any], bool],
    *,
    timeout: float = 5.0,
) -> Any:
    """Poll ``probe`` until ``until(result)`` holds, or fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await probe()
        if until(result):
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout}s; last: {result!r}")
        await asyncio.sleep(0.01)


def unknown_record(
    session_id: str, seq: int, prev_hash: str, key: bytes | None
) -> StoredEvent:
    """A record of a type this reader lacks, sealed as a newer writer would."""
    data = msgspec.json.encode(
        {
            "type": "future.thing_happened",
            "session_id": session_id,
            "seq": seq,
            "timestamp": 1_700_000_000_000,
            "prev_hash": prev_hash,
            "replayed": False,
            "novelty": {"nested": [1, 2, 3]},
        }
    )
    return StoredEvent(
        seq=seq,
        data=data,
        hash=hash_bytes(data, key),
        type="future.thing_happened",
        session_id=session_id,
    )


# -- R2: sequence numbers and atomic appends ----------------------------------


async def test_r2_seq_starts_at_one_without_gaps(store: EventStore) -> None:
    """R2: seqs run 1, 2, 3 … across batches; append returns the new last seq."""
    sid = new_session()
    assert (0, "") == await store.head(sid)
    assert 5 == await store.append(sid, turn(1), 0)
    assert 7 == await store.append(sid, decision(1), 5)
    records = await store.read(sid)
    assert list(range(1, 8)) == [r.seq for r in records]
    assert (7, records[-1].hash) == await store.head(sid)
    events = [r.decode() for r in records]
    assert [sid] * 7 == [e.session_id for e in events]
    assert list(range(1, 8)) == [e.seq for e in events]
    assert records[3:] == await store.read(sid, after_seq=3)
    assert [] == await store.read(sid, after_seq=7)


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
        assert "ERR_SEQUENCE_CONFLICT" == err.code
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
    assert (1, 0) == (info.value.expected, info.value.actual)
    assert [] == await store.read(sid)
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
    assert (1, 1) == (len(wins), len(losses))
    records = await store.read(sid)
    assert wins[0] == records[-1].seq
    assert 5 == losses[0].expected
    assert None is verify_chain(records)


async def test_r2_records_must_follow_expected_seq(store: EventStore) -> None:
    """R2: sealed records that do not continue at expected_seq + 1 are refused."""
    sid = new_session()
    _, records = seal(sid, turn(1), after_seq=1, prev_hash="")
    with pytest.raises(ValueError):
        await store.append_sealed(sid, records, 0)
    assert [] == await store.read(sid)


async def test_r2_sessions_are_independent(store: EventStore) -> None:
    """R2: streams of different sessions interleave freely; sessions() lists them."""
    a, b = new_session(), new_session()
    seq_a = seq_b = 0
    for n in range(3):
        seq_a = await store.append(a, decision(n), seq_a)
        seq_b = await store.append(b, turn(n), seq_b)
    assert (6, 15) == (seq_a, seq_b)
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
    assert 5_000 == seq
    assert sealed == await store.read(sid)
    assert sealed[4_321:] == await store.read(sid, after_seq=4_321)
    assert None is verify_chain(sealed)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    batches=st.lists(
        st.lists(
            st.one_of(
                st.builds(TurnStarted, turn=st.integers(0, 2**31)),
                st.builds(
                    MessageCommitted,
                    message=st.builds(
                        Message,
                        role=st.sampled_from(["user", "assistant", "tool"]),
                        content=st.text(max_size=200),
                    ),
                ),
                st.builds(
                    DecisionFiled,
                    row=st.builds(
                        row,
                        st.integers(0, 10**6),
                        outcome=st.sampled_from(["allow", "deny"]),
                    ),
                ),
                st.integers(0, 10**6).map(lambda n: fact_for(row(n))),
                st.builds(
                    TurnEnded,
                    turn=st.integers(0, 100),
                    final_content=st.text(max_size=50),
                    timestamp=st.integers(0, 2**50),
                ),
            ),
            min_size=0,
            max_size=6,
        ),
        min_size=1,
        max_size=6,
    )
)
async def test_r2_r3_any_batches_read_back_equal_and_verify(
    store: EventStore, batches: list[list[Event]]
) -> None:
    """R2/R3: for any batches, read() returns what was appended, and it verifies."""
    sid = new_session()
    seq = 0
    appended: list[Event] = []
    for batch in batches:
        seq = await store.append(sid, batch, seq)
        appended.extend(batch)
    records = await store.read(sid)
    assert len(appended) == seq == len(records)
    assert stamped(appended, records, sid) == [r.decode() for r in records]
    assert None is verify_chain(records)
    assert [hash_bytes(r.data) for r in records] == [r.hash for r in records]


# -- R3: the hash chain -----------------------------------------------------


async def test_r3_chain_verifies_and_names_first_broken_seq(store: EventStore) -> None:
    """R3: a chain verifies; an edit, deletion, insertion, reorder is named."""
    sid = new_session()
    seq = 0
    for n in range(3):
        seq = await store.append(sid, turn(n) + decision(n), seq)
    records = await store.read(sid)
    assert 21 == len(records)
    assert None is verify_chain(records)
    assert [hash_bytes(r.data) for r in records] == [r.hash for r in records]

    def edited(i: int, **changes: Any) -> list[StoredEvent]:
        copy = list(records)
        copy[i] = msgspec.structs.replace(copy[i], **changes)
        return copy

    edit = records[8].data.replace(b"question 1", b"question X")
    assert edit != records[8].data
    assert 9 == verify_chain(edited(8, data=edit))
    assert 9 == verify_chain(edited(8, hash="0" * 64))
    assert 70 == verify_chain(edited(8, seq=70))  # renumbered in the store only
    deleted = records[:9] + records[10:]
    assert 11 == verify_chain(deleted)
    assert 21 == verify_chain(records[:-2] + records[-1:])
    reordered = list(records)
    reordered[4], reordered[5] = reordered[5], reordered[4]
    assert 6 == verify_chain(reordered)
    inserted = [*records[:12], records[11], *records[12:]]
    assert 12 == verify_chain(inserted)
    # A renumbering that re-seals its own record still breaks at that seq:
    # its body now disagrees with its position, or the next prev_hash does.
    ev = records[8].decode()
    assert isinstance(ev, MessageCommitted)
    forged = msgspec.json.encode(msgspec.structs.replace(ev, seq=10))
    assert 9 == verify_chain(edited(8, data=forged, hash=hash_bytes(forged)))


async def test_r3_keyed_chain_detects_recomputed_hashes(
    make_store: StoreFactory,
) -> None:
    """R3: with a chain key, an attacker who recomputes SHA-256 hashes is caught."""
    store = make_store(chain_key=KEY)
    assert KEY == store.chain_key
    sid = new_session()
    seq = 0
    for n in range(3):
        seq = await store.append(sid, turn(n) + decision(n), seq)
    records = await store.read(sid)
    assert None is verify_chain(records, KEY)
    assert [hash_bytes(r.data, KEY) for r in records] == [r.hash for r in records]
    assert 1 == verify_chain(records)  # HMAC hashes are not plain SHA-256
    assert 1 == verify_chain(records, b"another key")

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
    assert 9 == verify_chain(forged, KEY)

    # The same forgery on an unkeyed chain passes: the key is what makes
    # recomputing the hashes useless.
    known = [e for e in (r.decode() for r in records) if isinstance(e, Event)]
    _, plain = seal(sid, known, after_seq=0, prev_hash="", key=None)
    _, replain = seal(sid, tail, after_seq=8, prev_hash=plain[7].hash, key=None)
    assert plain[8] != replain[0]
    assert None is verify_chain(plain[:8] + replain)


# -- R19: the head record ----------------------------------------------------


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
    assert 1 == verify_chain([], KEY, head)
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
    assert (1, "deleted") == (caught.value.seq, caught.value.reason)
    assert [] == await read_verified(store, new_session())  # never appended to


# -- R4: the facts stream ---------------------------------------------------


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
        assert "middleware.decision" == event["type"]
        assert not {"before", "after", "row"} & set(event)
    assert 3 == len({f.id for f in facts})

    assert [] == await store.read_facts(after_id=facts[-1].id)
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
    assert 7 == seq
    records = await store.read(sid)
    types = [r.decode().type for r in records]
    assert "middleware.decision" not in types
    assert ["decision.filed", "decision.filed"] == types[5:]
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
    assert [True] + [False] * 5 == [
        "session_id" in msgspec.json.decode(r.data) for r in records
    ]
    assert [sid] * 6 == [r.session_id for r in records]
    assert [sid] * 6 == [r.decode().session_id for r in records]
    assert [sid] * 3 == [r.decode().session_id for r in await store.read(sid, 3)]
    assert None is verify_chain(records)
    decoded = [e for e in (r.decode() for r in records) if isinstance(e, Event)]
    assert None is verify_chain(decoded)  # re-encoded as seal encodes


@pytest.mark.redis
async def test_r4_blocking_read_wakes_on_a_new_fact(redis_url: str) -> None:
    """R4: read_facts(block_ms=...) returns as soon as a fact is published."""
    store = RedisEventStore.from_url(redis_url)
    try:
        sid = new_session()
        assert [] == await store.read_facts(block_ms=50)
        waiting = asyncio.ensure_future(store.read_facts("0-0", block_ms=5_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await store.append(sid, decision(1), 0)
        facts = await asyncio.wait_for(waiting, timeout=5)
        assert [(sid, 2)] == [(f.session_id, f.seq) for f in facts]
    finally:
        await store.close()


@pytest.mark.redis
async def test_r4_failed_publication_never_fails_the_append(
    redis_url: str, raw_redis: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """R4/R5: a facts stream that refuses writes leaves the append intact; republish."""
    sid = new_session()
    facts_key = shard_keys(shard_of(sid, DEFAULT_SHARDS))[0]
    await raw_redis.set(facts_key, "not a stream")
    store = RedisEventStore.from_url(redis_url)
    try:
        with caplog.at_level(logging.WARNING, logger="helmlog"):
            seq = await store.append(sid, decision(1) + decision(2), 0)
            assert 4 == seq
            await eventually(
                lambda: asyncio.sleep(0, caplog.records),
                lambda recs: any("not published" in r.getMessage() for r in recs),
            )
        assert 4 == len(await store.read(sid))
        await raw_redis.delete(facts_key)
        assert 2 == await store.publish_facts(sid)
        with pytest.deprecated_call():
            assert 0 == await store.republish_facts(sid)
        facts = await store.read_facts()
        assert [(sid, 2), (sid, 4)] == [(f.session_id, f.seq) for f in facts]
    finally:
        await store.close()


@pytest.mark.redis
async def test_r4_republished_facts_are_projections_with_the_rows_seq(
    redis_url: str, raw_redis: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """R4: facts republished from a stream of rows are the rows' projections,
    at the rows' seqs, with no value; published once."""
    sid = new_session()
    facts_key = shard_keys(shard_of(sid, DEFAULT_SHARDS))[0]
    await raw_redis.set(facts_key, "not a stream")
    store = RedisEventStore.from_url(redis_url)
    try:
        with caplog.at_level(logging.WARNING, logger="helmlog"):
            seq = await store.append(sid, turn(1)[:1] + filed(1) + filed(2), 0)
            assert 3 == seq
            await eventually(
                lambda: asyncio.sleep(0, caplog.records),
                lambda recs: any("not published" in r.getMessage() for r in recs),
            )
        await raw_redis.delete(facts_key)
        assert 2 == await store.publish_facts(sid)
        assert 0 == await store.publish_facts(sid)
        facts = await store.read_facts()
        assert [(sid, 2), (sid, 3)] == [(f.session_id, f.seq) for f in facts]
        rows = [r.decode() for r in (await store.read(sid))[1:]]
        assert [fact_of(r) for r in rows if isinstance(r, DecisionFiled)] == [
            decode_event(f.data) for f in facts
        ]
        assert [] == [f for f in facts if SECRET.encode() in f.data]
    finally:
        await store.close()


@pytest.mark.redis
async def test_r4_close_publishes_queued_facts(redis_url: str) -> None:
    """R4: facts still queued when the store closes are published, not dropped."""
    sid = new_session()
    store = RedisEventStore.from_url(redis_url)
    await store.append(sid, decision(1), 0)
    await store.close()
    reader = RedisEventStore.from_url(redis_url)
    try:
        assert [(sid, 2)] == [(f.session_id, f.seq) for f in await reader.read_facts()]
    finally:
        await reader.close()


# -- R5: a failing store ----------------------------------------------------


@pytest.mark.redis
async def test_r5_stopped_server_is_a_store_error_and_loses_nothing(
    private_redis: RedisServer,
) -> None:
    """R5: Redis down: StoreError on every call, never redis.*; nothing is lost."""
    store = RedisEventStore.from_url(private_redis.url)
    sid = new_session()
    try:
        seq = await store.append(sid, turn(1) + decision(1), 0)
        recorded = await store.read(sid)
        private_redis.stop()

        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: store.append(sid, decision(2), seq),
            lambda: store.read(sid),
            store.sessions,
            store.read_facts,
            lambda: store.head(new_session()),
        ]
        for call in calls:
            with pytest.raises(StoreError) as info:
                await call()
            assert not isinstance(info.value, redis.RedisError)
            assert type(info.value) is StoreError
            assert info.value.retryable
            assert private_redis.url in str(info.value)

        private_redis.start()
        assert recorded == await store.read(sid)
        # The restarted server lost its script cache; the store reloads it.
        assert seq + 2 == await store.append(sid, decision(2), seq)
        assert None is verify_chain(await store.read(sid))
    finally:
        await store.close()


@pytest.mark.redis
async def test_r5_driver_errors_become_store_errors(
    redis_url: str, raw_redis: aioredis.Redis
) -> None:
    """R5: a server-side error (a key of the wrong type) is a StoreError too."""
    sid = new_session()
    await raw_redis.set(f"helmlog:{{{sid}}}:events", "not a stream")
    store = RedisEventStore.from_url(redis_url)
    try:
        for call in (
            lambda: store.append(sid, turn(1), 0),
            lambda: store.read(sid),
        ):
            with pytest.raises(StoreError) as info:
                await call()
            assert type(info.value) is StoreError
            assert isinstance(info.value.__cause__, redis.RedisError)
    finally:
        await store.close()


# -- R2/R3 on a shared server: stale heads ------------------------------------


@pytest.mark.redis
async def test_r2_stale_head_is_a_conflict_never_a_fork(redis_url: str) -> None:
    """R2/R3: a writer with a stale cached head gets a conflict, never a fork."""
    a = RedisEventStore.from_url(redis_url)
    b = RedisEventStore.from_url(redis_url)
    sid = new_session()
    try:
        assert 2 == await a.append(sid, decision(1), 0)
        assert 4 == await b.append(sid, decision(2), 2)
        with pytest.raises(SequenceConflictError) as info:
            await a.append(sid, decision(3), 2)
        assert (2, 4) == (info.value.expected, info.value.actual)
        assert 6 == await a.append(sid, decision(3), 4)

        # The stream is deleted and rewritten to the same length under ``a``.
        assert 6 == await a.append(sid, [], 6)
        client = aioredis.Redis.from_url(redis_url)
        await client.delete(f"helmlog:{{{sid}}}:events")
        await client.aclose()
        assert (
            await b.append(sid, turn(9)[:3] + decision(9) + [TurnStarted(turn=9)], 0)
            == 6
        )
        with pytest.raises(SequenceConflictError):
            await a.append(sid, decision(4), 6)
        records = await a.read(sid)
        assert 6 == len(records)
        assert None is verify_chain(records)
        assert 8 == await a.append(sid, decision(4), 6)
        assert None is verify_chain(await a.read(sid))
    finally:
        await a.close()
        await b.close()


@pytest.mark.redis
async def test_r2_a_resend_is_idempotent_but_another_writers_identical_batch_conflicts(
    redis_url: str,
) -> None:
    """R2/R20: the append script takes a batch the stream already ends with as a
    success only when it carries the same append token (the store's own resend
    after a lost reply); another writer's byte-identical batch is a conflict."""
    store = RedisEventStore.from_url(redis_url)
    client = aioredis.Redis.from_url(redis_url)
    sid = new_session()
    try:
        _, records = seal(sid, decision(1), after_seq=0, prev_hash="")
        script = client.register_script(APPEND_LUA)
        head = encode_head(head_of(sid, records[-1].seq, records[-1].hash))
        args: list[Any] = [0, "", "writer-a:1", head]
        for r in records:
            args += [r.data, r.hash]
        keys = [stream_key(sid), head_key(sid)]
        assert [1, 2] == await script(keys=keys, args=args)
        assert [1, 2] == await script(keys=keys, args=args)  # the same append, resent
        assert head_of(sid, 2, records[-1].hash) == await store.read_head(sid)
        args[2] = "writer-b:1"
        assert [0, 2] == await script(keys=keys, args=args)  # another writer's bytes
        assert records == await store.read(sid)
        with pytest.raises(SequenceConflictError):
            await store.append_sealed(sid, records, 0)
    finally:
        await client.aclose()
        await store.close()


# -- R10: schema evolution --------------------------------------------------


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
    assert 1 == len(state.middleware_decisions)
    assert seq + 3 == state.last_seq
    assert None is verify_chain(records, KEY)


# -- R11: stores and keys ---------------------------------------------------


async def test_r11_open_event_store_urls() -> None:
    """R11: URLs pick the adapter without connecting; others are a ValueError."""
    stores = [
        open_event_store(None),
        open_event_store("memory://"),
        open_event_store("redis://127.0.0.1:1/0"),
        open_event_store("rediss://alice:s3cret@cache.example:6380/2?password=x&db=2"),
    ]
    try:
        kinds = [type(s) for s in stores]
        assert [
            MemoryEventStore,
            MemoryEventStore,
            RedisEventStore,
            RedisEventStore,
        ] == kinds
        assert "redis://127.0.0.1:1/0" == stores[2].url
        assert "rediss://cache.example:6380/2?db=2" == stores[3].url
        assert "s3cret" not in stores[3].url
        keyed = open_event_store("redis://127.0.0.1:1/0", chain_key=KEY)
        stores.append(keyed)
        assert KEY == keyed.chain_key
        assert all(isinstance(s, EventStore) for s in stores)
    finally:
        for s in stores:
            await s.close()
    for bad in ("postgres://x", "", "redis:/nohost", "memory"):
        with pytest.raises(ValueError):
            open_event_store(bad)


@pytest.mark.redis
async def test_r11_session_keys_share_a_hash_tag(
    redis_url: str, raw_redis: aioredis.Redis
) -> None:
    """R11: every per-session key carries {session_id}; facts live apart."""
    store = RedisEventStore.from_url(redis_url)
    sessions = [new_session(), "tenant:7/run{x", "ünïcode sess"]
    try:
        for sid in sessions:
            seq = await store.append(sid, turn(1), 0)
            seq = await store.append(sid, decision(1), seq)
            await store.read(sid)
            await store.head(sid)
        await eventually(store.read_facts, lambda f: len(f) >= 3)
        assert sorted(sessions) == sorted(await store.sessions())
    finally:
        await store.close()
    raw_keys: list[bytes] = await raw_redis.keys("*")  # type: ignore[assignment]
    keys = sorted(k.decode() for k in raw_keys)
    shard_key_names = {k for n in range(DEFAULT_SHARDS) for k in shard_keys(n)}
    per_session = [k for k in keys if k not in shard_key_names]
    facts_keys = {shard_keys(shard_of(sid, DEFAULT_SHARDS))[0] for sid in sessions}
    assert facts_keys <= set(keys)
    assert per_session
    for key in per_session:
        owners = [sid for sid in sessions if key.startswith(f"helmlog:{{{sid}}}:")]
        assert 1 == len(owners), key
    assert {f"helmlog:{{{sid}}}:events" for sid in sessions} <= set(per_session)
    assert b"stream" == await raw_redis.type(f"helmlog:{{{sessions[0]}}}:events")
    entries: Any = await raw_redis.xrange(f"helmlog:{{{sessions[0]}}}:events")
    assert [f"0-{n}".encode() for n in range(1, 8)] == [e[0] for e in entries]
    assert {b"seq", b"data", b"hash"} == set(entries[0][1])


@pytest.mark.redis
@pytest.mark.parametrize("protocol", [2, 3])
async def test_r11_store_works_on_either_wire_protocol(
    redis_url: str, protocol: int
) -> None:
    """R11: any client (RESP2 or RESP3, decoding or not) gives the same store."""
    client = aioredis.Redis.from_url(
        redis_url, protocol=protocol, decode_responses=protocol == 2
    )
    store = RedisEventStore(client, url=redis_url)
    sid = new_session()
    try:
        assert redis_url == store.url
        seq = await store.append(sid, turn(1) + decision(1), 0)
        assert (seq, (await store.read(sid))[-1].hash) == await store.head(sid)
        assert [sid] == await store.sessions()
        facts = await eventually(
            lambda: store.read_facts(block_ms=100), lambda f: len(f) >= 1
        )
        assert [(sid, 7)] == [(f.session_id, f.seq) for f in facts]
        assert None is verify_chain(await store.read(sid))
        with pytest.raises(SequenceConflictError):
            await store.append(sid, turn(2), 1)
    finally:
        await store.close()
