"""The chain contract: hashes, keyed chains and head records on any adapter.

Pattern: a contract suite (eventsourcing-style): module-level tests taking a
         ``store``/``make_store`` fixture, run against any adapter of the
         ``EventStore`` port (``helmlog.events.testing``'s header says how).
Role:    events layer, shipped tests; this repository runs them on memory,
         Redis and Redis Cluster (``tests/contracts/test_store_contract.py``).
Emits:   nothing.

Laws: R3 (the chain verifies and names its first broken seq; under a chain
key, recomputed SHA-256 hashes are caught), R19 (every append writes the
head record; against it, a cut tail, a deleted stream and a forged head are
reported).

Why the tampering tests work on copies of what ``read`` returned: the store
must hand back exactly what it keeps, so tampering with its output is
tampering with the record as a verifier sees it, without needing a
store-specific back door.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog.events import (
    Event,
    EventStore,
    Message,
    MessageCommitted,
    SequenceConflictError,
    StoredEvent,
    StreamTamperedError,
    hash_bytes,
    read_verified,
    seal,
    verify_chain,
    verify_records,
)
from helmlog.events._chain import head_of

from .support import KEY, StoreFactory, decision, new_session, turn

__all__ = [
    "test_r3_chain_verifies_and_names_first_broken_seq",
    "test_r3_keyed_chain_detects_recomputed_hashes",
    "test_r19_every_append_writes_the_head_record",
    "test_r19_verify_chain_names_a_cut_tail_a_deleted_stream_and_a_bad_head",
]


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
