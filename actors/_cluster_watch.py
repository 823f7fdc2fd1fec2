"""A cluster agent's live watchers, fed from its own sessions' streams.

Pattern: a per-session catch-up reader (a cursor per session) projected
         through ``watched``, woken by the facts streams, by the agent's own
         calls and, for a turn no call of this agent runs, by a poll.
Role:    actors layer; every ``ClusterAgent`` view of one ``Cluster.agent``
         shares one ``ClusterWatch`` (runtime's ``Listeners``).

Laws: G82–G84, G86, G95, R4, R17.
Why the session streams and not the facts streams: facts may come twice or
late (R4) and hold no other events; a cursor per stream makes delivery
ordered and exactly-once. Its own sessions are those its views ran,
continued, resumed or recovered while watched (the latest ``max_sessions``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from helmlog.events import (
    EventStore,
    FatalError,
    HelmlogError,
    PauseRequested,
    StoredEvent,
    TurnEnded,
    open_event_store,
    watched,
)
from helmlog.runtime import RedactionPolicy
from helmlog.runtime.lowlevel import Listeners

log = logging.getLogger("helmlog.actors")

DEFAULT_MAX_SESSIONS: Final = 10_000
DEFAULT_POLL_S: Final = 1.0
# How long one read of the facts streams waits for a new fact.
FACTS_BLOCK_MS: Final = 1_000
# The facts tail starts this far back: a fact read twice only wakes a
# catch-up that finds nothing new, one missed is found by the next wake.
FACTS_SLACK_MS: Final = 5_000
# After these, a turn's output is handed back: nothing more is due.
_ENDS = frozenset({TurnEnded.type, PauseRequested.type, FatalError.type})


class ClusterWatch:
    """The watchers of one cluster agent, and the sessions they hear.

    Args:
        store_url: the cluster's shared store.
        chain_key: the store's chain key.
        redact: the factory's agent's policy; events are served through it.
        max_sessions: own sessions remembered at most (the oldest idle go).
        poll_s: how often a turn no call of this agent runs is read.
    """

    def __init__(
        self,
        store_url: str,
        chain_key: bytes | None = None,
        *,
        redact: RedactionPolicy | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        poll_s: float = DEFAULT_POLL_S,
    ) -> None:
        self.listeners = Listeners()
        self._store_url = store_url
        self._chain_key = chain_key
        self._served: Callable[[Any], Any] | None = (
            redact.served if redact is not None else None
        )
        self._max_sessions = max_sessions
        self._poll_s = poll_s
        # Invariant: a session's events up to its cursor were delivered, once.
        self._cursors: OrderedDict[str, int] = OrderedDict()
        self._open: set[str] = set()  # last delivered event ends no turn
        self._busy: dict[str, int] = {}  # calls of this agent in flight
        self._locks: dict[str, asyncio.Lock] = {}
        self._store: EventStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    # -- subscriptions (the shape of Agent's) ---------------------------------

    def on(self, event_type: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe ``fn`` to one event type (``"*"`` for all); returns unsubscribe."""
        return self._forgetting(self.listeners.on(event_type, fn))

    def attach(self, watcher: Any) -> Callable[[], None]:
        """Attach a watcher (G82, G83); returns unsubscribe."""
        (w,) = self.listeners.check_watchers([watcher]) or (watcher,)
        return self._forgetting(self.listeners.attach(w))

    def _forgetting(self, unsubscribe: Callable[[], None]) -> Callable[[], None]:
        def stop() -> None:
            unsubscribe()
            if not self.listeners:
                # Nobody hears them now: a later watcher starts afresh, as
                # one attached to an in-process agent hears only what follows.
                self._forget()

        return stop

    def _forget(self) -> None:
        for sid in [s for s in self._cursors if not self._busy.get(s)]:
            self._drop(sid)

    async def idle(self) -> None:
        """Wait until async watchers have seen every event delivered so far."""
        await self.listeners.idle()

    # -- the agent's calls ------------------------------------------------------

    async def begin(self, session_id: str, after_seq: int | None) -> bool:
        """A call of this agent on ``session_id`` starts; follow the session
        from ``after_seq`` (``None``: its head) unless it is followed already.

        Returns whether the call is watched (``end`` is then due). Never
        raises: a store that cannot tell the head is logged, and the session
        is followed from wherever the call leaves it.
        """
        if not self.listeners:
            return False
        if session_id not in self._cursors:
            if after_seq is None:
                try:
                    after_seq = (await self._open_store().head(session_id))[0]
                except HelmlogError as exc:
                    log.warning("watch: no head for %s (%s)", session_id, exc)
                    after_seq = 0
            self._cursors[session_id] = after_seq
            self._trim()
        self._cursors.move_to_end(session_id)
        self._busy[session_id] = self._busy.get(session_id, 0) + 1
        self._open.add(session_id)
        self._follow()
        return True

    async def end(self, session_id: str) -> None:
        """A watched call on ``session_id`` returned or raised: deliver what
        it left, before the call hands back (never raises)."""
        left = self._busy.get(session_id, 0) - 1
        if left > 0:
            self._busy[session_id] = left
        else:
            self._busy.pop(session_id, None)
        if not self.listeners:  # unsubscribed while the call ran
            if left <= 0:
                self._drop(session_id)
            return
        await self.catch_up(session_id)

    async def catch_up(self, session_id: str) -> int:
        """Deliver the session's events after its cursor; return how many.

        Ordered and exactly-once per session: one catch-up at a time moves a
        session's cursor, in the same step that delivers what it read. A
        store that fails is logged; the session stays open, read again later.
        """
        if session_id not in self._cursors:
            return 0
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        async with lock:
            after = self._cursors.get(session_id)
            if after is None:  # forgotten while waiting
                return 0
            try:
                records = await self._open_store().read(session_id, after)
            except HelmlogError as exc:
                log.warning("watch: cannot read %s yet (%s)", session_id, exc)
                self._open.add(session_id)
                return 0
            if self._cursors.get(session_id) != after:
                return 0  # forgotten, or followed afresh, while reading
            if records:
                try:
                    events = self._shown(records)
                except HelmlogError as exc:
                    # Left where it is, as an undecodable fact is left
                    # pending: read again at the next wake, and logged.
                    log.error("watch: %s after seq %d: %s", session_id, after, exc)
                    self._open.add(session_id)
                    return 0
                self._cursors[session_id] = records[-1].seq
                self._deliver(events)
                if records[-1].type in _ENDS:
                    self._open.discard(session_id)
                else:
                    self._open.add(session_id)
            return len(records)

    def _shown(self, records: list[StoredEvent]) -> list[tuple[Any, Any]]:
        """What the watchers are shown of ``records``: each event (rows as
        facts, G95) with, for whoever may change it, a copy sharing no
        container with it (a second decode), or ``None``."""
        events = list(watched([r.decode() for r in records]))
        if not self.listeners.copying:
            return [(event, None) for event in events]
        copies = list(watched([r.decode() for r in records]))
        return list(zip(events, copies, strict=True))

    def _deliver(self, shown: list[tuple[Any, Any]]) -> None:
        """Hand the events to the watchers, served as the host serves them
        (G86); a watcher's raise is logged by ``Listeners`` (G84)."""
        listeners, served = self.listeners, self._served
        for event, copy in shown:
            if served is not None:
                listeners.deliver(served(copy if copy is not None else event))
            else:
                listeners.deliver(event, copy)

    # -- sessions and the reader ---------------------------------------------

    def _trim(self) -> None:
        """Forget the oldest sessions past ``max_sessions`` that nothing runs."""
        excess = len(self._cursors) - self._max_sessions
        for sid in list(self._cursors):
            if excess <= 0:
                return
            if not self._busy.get(sid):
                self._drop(sid)
                excess -= 1

    def _drop(self, session_id: str) -> None:
        self._cursors.pop(session_id, None)
        self._open.discard(session_id)
        self._locks.pop(session_id, None)

    def _open_store(self) -> EventStore:
        loop = asyncio.get_running_loop()
        if self._store is None or self._loop is not loop:
            # A store's connections belong to the loop that opened them.
            self._store = open_event_store(self._store_url, chain_key=self._chain_key)
            self._loop = loop
            self._locks.clear()
        return self._store

    def _follow(self) -> None:
        """Run the reader on this loop unless it runs already."""
        task = self._task
        loop = asyncio.get_running_loop()
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._task = loop.create_task(self._read(), name="helmlog-cluster-watch")

    async def _read(self) -> None:
        """Wake catch-ups from the facts streams; poll turns no call runs."""
        store = self._open_store()
        after = f"{max(0, int(time.time() * 1000) - FACTS_SLACK_MS)}-0"
        loop = asyncio.get_running_loop()
        polled = loop.time()
        while self.listeners and self._cursors:
            try:
                facts = await store.read_facts(after, block_ms=FACTS_BLOCK_MS)
            except HelmlogError as exc:
                log.warning("watch: cannot read the facts streams (%s)", exc)
                await asyncio.sleep(self._poll_s)
                facts = []
            if facts:
                after = facts[-1].id
            due = {f.session_id for f in facts if f.session_id in self._cursors}
            if loop.time() - polled >= self._poll_s:
                polled = loop.time()
                due |= {s for s in self._open if not self._busy.get(s)}
            for sid in sorted(due):
                await self.catch_up(sid)

    async def close(self) -> None:
        """Stop the reader and release the store's connections."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])  # its end, without taking its cancel
        store, self._store = self._store, None
        if store is not None:
            await store.close()
