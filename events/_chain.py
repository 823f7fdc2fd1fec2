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

Why the stored encoding leaves ``session_id`` out after seq 1: the stream's
key names its session, so repeating the id in every event is about a fifth of
a stream's bytes. Seq 1 keeps it, and every later event chains to seq 1's
hash, so the chain stays bound to its session (a stream copied under another
key still names its own). A ``StoredEvent`` carries the session id its store
read it under, and ``decode`` stamps it back, so every decoded event has the
whole envelope (R12). ``stored_encoding`` is the one definition of those
bytes; ``seal``, the runtime's journal and ``verify_chain`` (over decoded
events) all encode through it.

Why ``StoredEvent`` carries its ``type``: adapters route a record (the index,
the facts projection) by its type, and must not each sniff bytes for it;
``seal`` and the journal know it, and a store reading records sets it through
the codec's ``event_type``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

import msgspec

from ._codec import decode_envelope, decode_event, encode_event, event_type
from ._types import TRANSIENT_TYPES, Event, UnknownEvent

_set = msgspec.structs.force_setattr


class StoredEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One event as a store keeps it: its seq, stored bytes and hash.

    ``type`` is the event's type (set by ``seal``, the journal, and every
    store on read; ``""`` on a record built by hand, see ``type_of``), and
    ``session_id`` the session the store read it under, which ``decode``
    stamps back into an event stored without it.
    """

    seq: int
    data: bytes
    hash: str
    type: str = ""
    session_id: str = ""

    def decode(self) -> Event | UnknownEvent:
        """The typed event (``UnknownEvent`` for a type this reader lacks),
        with the record's ``session_id`` when its bytes leave it out."""
        event = decode_event(self.data)
        if self.session_id and not event.session_id:
            # A fresh object no one else holds: stamping it is not a mutation
            # anyone can observe, and costs no copy.
            _set(event, "session_id", self.session_id)
        return event


def type_of(record: StoredEvent) -> str:
    """A record's type: its ``type``, else read from its bytes (the codec's)."""
    return record.type or event_type(record.data)


def stored_encoding(event: Event) -> bytes:
    """The bytes a stream stores for a stamped event (R3).

    Its JSON encoding with ``replayed`` off and, after seq 1, no
    ``session_id`` (the stream key names the session).
    """
    if event.replayed or (event.seq != 1 and event.session_id):
        event = msgspec.structs.replace(
            event,
            session_id=event.session_id if event.seq == 1 else "",
            replayed=False,
        )
    return encode_event(event)


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

    Returns the stamped events (with ``session_id``) and their stored
    records (``stored_encoding``: ``replayed`` is a delivery mark, never part
    of the record, and only seq 1 names the session in its bytes).
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
        data = stored_encoding(ev)
        h = hash_bytes(data, key)
        stamped.append(ev)
        records.append(
            StoredEvent(seq=seq, data=data, hash=h, type=ev.type, session_id=session_id)
        )
        prev_hash = h
    return stamped, records


def verify_chain(
    records: Iterable[StoredEvent | Event], key: bytes | None = None
) -> int | None:
    """Walk a stream; ``None`` when intact, else the first broken seq.

    A seq out of order, a recomputed hash that differs from the stored one,
    or a ``prev_hash`` that differs from its predecessor's hash breaks the
    chain. Decoded events (not records) are re-encoded as ``seal`` encodes
    them (``stored_encoding``), which verifies only event types this reader
    knows, written by this encoding; a stream written before it (with stored
    facts, defaults and session ids in every event) verifies as records.
    Pass records to verify everything.
    """
    expected_seq = 1
    prev = ""
    for item in records:
        if isinstance(item, StoredEvent):
            data, stored_hash, seq = item.data, item.hash, item.seq
        else:
            data = stored_encoding(item)
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
