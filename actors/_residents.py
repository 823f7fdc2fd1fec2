"""A host's resident sessions: the runtime's residency cache, of agents.

Pattern: composition over ``lowlevel.Residency`` (the one LRU-with-pins cache,
         R21): each entry is a session's own agent, pinned while operations
         hold it (``hold``/``release``); the least recently used idle ones go
         over ``max_resident``, and an idle sweep drops those unused for
         ``idle_s`` (on the monotonic clock).
Role:    actors layer; each ``SessionHost`` keeps one ``Residents`` and holds
         a session's entry for each operation (and each failover recovery).

Laws: R21 (the cap; idleness; a held session is never dropped), R8 (a dropped
session costs one activation from its stream, R6), R4 (the facts sweep asks
``busy`` and leaves a session in an operation to it).
Why a new entry is held before the cache is trimmed: when every older entry
is busy, trimming would drop the session the caller is about to use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from helmlog.runtime import Agent
from helmlog.runtime.lowlevel import Residency

DEFAULT_MAX_RESIDENT: Final = 10_000
DEFAULT_IDLE_S: Final = 600.0


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class Resident:
    """One resident session: its agent, how many operations hold it, last use."""

    __slots__ = ("agent", "busy", "last_used", "session_id")

    def __init__(self, session_id: str, agent: Agent) -> None:
        self.session_id = session_id
        self.agent = agent
        self.busy = 0
        self.last_used = 0.0


class Residents:
    """The sessions a host keeps, each with its own agent.

    Args:
        build: makes the agent of a session activated here (the host's
            factory on the host's store; it raises what the factory got wrong).
        max_resident: sessions kept at most (see the module's "why").
        idle_s: seconds after which an idle session is dropped.
    """

    def __init__(
        self, build: Callable[[], Agent], *, max_resident: int, idle_s: float
    ) -> None:
        self._build = build
        self._idle_s = idle_s
        self._cache: Residency[Resident] = Residency(
            max_resident=max_resident, idle_s=idle_s, clock=_monotonic_ms
        )

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def evicted(self) -> int:
        """How many sessions idleness or the cap dropped so far."""
        return self._cache.dropped

    def get(self, session_id: str) -> Resident | None:
        """The session's entry if it is resident (not held, not moved)."""
        return self._cache.get(session_id)

    def ids(self) -> list[str]:
        """Ids of the resident sessions, sorted."""
        return sorted(self._cache.sessions)

    def busy(self, session_id: str) -> bool:
        """Whether an operation holds this session now."""
        res = self._cache.get(session_id)
        return res is not None and res.busy > 0

    def busy_count(self) -> int:
        """How many resident sessions an operation holds now."""
        return sum(1 for r in self._cache.sessions.values() if r.busy)

    def hold(self, session_id: str) -> Resident:
        """The session's resident entry, held for one operation (never evicted)."""
        res = self._cache.get(session_id)
        if res is None:
            res = Resident(session_id, self._build())
            res.busy += 1
            self._cache.admit(res)
        else:
            res.busy += 1
            self._cache.touch(res)
        return res

    def release(self, res: Resident) -> None:
        """End one operation's hold on an entry ``hold`` gave."""
        res.busy -= 1
        self._cache.release(res, use=False)

    def evict_idle(self, idle_s: float | None = None) -> int:
        """Drop the sessions idle for ``idle_s`` (default: the host's); count them."""
        return self._cache.evict_idle(
            idle_ms=None if idle_s is None else idle_s * 1000.0
        )

    async def sweep_idle(self) -> None:
        """Drop idle sessions every quarter of ``idle_s`` (at most 30 s), forever."""
        every = max(0.05, min(self._idle_s / 4, 30.0))
        while True:
            await asyncio.sleep(every)
            self.evict_idle()
