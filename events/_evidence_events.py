"""The signed head: a session's head, signed, recorded in its own stream.

Pattern: a frozen, tagged msgspec Struct on the shared envelope holding one
         C2SP signed note (``helmlog_evidence.SessionHead`` text + signature).
Role:    events layer; the journal appends one after a batch that ends a turn
         or records a pause, when its store has a signing key; the store
         appends the note's text to its log of heads; ``fold`` ignores it.
Emits:   nothing; this is the emission.

Laws: R13, R10 (an older reader decodes it as unknown and skips it), issue 30
item 1. Why the note whole and not its fields: the signature is over the
note's bytes, so the record keeps exactly what was signed.
"""

from __future__ import annotations

from typing import ClassVar

from ._envelope import Event


class HeadSigned(Event, tag="session.head_signed", frozen=True):
    """The session's head at ``seq - 1`` (or earlier), signed: a signed note
    whose text is a ``helmlog/session-head/v1`` head (docs/design.md)."""

    type: ClassVar[str] = "session.head_signed"
    note: str
