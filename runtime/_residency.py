"""The sessions an agent keeps resident: a bounded, least-recently-used cache.

Pattern: activation collection (Orleans; Akka calls it passivation): an
         ordered map from session id to hosted session, oldest use first,
         that drops sessions idle longer than ``idle_s`` and keeps at most
         ``max_resident``.
Role:    runtime layer; the agent's session cache (``Hosting``,
         ``_hosting.py``) admits a session here when it activates or creates
         one, and marks each operation's start (``touch``) and end
         (``release``); a host calls ``evict_idle``/``forget`` through the
         agent.
Emits:   nothing: dropping a session is not a state change of the session.

Laws: R21 (at most ``max_resident`` sessions; those idle longer than
``idle_s`` are dropped; a session in the middle of an operation is never
dropped), R6 (a dropped session re-activates from its stream on next use,
silently), R1 (the cache is only a cache: dropping one loses nothing).

Why idleness is measured on the agent's clock: tests drive it with a fake
clock, and the stream's timestamps come from the same clock.

Why a session with operations in flight is never dropped, even past the cap:
an operation holds or awaits the session's lock and its journal; a second
activation beside it would fold a second cache of one stream and two writers
would race on it. The cap holds again once those operations end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ._session import Session


class Residency:
    """The resident sessions of one agent, least recently used first."""

    __slots__ = ("clock", "idle_ms", "max_resident", "sessions")

    def __init__(
        self, *, max_resident: int, idle_s: float, clock: Callable[[], int]
    ) -> None:
        self.max_resident = max_resident
        self.idle_ms = idle_s * 1000.0
        self.clock = clock
        # Invariant: ordered by last use (start or end of an operation);
        # last_used is the clock at the end of the last one (or admission).
        self.sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: str) -> Session | None:
        """The resident session, if any (not a use: the order is unchanged)."""
        return self.sessions.get(session_id)

    def admit(self, session: Session) -> None:
        """Make ``session`` resident (replacing any other of its id), then
        collect idle sessions and hold the cap, never dropping ``session``."""
        sid = session.session_id
        self.sessions[sid] = session
        self.sessions.move_to_end(sid)
        session.last_used = now = self.clock()
        self._collect(now, keep=session)

    def touch(self, session: Session) -> None:
        """Mark the start of an operation: ``session`` becomes the most
        recently used. No clock reading: a busy session is never idle."""
        sid = session.session_id
        if self.sessions.get(sid) is session:
            self.sessions.move_to_end(sid)

    def release(self, session: Session) -> None:
        """Mark the end of an operation on ``session``; hold the cap again
        (it may have been exceeded while every other session was busy)."""
        self.touch(session)
        session.last_used = now = self.clock()
        self._collect(now, keep=session)

    def discard(self, session: Session) -> None:
        """Drop ``session`` if it is the resident one of its id."""
        sid = session.session_id
        if self.sessions.get(sid) is session:
            del self.sessions[sid]

    def forget(self, session_id: str) -> bool:
        """Drop one session unless an operation is in flight on it."""
        session = self.sessions.get(session_id)
        if session is None or session.busy:
            return False
        del self.sessions[session_id]
        return True

    def evict_idle(self, now: int | None = None) -> int:
        """Drop every session idle longer than ``idle_s``; return how many."""
        at = self.clock() if now is None else now
        idle = [
            sid
            for sid, s in self.sessions.items()
            if not s.busy and at - s.last_used > self.idle_ms
        ]
        for sid in idle:
            del self.sessions[sid]
        return len(idle)

    def _collect(self, now: int, *, keep: Session) -> None:
        # Oldest first: stop at the first idle-enough-to-keep session, so an
        # admission costs the number of sessions it drops, not the cache size.
        victims: list[str] = []
        for sid, s in self.sessions.items():
            if s is keep or s.busy:
                continue
            if now - s.last_used <= self.idle_ms:
                break
            victims.append(sid)
        for sid in victims:
            del self.sessions[sid]
        excess = len(self.sessions) - self.max_resident
        if excess <= 0:
            return
        victims = []
        for sid, s in self.sessions.items():
            if len(victims) == excess:
                break
            if s is not keep and not s.busy:
                victims.append(sid)
        for sid in victims:
            del self.sessions[sid]
