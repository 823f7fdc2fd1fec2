"""The record taker: the one kind of watcher a run hands its stored records.

Pattern: a nominal opt-in (an abstract base class, not a protocol): only an
         instance of ``RecordTaker`` is handed an append's ``StoredEvent``s;
         no watcher is switched to records by the attributes it happens to
         have.
Role:    events layer, so that the runtime (whose listeners look for it) and
         the sinks (``OtelProcess`` derives from it) both name it; exported
         from ``helmlog.events.lowlevel`` only, never from the face.
Emits:   nothing.

Laws: G95 (a watcher given to ``.watch()``/``.attach()``/``.on()`` hears facts
and the documented events only, whatever attributes it has; taking records is
an internal, explicit opt-in of the sinks layer), G49 (a record holds the row,
``before``/``after`` values included, so a taker must show each row as its
fact, R4), G84 (a taker's raise changes nothing).

Why a class and not an attribute: an attribute is duck-typed, so a user's
watcher that happened to answer ``on_records`` was handed raw rows (values
included) and no facts. Deriving from a class no guide tells users about is a
decision nobody makes by accident.

Why in ``events`` and not ``runtime``: sinks import ``events`` only (R16), and
a sink must be able to derive from it.
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
