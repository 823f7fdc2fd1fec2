"""Resident sessions: a bounded, least-recently-used cache with pins (R21).

Pattern: activation collection (Orleans; Akka calls it passivation): an
         ordered map from session id to entry, oldest use first; an entry in
         the middle of an operation (``busy``) is pinned, never dropped; idle
         entries older than ``idle_s`` and the least recently used over
         ``max_resident`` go. Generic over the entry: the agent's ``Session``
         (``Hosting``) and a cluster host's ``Resident`` (actors) both use it.
Role:    runtime layer, exported as ``lowlevel.Residency``; dropping an entry
         appends nothing, and its next use re-activates it from its stream.

Laws: R21 (the cap, idleness on the owner's clock, pins), R6 and R8 (a dropped
session re-activates from its stream, silently), R1 (only a cache).
Why the cap may be passed: a busy entry is never dropped, even past the cap; a
second activation beside it would fold a second cache of one stream (R2).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Resident(Protocol):
    """What the cache asks of an entry: its id, whether it is busy, its last use."""

    @property
    def session_id(self) -> str: ...

    @property
    def busy(self) -> int | bool: ...

    last_used: float


S = TypeVar("S", bound=Resident)


class Residency(Generic[S]):
    """The resident sessions of one owner, least recently used first.

    Args:
        max_resident: entries kept at most (busy ones are never dropped).
        idle_s: seconds without use after which an idle entry is dropped.
        clock: the owner's clock, in milliseconds.
    """

    __slots__ = ("clock", "dropped", "idle_ms", "max_resident", "sessions")

    def __init__(
        self, *, max_resident: int, idle_s: float, clock: Callable[[], float]
    ) -> None:
        self.max_resident = max_resident
        self.idle_ms = idle_s * 1000.0
        self.clock = clock
        # Invariant: ordered by last use (start or end of an operation);
        # last_used is the clock at the end of the last one (or admission).
        self.sessions: OrderedDict[str, S] = OrderedDict()
        # How many entries idleness or the cap dropped (not forget/discard).
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: str) -> S | None:
        """The resident session, if any (not a use: the order is unchanged)."""
        return self.sessions.get(session_id)

    def admit(self, session: S) -> None:
        """Make ``session`` resident (replacing any other of its id), then
        collect idle sessions and hold the cap, never dropping ``session``."""
        sid = session.session_id
        self.sessions[sid] = session
        self.sessions.move_to_end(sid)
        session.last_used = now = self.clock()
        self._collect(now, keep=session)

    def touch(self, session: S) -> None:
        """Mark the start of an operation: ``session`` becomes the most
        recently used. No clock reading: a busy session is never idle."""
        sid = session.session_id
        if self.sessions.get(sid) is session:
            self.sessions.move_to_end(sid)

    def release(self, session: S, *, use: bool = True) -> None:
        """Mark the end of an operation on ``session``; hold the cap again
        (it may have been exceeded while every other session was busy).

        ``use``: whether the end counts as a use (the agent's cache), making
        ``session`` the most recently used and sparing it; a cluster host
        counts the start only, so a released session may be the one to go.
        """
        if use:
            self.touch(session)
        session.last_used = now = self.clock()
        self._collect(now, keep=session if use else None)

    def discard(self, session: S) -> None:
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

    def evict_idle(self, now: float | None = None, idle_ms: float | None = None) -> int:
        """Drop every session idle longer than ``idle_s`` (or ``idle_ms``, where
        0 drops every idle one); return how many."""
        at = self.clock() if now is None else now
        limit = self.idle_ms if idle_ms is None else idle_ms
        idle = [
            sid
            for sid, s in self.sessions.items()
            if not s.busy and (at - s.last_used > limit or idle_ms == 0)
        ]
        for sid in idle:
            del self.sessions[sid]
        self.dropped += len(idle)
        return len(idle)

    def _collect(self, now: float, *, keep: S | None) -> None:
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
        self.dropped += len(victims)
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
        self.dropped += len(victims)
