"""The record taker: the one kind of watcher a run hands its stored records.

Pattern: a nominal opt-in (an abstract base class, not a protocol): only a
         ``RecordTaker`` instance is handed an append's ``StoredEvent``s.
Role:    events layer, so the runtime and the sinks (``OtelProcess``) both
         name it; exported from ``helmlog.events.lowlevel`` only.
Emits:   nothing.

Laws: G95 (a watcher hears facts and documented events only, whatever
attributes it has), G49 (a taker must show each row as its fact, R4), G84.

Why a class and not an attribute: duck typing once handed a user's watcher
raw rows; deriving from an undocumented class is never an accident. It
lives in ``events`` because sinks import ``events`` only (R16).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ._chain import StoredEvent


class RecordTaker(ABC):
    """A sink handed each append's stored records instead of its events.

    For sinks of this library that forward what happened rather than read it
    (``OtelProcess``): the run hands it each append's ``StoredEvent``s in one
    plain, inline call, and no ``on_event`` for what was appended; transient
    tokens, and every event of a run that serves a redacted form, still come
    through ``on_event``. The list is the append's own and the same for every
    taker: keep it, never change it. What it shows of a row is its fact (R4).
    """

    @abstractmethod
    def on_event(self, event: Any) -> Any:
        """Receive one event (a token, or a served event of a redacting run)."""

    @abstractmethod
    def on_records(self, records: list[StoredEvent]) -> None:
        """Receive one append's stored records, in seq order (plain, not async)."""
