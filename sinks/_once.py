"""Idempotency by ``(session_id, seq)``: what every sink shares.

Pattern: a seen-set keyed by an event's place in its stream.
Role:    sinks layer; each sink asks ``first(event)`` before acting.
Emits:   nothing.

Laws: R4 (every sink is idempotent by ``(session_id, seq)``: a fact delivered
twice — a redelivery, a second replay — has the effect of one).

Why transient events always pass: a ``stream.token`` has no seq (R12), so it
has no place to be seen at; it is delivered once by construction.

Why a sink that can fail asks ``seen`` and marks ``done`` only after its write:
an event whose write failed must not count as written, or its redelivery (a
``FactsConsumer`` retry, a second replay) would be skipped and the event lost.
"""

from __future__ import annotations

from typing import Any


class SeenOnce:
    """Remembers which recorded events a sink has already handled."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[tuple[str, int]] = set()

    def mark(self, session_id: str, seq: int) -> None:
        """Remember an event handled before this sink started (e.g. on disk)."""
        self._seen.add((session_id, seq))

    def first(self, event: Any) -> bool:
        """``True`` the first time a recorded event is seen (and always for a
        transient one); ``False`` for a repeat."""
        seq = getattr(event, "seq", None)
        if seq is None:
            return True
        key = (event.session_id, seq)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def seen(self, event: Any) -> bool:
        """Whether a recorded event was handled already (a transient one never was)."""
        seq = getattr(event, "seq", None)
        return seq is not None and (event.session_id, seq) in self._seen

    def done(self, event: Any) -> None:
        """Remember a recorded event as handled, once its effect took place."""
        seq = getattr(event, "seq", None)
        if seq is not None:
            self._seen.add((event.session_id, seq))
