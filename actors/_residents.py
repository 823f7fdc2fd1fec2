"""A host's resident sessions: a bounded table of agents, least recently used out.

Pattern: an LRU cache with pins — an ``OrderedDict`` of session id to entry,
         moved to the end on each use; an entry held by an operation is
         pinned (``busy``) and never dropped; the least recently used idle
         entries go when the table is over its bound, and an idle sweep drops
         the ones unused for ``idle_s``.
Role:    actors layer; each ``SessionHost`` keeps one ``Residents`` and holds a
         session's entry for the length of each operation on it (and of each
         recovery its failover runs).
Emits:   nothing; dropping a session appends nothing, and its next
         operation re-activates it from its stream silently (R6).

Laws: R21 (at most ``max_resident`` sessions stay resident; a session idle
longer than ``idle_s`` is dropped; a session in the middle of an operation
never is), R8 (a session is activated from its stream on first use, by a new
agent, so a dropped session costs one activation and nothing else), R4 (the
facts sweep asks ``busy`` and leaves a session in an operation to it).

Why the bound may be passed for a moment: a session that arrives while every
resident one is busy is admitted anyway (refusing it would fail a caller for
the host's bookkeeping); the excess goes as soon as an operation releases
its entry.

Why a new entry is held before the table is trimmed: when every older entry
is busy, the new one is the only idle candidate, and trimming would drop the
session the caller is about to use.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from helmlog.runtime import Agent

DEFAULT_MAX_RESIDENT: Final = 10_000
DEFAULT_IDLE_S: Final = 600.0


class Resident:
    """One resident session: its agent, how many operations hold it, last use."""

    __slots__ = ("agent", "busy", "used")

    def __init__(self, agent: Agent, now: float) -> None:
        self.agent = agent
        self.busy = 0
        self.used = now


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
        self._max = max_resident
        self._idle_s = idle_s
        self._table: OrderedDict[str, Resident] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._table)

    def get(self, session_id: str) -> Resident | None:
        """The session's entry if it is resident (not held, not moved)."""
        return self._table.get(session_id)

    def ids(self) -> list[str]:
        """Ids of the resident sessions, sorted."""
        return sorted(self._table)

    def busy(self, session_id: str) -> bool:
        """Whether an operation holds this session now."""
        res = self._table.get(session_id)
        return res is not None and res.busy > 0

    def busy_count(self) -> int:
        """How many resident sessions an operation holds now."""
        return sum(1 for r in self._table.values() if r.busy)

    def hold(self, session_id: str) -> Resident:
        """The session's resident entry, held for one operation (never evicted)."""
        res = self._table.get(session_id)
        now = time.monotonic()
        if res is None:
            res = Resident(self._build(), now)
            self._table[session_id] = res
            res.busy += 1
            self._over_capacity()
        else:
            res.busy += 1
            self._table.move_to_end(session_id)
        return res

    def release(self, res: Resident) -> None:
        """End one operation's hold on an entry ``hold`` gave."""
        res.busy -= 1
        res.used = time.monotonic()
        if len(self._table) > self._max:
            # Sessions admitted while every resident one was busy.
            self._over_capacity()

    def _drop(self, session_id: str) -> None:
        del self._table[session_id]
        self.evicted += 1

    def _over_capacity(self) -> None:
        """Drop the least recently used idle sessions above ``max_resident``."""
        excess = len(self._table) - self._max
        if excess <= 0:
            return
        # Least recently used first; a busy session is never dropped (R21).
        drop: list[str] = []
        for sid, r in self._table.items():
            if r.busy == 0:
                drop.append(sid)
                if len(drop) == excess:
                    break
        for sid in drop:
            self._drop(sid)

    def evict_idle(self, idle_s: float | None = None) -> int:
        """Drop the sessions idle for ``idle_s`` (default: the host's); count them."""
        limit = self._idle_s if idle_s is None else idle_s
        cutoff = time.monotonic() - limit
        stale = [
            sid for sid, r in self._table.items() if r.busy == 0 and r.used <= cutoff
        ]
        for sid in stale:
            self._drop(sid)
        return len(stale)

    async def sweep_idle(self) -> None:
        """Drop idle sessions every quarter of ``idle_s`` (at most 30 s), forever."""
        every = max(0.05, min(self._idle_s / 4, 30.0))
        while True:
            await asyncio.sleep(every)
            self.evict_idle()
