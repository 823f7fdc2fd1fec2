"""The hash chain: seal events into stored records, verify a stream and its head.

Pattern: a hash-linked log; each record carries the hash of the one before,
         and a head record names where the stream ends.
Role:    events layer; every store seals through ``seal`` (a journal, one
         event at a time, through ``seal_event``); one walker
         (``_walk``) verifies any stream: ``verify_chain`` reports the first
         broken position, ``verify_records`` raises ``StreamTamperedError``.
Emits:   nothing.

Laws: R3 (SHA-256, or HMAC with a chain key, over the stored encoding; the
first broken position is the seq it should hold), R10, R19 (the head record).

Why over the stored bytes: they are never re-encoded (R10), so any schema
version verifies what the writer hashed. More: docs/design.md.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ._codec import (
    _EVENT_SEALERS,
    _NOT_SHOWN,
    CONTAINER_FIELDS,
    _json_encoder,
    canonical_json,
    decode_envelope,
    decode_event,
    encode_event,
    event_type,
    redecode_event,
)
from ._envelope import Event, UnknownEvent
from ._errors import StreamTamperedError
from ._types import TRANSIENT_TYPES

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

    def detached(self, event: Event | UnknownEvent) -> Event | UnknownEvent:
        """``event`` (this record, decoded) for a reader that must share no
        mutable container with whoever holds ``event``.

        ``event`` itself when its container fields (``CONTAINER_FIELDS``: a
        tool's arguments, a message) are all empty, since a frozen event of
        strings and numbers cannot be changed through; else a fresh decode of
        these bytes, which ``event``'s decode already checked.
        """
        for name in CONTAINER_FIELDS.get(type(event), ()):
            if getattr(event, name):
                copy = redecode_event(self.data)
                if self.session_id and not copy.session_id:
                    _set(copy, "session_id", self.session_id)
                return copy
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
    """The chain hash of one stored encoding: SHA-256, or HMAC-SHA-256 under
    ``key`` (RFC 2104)."""
    if key:
        inner, outer = _pads(key)
        hashed = inner.copy()
        hashed.update(data)
        mac = outer.copy()
        mac.update(hashed.digest())
        hex_mac: str = mac.hexdigest()
        return hex_mac
    return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=64)
def _pads(key: bytes) -> tuple[Any, Any]:
    """SHA-256 states after the key's inner and outer pads (RFC 2104).

    Why by hand: every append and every verification hashes each record, and
    ``hmac.new`` re-keys per call — about 2.9 µs against 0.8 µs for copying
    these two states (``bench/ledger.py``, ``verify_cost``). The result is
    HMAC-SHA-256, byte for byte (a property test holds it to ``hmac``).
    """
    block = 64  # SHA-256's block size
    if len(key) > block:
        key = hashlib.sha256(key).digest()
    key = key.ljust(block, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))
    return inner, outer


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


_encode = _json_encoder.encode
_sha256 = hashlib.sha256
_replace = msgspec.structs.replace  # a name, not two attribute reads per event
# Past this many bytes the C decoder copies a record faster than
# ``own_values`` walks it in Python.
_OWN_MAX_BYTES = 4_096


def seal_event(
    event: Event,
    session_id: str,
    seq: int,
    prev_hash: str,
    timestamp: int,
    key: bytes | None = None,
) -> tuple[StoredEvent, Event | UnknownEvent]:
    """Seal one event as ``seq`` of a stream after ``prev_hash``: its record,
    and the event a reader decodes from that record.

    The record is ``seal``'s: ``stored_encoding`` bytes (the session id only
    at seq 1, never ``replayed``), hashed under ``key`` (R3, R10). The event is
    ``record.decode()``'s, equal and as typed, with the session id and its own
    containers (G8), made without decoding the bytes just encoded when
    ``own_values`` shows the decode would give it back (issue 29 item 3); a
    large record, or a value it cannot vouch for, is decoded as before, with
    the decoder's errors (``EventDecodeError``).

    Its arguments may be passed by position (the journal does, once per
    event: bench/turns.py).
    """
    stamped = _replace(
        event,
        session_id=session_id if seq == 1 else "",
        seq=seq,
        prev_hash=prev_hash,
        timestamp=timestamp,
        replayed=False,
    )
    # Invariant: ``stamped`` already is its stored form (``stored_encoding``
    # would encode it as it is); encoded and hashed inline (one call each).
    data = _encode(stamped)
    record = StoredEvent(
        seq=seq,
        data=data,
        hash=hash_bytes(data, key) if key else _sha256(data).hexdigest(),
        type=stamped.type,
        session_id=session_id,
    )
    # ``stamped`` is fresh: no one else holds it to see it made whole, so
    # ``own_values``'s owner sets its owned copies and session id on it
    # itself (``_EVENT_SEALERS``); one it refuses is dropped, partly set.
    sealer = _EVENT_SEALERS.get(type(stamped))
    if (
        sealer is not None
        and len(data) <= _OWN_MAX_BYTES
        and sealer(stamped, session_id) is not _NOT_SHOWN
    ):
        return record, stamped
    return record, record.decode()


class StreamHead(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A session's head record: the seq and hash its stream ends at (R19).

    Written by the same atomic step as each append. ``mac`` is the HMAC of
    ``(session_id, seq, hash)`` under a key derived from the chain key, and
    ``None`` without a chain key.
    """

    seq: int
    hash: str
    mac: str | None = None


