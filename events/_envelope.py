"""The envelope every event carries, and the record of a type this reader lacks.

Pattern: one msgspec base Struct (``tag_field="type"``) that every event type
         subclasses, so each shares the same envelope fields and encoding
         options; ``UnknownEvent`` mirrors the envelope without being an event.
Role:    events layer; the event families (``_turn_events.py``,
         ``_pause_events.py``, ``_decision_events.py``, ``_proxy_events.py``)
         build on ``Event``, and ``_types.py`` gathers them into the union.
Emits:   nothing; these are the emissions.

Laws: R12 (the envelope: ``session_id``, ``seq``, ``timestamp``,
``prev_hash``, ``replayed``), R10 (every field added later gets a default;
unknown fields are ignored, never ``forbid_unknown_fields``; an event whose
``type`` this reader does not know decodes to ``UnknownEvent``, is reported
and skipped).

Why ``gc=False``: a stream is read as tens of thousands of small immutable
records; untracked by the cycle collector, they decode without triggering
collections. They cannot form cycles: they are frozen and hold only values.

Why ``omit_defaults``: a field at its default is not written, so the stored
encoding holds what an event says and no more (``replayed: false``, an empty
``usage``, ``prev_hash: ""`` at seq 1); a reader fills the defaults back in
(R10: every field has one), and the bytes hashed are the bytes stored (R3).
Stores also leave ``session_id`` out of every event after seq 1 (the stream
key names the session; seq 1 keeps it, so the chain is bound to its session)
and readers stamp it back (``StoredEvent.decode``).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec


class Event(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    gc=False,
    omit_defaults=True,
):
    """The envelope every event carries (R12)."""

    type: ClassVar[str]
    session_id: str = ""
    seq: int | None = None
    timestamp: int = 0
    prev_hash: str = ""
    replayed: bool = False


class UnknownEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event whose ``type`` this reader does not know (R10): reported, skipped."""

    type: str
    session_id: str = ""
    seq: int | None = None
    timestamp: int = 0
    prev_hash: str = ""
    replayed: bool = False
    data: bytes = b""
