"""Decision facts as projections of their rows: what watchers see of a stream.

Pattern: a projection (eventsourcing's notification), computed at delivery
         and never stored beside its source.
Role:    events layer; the one rule every producer of facts applies (the
         journal's delivery, ``replay``, the stores' facts, ``tail``).
Emits:   nothing; it computes what others deliver.

Laws: R4 (a fact is its row's projection, published with the row's
``session_id`` and ``seq``), G49 (``fact_of`` copies value-free fields only).

The rule: watchers see every event except ``decision.filed``, replaced by its
fact; an older stream's stored fact is delivered as stored, so a row never
has two facts. More: docs/design.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import msgspec

from ._chain import StoredEvent, type_of
from ._codec import MAX_DEPTH, decode_event, encode_event, too_deep
from ._decision import MiddlewareDecision
from ._decision_events import DecisionFiled, MiddlewareDecisionEvent, fact_for
from ._errors import EventDecodeError

FILED_TYPE = DecisionFiled.type
FACT_TYPE = MiddlewareDecisionEvent.type

E = TypeVar("E")

_set = msgspec.structs.force_setattr


def fact_of(filed: DecisionFiled) -> MiddlewareDecisionEvent:
    """The value-free fact of a filed row, with the row's envelope (G49, R4).

    It carries the row's ``session_id``, ``seq``, ``timestamp`` and
    ``prev_hash`` (and its ``replayed`` mark), so a watcher keyed by
    ``(session_id, seq)`` sees the fact where the row is.
    """
    # One construction, the envelope with the fields: it runs for every row
    # an append hands to its watchers.
    return fact_for(
        filed.row,
        session_id=filed.session_id,
        seq=filed.seq,
        timestamp=filed.timestamp,
        prev_hash=filed.prev_hash,
        replayed=filed.replayed,
    )


def watched(events: Iterable[E]) -> Iterator[E | MiddlewareDecisionEvent]:
    """What watchers see of ``events``, in order: each row as its fact.

    Every event but ``decision.filed`` is yielded as given; a row is
    replaced by ``fact_of`` it, unless the event after it is a stored
    ``middleware.decision`` (a stream written before facts were projections),
    which is then yielded as stored: one fact per row either way.
    """
    row: DecisionFiled | None = None
    for event in events:
        if row is not None:
            if not isinstance(event, MiddlewareDecisionEvent):
                yield fact_of(row)
            row = None
        if isinstance(event, DecisionFiled):
            row = event
            continue
        yield event
    if row is not None:
        yield fact_of(row)


def fact_records(
    session_id: str,
    records: Sequence[StoredEvent],
    events: Sequence[object] | None = None,
) -> list[tuple[int, bytes]]:
    """``(seq, encoded fact)`` of every decision in ``records``, by ``watched``'s rule.

    A row's fact is encoded from its projection (never the row's bytes, so no
    ``before``/``after``); a stored fact of an older stream is published as
    stored (with the session id put back, if its bytes lack it). ``events``,
    when given, are the stamped events ``seal`` made the records from, one
    per record: a writer that holds them projects its rows without decoding
    the bytes it has just encoded (a test holds both ways byte-equal).
    Without them, a row's value-free fields are read from its bytes and
    its values are skipped, never decoded (``_row_fact``).
    """
    kinds = [type_of(record) for record in records]
    if FILED_TYPE not in kinds and FACT_TYPE not in kinds:
        return []
    out: list[tuple[int, bytes]] = []
    last = len(records) - 1
    for i, record in enumerate(records):
        kind = kinds[i]
        if kind == FACT_TYPE:
            out.append((record.seq, _stored_fact(session_id, record)))
        elif kind == FILED_TYPE:
            if i < last and kinds[i + 1] == FACT_TYPE:
                continue  # an older stream: its stored fact follows
            if events is None:
                fact = _row_fact(session_id, record)
                if fact is not None:
                    out.append((record.seq, fact))
                continue
            filed = events[i]
            if isinstance(filed, DecisionFiled):
                out.append((record.seq, encode_event(fact_of(filed))))
    return out


def fact_sources(records: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The records of one append whose facts are published, in order.

    By ``watched``'s rule: each row (``decision.filed``) not followed by its
    stored fact, and each stored ``middleware.decision`` (an older stream's);
    ``fact_bytes`` gives each one's published fact, later if need be: a fact
    is a projection of bytes that never change (R4, R10).
    """
    out: list[StoredEvent] = []
    # One pass: a row waits until the next record shows whether its stored
    # fact follows (an older stream), then goes out or is dropped.
    row: StoredEvent | None = None
    for record in records:
        # ``type_of``, with a store's record (its type set) read without a call.
        kind = record.type or type_of(record)
        if row is not None:
            if kind != FACT_TYPE:
                out.append(row)
            row = None
        if kind == FILED_TYPE:
            row = record
        elif kind == FACT_TYPE:
            out.append(record)
    if row is not None:
        out.append(row)
    return out


def fact_bytes(session_id: str, record: StoredEvent) -> bytes | None:
    """The published fact of one of ``fact_sources``' records, as
    ``fact_records`` gives it; ``None`` for a row a reader could not decode."""
    if type_of(record) == FACT_TYPE:
        return _stored_fact(session_id, record)
    return _row_fact(session_id, record)


class _FiledFields(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A ``decision.filed`` record read for its fact: its type, envelope and
    row (``MiddlewareDecision`` itself, so it accepts exactly what the row's
    decoder does), without decoding the event around them."""

    type: str
    row: MiddlewareDecision
    session_id: str = ""
    seq: int | None = None
    timestamp: int = 0
    prev_hash: str = ""
    replayed: bool = False


_filed_decoder = msgspec.json.Decoder(_FiledFields)


def _row_fact(session_id: str, record: StoredEvent) -> bytes | None:
    """The encoded fact of a stored row, read straight into the fact's fields
    (no event, row or fact object in between), or ``None`` for bytes a reader
    could not decode as a row (verification names it)."""
    data = record.data
    # The depth bound and the errors are ``decode_event``'s (issue 8 item 7).
    if len(data) > MAX_DEPTH and too_deep(data):
        return None
    try:
        filed = _filed_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if filed.type != FILED_TYPE:
        return None
    return encode_event(
        fact_for(
            filed.row,
            session_id=filed.session_id or session_id,
            seq=filed.seq,
            timestamp=filed.timestamp,
            prev_hash=filed.prev_hash,
            replayed=filed.replayed,
        )
    )


def _decoded(session_id: str, record: StoredEvent) -> object:
    """The record's event with its session id, or ``None`` if it is damaged."""
    try:
        event = decode_event(record.data)
    except EventDecodeError:
        return None  # a damaged record: verification names its seq
    if not event.session_id:
        _set(event, "session_id", session_id)  # fresh: nobody else holds it
    return event


def _stored_fact(session_id: str, record: StoredEvent) -> bytes:
    """A stored fact as published: its bytes, which name the session in an
    older writer's stream; one stored without its session id is encoded with
    it, so every published fact says whose it is."""
    # A key in JSON bytes: inside a string value its quotes would be escaped.
    if record.seq == 1 or b'"session_id"' in record.data:
        return record.data
    event = _decoded(session_id, record)
    return (
        encode_event(event)
        if isinstance(event, MiddlewareDecisionEvent)
        else record.data
    )
