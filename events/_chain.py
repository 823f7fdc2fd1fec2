"""The hash chain: seal events into stored records, verify a stream.

Pattern: a hash-linked log; each record carries the hash of the one before.
Role:    events layer; every store seals through ``seal`` so the chain is
         computed one way, and ``verify_chain`` walks any stored stream.
Emits:   nothing.

Laws: R3 (SHA-256, or HMAC-SHA-256 with a chain key, over the stored encoding,
which includes ``seq`` and ``prev_hash`` and excludes only ``replayed``;
``verify_chain`` names the first broken seq), R10 (unknown types verify too).

Why hashes are computed over the stored bytes, not a re-encoding: stored bytes
are never re-encoded (R10), so a reader with an older or newer schema verifies
the same bytes the writer hashed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

import msgspec

from ._codec import decode_envelope, decode_event, encode_event
from ._types import TRANSIENT_TYPES, Event, UnknownEvent


class StoredEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One event as a store keeps it: its seq, stored bytes and hash."""

    seq: int
    data: bytes
    hash: str

    def decode(self) -> Event | UnknownEvent:
        """The typed event (``UnknownEvent`` for a type this reader lacks)."""
        return decode_event(self.data)


def hash_bytes(data: bytes, key: bytes | None = None) -> str:
    """The chain hash of one stored encoding."""
    if key:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


def seal(
    session_id: str,
    events: Sequence[Event],
    *,
    after_seq: int,
    prev_hash: str,
    key: bytes | None = None,
) -> tuple[list[Event], list[StoredEvent]]:
    """Stamp ``seq``/``prev_hash``/``session_id`` and hash each event in order.

    Returns the stamped events and their stored records. ``replayed`` is
    forced off: it is a delivery mark, never part of the record.
    """
    stamped: list[Event] = []
    records: list[StoredEvent] = []
    seq = after_seq
    for event in events:
        if event.type in TRANSIENT_TYPES:
            raise ValueError(f"'{event.type}' is transient and is never appended (R12)")
        seq += 1
        ev = msgspec.structs.replace(
            event, session_id=session_id, seq=seq, prev_hash=prev_hash, replayed=False
        )
        data = encode_event(ev)
        h = hash_bytes(data, key)
        stamped.append(ev)
        records.append(StoredEvent(seq=seq, data=data, hash=h))
        prev_hash = h
    return stamped, records


def verify_chain(
    records: Iterable[StoredEvent | Event], key: bytes | None = None
) -> int | None:
    """Walk a stream; ``None`` when intact, else the first broken seq.

    A seq out of order, a recomputed hash that differs from the stored one,
    or a ``prev_hash`` that differs from its predecessor's hash breaks the
    chain. Decoded events (not records) are re-encoded, which verifies only
    event types this reader knows; pass records to verify everything.
    """
    expected_seq = 1
    prev = ""
    for item in records:
        if isinstance(item, StoredEvent):
            data, stored_hash, seq = item.data, item.hash, item.seq
        else:
            data = encode_event(msgspec.structs.replace(item, replayed=False))
            stored_hash, seq = hash_bytes(data, key), item.seq or 0
        try:
            _type, body_seq, body_prev = decode_envelope(data)
        except msgspec.DecodeError:
            return seq
        if seq != expected_seq or body_seq != seq:
            return seq
        if hash_bytes(data, key) != stored_hash or body_prev != prev:
            return seq
        prev = stored_hash
        expected_seq += 1
    return None
