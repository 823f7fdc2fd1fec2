"""Indexes that span sessions: open turns and pending asks, sharded.

Pattern: a projection of the session streams (CQRS read model), computed per
         appended batch by a pure scan (``delta_of``) and applied with
         order-insensitive, seq-guarded rules, so it can be rebuilt any time.
Role:    events layer; both stores maintain it after an append; hosts read
         ``open_turns()`` (R7), the CLI ``pending_asks()`` (R18).
Emits:   nothing.

Laws: R7 (the open mark is written before the append: a superset), R11
(sharded keys, ``shard_of`` is sha256 mod N), R18, issue 11 item 4.

Why every rule is guarded by a seq: a late write of an earlier batch may land
after a later one; it can leave an extra mark, never erase an open one.
More: docs/design.md.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Final

import msgspec

from ._chain import StoredEvent, type_of
from ._codec import decode_event
from ._pause_events import PauseRequested, PauseResumed, SessionImported
from ._turn_events import FatalError, TurnEnded, TurnStarted

DEFAULT_SHARDS: Final = 16

TURN_START: Final = TurnStarted.type
# An imported pause (R9) continues a turn another store saw start: it opens
# one here, so failover finds it if its host dies mid-run (R22).
IMPORTED: Final = SessionImported.type
TURN_END: Final = TurnEnded.type
FATAL: Final = FatalError.type
PAUSE_REQUEST: Final = PauseRequested.type
PAUSE_RESUME: Final = PauseResumed.type
# The types that move an index entry; any other record leaves the index alone.
RELEVANT_TYPES: Final = frozenset(
    {TURN_START, IMPORTED, TURN_END, FATAL, PAUSE_REQUEST, PAUSE_RESUME}
)


class PendingAsk(msgspec.Struct, frozen=True, kw_only=True):
    """A pause waiting on a person, as the pending-asks index keeps it (R18)."""

    session_id: str
    seq: int
    kind: str
    tool_name: str
    tool_call_id: str
    middleware: str | None = None
    question: str = ""
    timestamp: int = 0
    # When it is declined by timeout (ms since the epoch), if it has a deadline.
    deadline: int | None = None


class IndexDelta(msgspec.Struct, frozen=True, kw_only=True):
    """What one batch (or a whole stream) does to the indexes.

    Attributes:
        open_at: seq of the batch's last ``agent.turn_start`` (or
            ``session.imported``), else 0.
        close_at: seq of the last ``agent.turn_end``/``error.fatal`` after
            ``open_at``, else 0.
        resolved_at: seq of the last ``pause.resume``, else 0.
        ask: the last ``pause.request`` after ``resolved_at``, else None.
    """

    open_at: int = 0
    close_at: int = 0
    resolved_at: int = 0
    ask: PendingAsk | None = None


_ask_encoder = msgspec.json.Encoder()
_ask_decoder = msgspec.json.Decoder(PendingAsk)


@functools.lru_cache(maxsize=65_536)
def shard_of(session_id: str, shards: int) -> int:
    """The index shard of a session: sha256 of its id mod ``shards`` (stable)."""
    digest = hashlib.sha256(session_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def delta_of(session_id: str, records: Sequence[StoredEvent]) -> IndexDelta | None:
    """The index effect of ``records`` in order; ``None`` when they have none."""
    open_at = close_at = resolved_at = 0
    ask: PendingAsk | None = None
    found = False
    for record in records:
        kind = record.type or type_of(record)
        if kind not in RELEVANT_TYPES:
            continue
        found = True
        if kind in (TURN_START, IMPORTED):
            open_at, close_at = record.seq, 0
        elif kind in (TURN_END, FATAL):
            close_at = record.seq
        elif kind == PAUSE_RESUME:
            resolved_at, ask = record.seq, None
        else:
            ask = ask_of(session_id, record)
    if not found:
        return None
    return IndexDelta(
        open_at=open_at, close_at=close_at, resolved_at=resolved_at, ask=ask
    )


def ask_of(session_id: str, record: StoredEvent) -> PendingAsk:
    """The pending ask a ``pause.request`` record stands for."""
    ev = decode_event(record.data)
    if not isinstance(ev, PauseRequested):
        raise ValueError(f"record seq {record.seq} is not a pause.request")
    return PendingAsk(
        session_id=session_id,
        seq=record.seq,
        kind=ev.kind,
        tool_name=ev.tool_name,
        tool_call_id=ev.tool_call_id,
        middleware=ev.middleware,
        question=ev.question,
        timestamp=ev.timestamp,
        deadline=None if ev.timeout_ms is None else ev.timestamp + ev.timeout_ms,
    )


def encode_ask(ask: PendingAsk) -> bytes:
    """The stored form of an index entry: ``<seq>:<json>`` (Lua reads the seq)."""
    return b"%d:%s" % (ask.seq, _ask_encoder.encode(ask))


def decode_ask(value: bytes) -> PendingAsk:
    """The ``PendingAsk`` of a stored index entry."""
    _seq, _, body = value.partition(b":")
    return _ask_decoder.decode(body)


class MemoryIndex:
    """The same rules as the Redis shard script, on dicts (one process)."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.asks: dict[str, PendingAsk] = {}

    def mark_open(self, session_id: str, seq: int) -> None:
        """Before an append holding a turn start: mark the turn open (max seq)."""
        if self.open.get(session_id, 0) < seq:
            self.open[session_id] = seq

    def apply(self, session_id: str, delta: IndexDelta) -> None:
        """After an append: resolve, add the ask, then close (seq-guarded)."""
        if delta.resolved_at:
            current = self.asks.get(session_id)
            if current is not None and current.seq < delta.resolved_at:
                del self.asks[session_id]
        if delta.ask is not None:
            current = self.asks.get(session_id)
            if current is None or current.seq < delta.ask.seq:
                self.asks[session_id] = delta.ask
        if delta.close_at and session_id not in self.asks:
            mark = self.open.get(session_id)
            if mark is not None and mark < delta.close_at:
                del self.open[session_id]

    def replace(self, session_id: str, delta: IndexDelta | None) -> None:
        """Set a session's entries to what its whole stream says (``reindex``)."""
        self.open.pop(session_id, None)
        self.asks.pop(session_id, None)
        if delta is None:
            return
        if delta.ask is not None:
            self.asks[session_id] = delta.ask
        if delta.open_at and (not delta.close_at or delta.ask is not None):
            self.open[session_id] = delta.open_at
