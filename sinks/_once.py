"""Idempotency by ``(session_id, seq)``: what every sink shares, in bounded memory.

Pattern: a seen-set keyed by an event's place in its stream, per session:
         the seqs of each session's latest ``WINDOW`` events, for the
         ``SESSIONS`` sessions touched last.
Role:    sinks layer; each sink asks ``first(event)`` (or ``seen``/``done``
         around a write that can fail) before acting.

Laws: R4 (a fact delivered twice has the effect of one), R12 (a transient
token has no seq and always passes).
Why bounded, and why the forgotten is delivered again, not skipped: one key
per event grew without end on a busy host; redeliveries come close behind,
and a duplicate can be told apart by its key, a lost event cannot be found.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

WINDOW = 4096  # seqs of one session remembered back from its highest
SESSIONS = 10_000  # sessions remembered, the least recently touched dropped


class _Session:
    """The seqs seen of one session, back to ``high - window``."""

    __slots__ = ("high", "seqs")

    def __init__(self) -> None:
        self.high = -1
        self.seqs: set[int] = set()


class SeenOnce:
    """Remembers which recorded events a sink has already handled.

    Args:
        window: how far back from a session's highest seq its seqs are kept.
        sessions: how many sessions are kept, the least recently touched
            forgotten first.
    """

    __slots__ = ("_last", "_last_id", "_most", "_sessions", "_window")

    def __init__(self, *, window: int = WINDOW, sessions: int = SESSIONS) -> None:
        # A touched session is moved to the end, so the first key is the least
        # recently touched. An OrderedDict, not a dict: a dict's first key is
        # found by walking every entry deleted since its last resize (~8 us a
        # new session at 10,000 of them; issue 29).
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._window = window
        self._most = sessions
        # The session touched last, most events' session (a turn's run in a
        # row): found without moving it.
        self._last_id: str | None = None
        self._last = _Session()

    def mark(self, session_id: str, seq: int) -> None:
        """Remember an event handled before this sink started (e.g. on disk)."""
        self._add(self._session(session_id), seq)

    def first(self, event: Any) -> bool:
        """``True`` the first time a recorded event is seen (and always for a
        transient one); ``False`` for a repeat."""
        seq = getattr(event, "seq", None)
        if seq is None:
            return True
        session_id = event.session_id
        # Inline for the common case, the session of the event before.
        held = self._last if session_id == self._last_id else self._session(session_id)
        seqs = held.seqs
        if seq in seqs:
            return False
        seqs.add(seq)
        if seq > held.high:
            held.high = seq
        if len(seqs) > 2 * self._window:
            self._trim(held)
        return True

    def fresh(self, session_id: str, events: list[Any]) -> list[Any]:
        """Of one session's recorded events (each with its seq), those not
        seen before, in order; all of them are remembered as seen.

        ``first`` for a whole append at once: one session lookup, and the set
        checked inline, for a sink fed appends rather than single events.
        """
        held = self._session(session_id)
        seqs = held.seqs
        kept = []
        high = held.high
        for event in events:
            seq = event.seq
            if seq in seqs:
                continue
            seqs.add(seq)
            kept.append(event)
            if seq > high:
                high = seq
        held.high = high
        if len(seqs) > 2 * self._window:
            self._trim(held)
        return kept

    def seen(self, event: Any) -> bool:
        """Whether a recorded event was handled already (a transient one never was)."""
        seq = getattr(event, "seq", None)
        if seq is None:
            return False
        held = self._sessions.get(event.session_id)
        return held is not None and seq in held.seqs

    def done(self, event: Any) -> None:
        """Remember a recorded event as handled, once its effect took place."""
        seq = getattr(event, "seq", None)
        if seq is not None:
            self._add(self._session(event.session_id), seq)

    def __len__(self) -> int:
        """The seqs remembered, over every session kept."""
        return sum(len(held.seqs) for held in self._sessions.values())

    def _session(self, session_id: str) -> _Session:
        if session_id == self._last_id:
            return self._last
        sessions = self._sessions
        held = sessions.get(session_id)
        if held is None:
            held = _Session()
            if len(sessions) >= self._most:
                sessions.popitem(last=False)
            sessions[session_id] = held
        else:
            sessions.move_to_end(session_id)
        self._last_id, self._last = session_id, held
        return held

    def _add(self, held: _Session, seq: int) -> None:
        seqs = held.seqs
        seqs.add(seq)
        if seq > held.high:
            held.high = seq
        if len(seqs) > 2 * self._window:
            self._trim(held)

    def _trim(self, held: _Session) -> None:
        # At twice the window, so a trim's cost is spread over a window's adds.
        floor = held.high - self._window
        held.seqs = {kept for kept in held.seqs if kept > floor}