_HEAD_KEY_LABEL = b"helmlog/v1/head-key"


@functools.lru_cache(maxsize=64)
def _derived(key: bytes, label: bytes) -> bytes:
    """A key for one purpose, derived from the chain key (HMAC as a KDF)."""
    return hmac.new(key, label, hashlib.sha256).digest()


def _head_mac(key: bytes, session_id: str, seq: int, last_hash: str) -> str:
    body = canonical_json({"session_id": session_id, "seq": seq, "hash": last_hash})
    return hmac.new(_derived(key, _HEAD_KEY_LABEL), body, hashlib.sha256).hexdigest()


def head_of(
    session_id: str, seq: int, last_hash: str, key: bytes | None = None
) -> StreamHead:
    """The head record of a stream ending at ``(seq, last_hash)``."""
    mac = _head_mac(key, session_id, seq, last_hash) if key else None
    return StreamHead(seq=seq, hash=last_hash, mac=mac)


_head_encoder = msgspec.json.Encoder()
_head_decoder = msgspec.json.Decoder(StreamHead)


def encode_head(head: StreamHead) -> bytes:
    """A head record's stored bytes (compact JSON)."""
    return _head_encoder.encode(head)


def decode_head(data: bytes) -> StreamHead | None:
    """A stored head record; ``None`` when the bytes are not one."""
    try:
        return _head_decoder.decode(data)
    except msgspec.DecodeError:
        return None


# A break: (the first bad position, named by the seq it should hold; the
# reason, as ``StreamTamperedError.reason``).
Break = tuple[int, str]


