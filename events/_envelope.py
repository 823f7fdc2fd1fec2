"""The envelope every event carries, and the record of a type this reader lacks.

Pattern: one msgspec base Struct (``tag_field="type"``) every event type
         subclasses; ``UnknownEvent`` mirrors the envelope without being one.
Role:    events layer; the event families build on ``Event``, and
         ``_types.py`` gathers them into the union.
Emits:   nothing; these are the emissions.

Laws: R12 (the envelope fields), R10 (every later field has a default;
unknown fields are ignored; an unknown ``type`` decodes to ``UnknownEvent``).

Why ``gc=False`` and ``omit_defaults``: streams are many small frozen
records that form no cycles, and the bytes stored (and hashed, R3) hold what
an event says and no more. More: docs/design.md.
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