def _walk(
    records: Iterable[StoredEvent | Event],
    key: bytes | None,
    after: tuple[int, str],
    head: StreamHead | None,
    session_id: str | None,
    decoded: list[Event | UnknownEvent] | None = None,
) -> tuple[Break | None, int, str]:
    """The one walker: the first break, and the ``(seq, hash)`` walked to.

    Starts after ``after`` (a position already verified); checks each record's
    seq order, its recomputed hash and its ``prev_hash``, then ``head``: its
    MAC under ``key``, that the stream reaches its seq (a cut tail is
    ``"truncated"`` at the first missing seq, no stream at all ``"deleted"``),
    and that the record at its seq has its hash. With ``decoded``, each record
    is decoded whole (once, for the check and for the caller's fold) and its
    event appended there; else only its envelope is read.
    """
    last_seq, prev = after
    head_seq = head.seq if head is not None else -1
    at_head = prev if head_seq == last_seq else None
    needs_session = session_id is None and head is not None and bool(key)
    keep = decoded.append if decoded is not None else None
    digest = hash_bytes  # a local: this loop runs once per record read
    for item in records:
        if isinstance(item, StoredEvent):
            data, stored_hash, seq = item.data, item.hash, item.seq
        else:
            data = stored_encoding(item)
            stored_hash, seq = digest(data, key), item.seq or 0
        if needs_session:
            session_id = _session_of(item)
            needs_session = False
        try:
            if keep is None:
                _type, body_seq, body_prev = decode_envelope(data)
            else:
                # ``decode`` stamps the session id the store read it under.
                event = (
                    item.decode()
                    if isinstance(item, StoredEvent)
                    else decode_event(data)
                )
                body_seq, body_prev = event.seq, event.prev_hash
        except msgspec.DecodeError:
            return (last_seq + 1, "malformed"), last_seq, prev
        # Invariant: a break names the position, the seq it should hold, never
        # the seq a record claims (an attacker's choice: a deleted seq 2 is
        # reported at 2, not at the 3 that follows it).
        if seq != last_seq + 1 or body_seq != seq:
            return (last_seq + 1, "order"), last_seq, prev
        if digest(data, key) != stored_hash:
            return (seq, "hash"), last_seq, prev
        if body_prev != prev:
            return (seq, "chain"), last_seq, prev
        last_seq, prev = seq, stored_hash
        if keep is not None:
            keep(event)
        if seq == head_seq:
            at_head = stored_hash
    if head is None:
        return None, last_seq, prev
    if key and session_id is not None:
        expected = _head_mac(key, session_id, head.seq, head.hash)
        if head.mac is None or not hmac.compare_digest(
            head.mac.encode(), expected.encode()
        ):
            return (head.seq, "head"), last_seq, prev
    if last_seq == 0 and head.seq > 0:
        return (1, "deleted"), last_seq, prev
    if head.seq > last_seq:
        return (last_seq + 1, "truncated"), last_seq, prev
    if at_head is not None and at_head != head.hash:
        return (head.seq, "head"), last_seq, prev
    return None, last_seq, prev


def _session_of(item: StoredEvent | Event) -> str | None:
    if isinstance(item, StoredEvent):
        if item.session_id:
            return item.session_id
        try:
            return decode_event(item.data).session_id or None
        except msgspec.DecodeError:
            return None
    return item.session_id or None


def verify_chain(
    records: Iterable[StoredEvent | Event],
    key: bytes | None = None,
    head: StreamHead | None = None,
    *,
    session_id: str | None = None,
) -> int | None:
    """Walk a stream; ``None`` when intact, else the first broken position.

    The position is named by the seq it should hold (the walk's count), not
    by the seq of the record found there: a stream missing seq 2 breaks at
    2, a swap of 2 and 3 at 2, a record renumbered to 9 at its place. A seq
    out of order, a recomputed hash that differs from the stored one,
    or a ``prev_hash`` that differs from its predecessor's hash breaks the
    chain. With ``head`` (the store's ``read_head``), a stream that ends
    before its head's seq breaks at the first missing seq (1 when the stream
    is gone), and a head whose MAC (under ``key``, for ``session_id``, by
    default the first record's) or hash does not verify breaks at its seq.
    Decoded events (not records) are re-encoded as ``seal`` encodes them
    (``stored_encoding``), which verifies only event types this reader knows,
    written by this encoding; a stream written before it (with stored facts,
    defaults and session ids in every event) verifies as records. Pass
    records to verify everything.
    """
    broken, _seq, _hash = _walk(records, key, (0, ""), head, session_id)
    return None if broken is None else broken[0]


def verify_records(
    session_id: str,
    records: Sequence[StoredEvent],
    key: bytes | None = None,
    *,
    after: tuple[int, str] = (0, ""),
    head: StreamHead | None = None,
    decoded: list[Event | UnknownEvent] | None = None,
) -> tuple[int, str]:
    """Verify records read after ``after``, a ``(seq, hash)`` already verified.

    Returns the ``(seq, hash)`` they end at, the position to verify the next
    read after (``after`` itself when there are none), so a reader never
    verifies a record twice (R19). With ``decoded`` (a list), the verified
    records' events are appended to it, each decoded once: what a reader
    folds is what was checked.

    Raises:
        StreamTamperedError: at the first bad position (the seq it should
            hold), with its reason; a reader must then act on nothing it
            read.
    """
    broken, seq, last_hash = _walk(records, key, after, head, session_id, decoded)
    if broken is not None:
        raise StreamTamperedError(
            session_id=session_id, seq=broken[0], reason=broken[1]
        )
    return seq, last_hash
