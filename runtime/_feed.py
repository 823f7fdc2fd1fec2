"""One session's events as an async iterator: what ``Agent.stream`` yields.

Pattern: a listener (``agent.on("*", feed.put)``) that keeps one session's
         events in a queue, drained by an async generator until its run ends.
Role:    runtime layer; ``Agent.stream`` runs its turn through ``stream_turn``.

Laws: G82–G84 (an ordinary listener: one delivery path, stream order,
copies, never steers), issue 12 item 2, R7.
Why a listener and not a second channel: callbacks and the iterator then see
the same events in the same order by construction. Closing the iterator
early (``contextlib.aclosing``) cancels the turn where it next waits; a call
dispatched but unfinished is left for recovery (R7).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from ._watchers import Listeners


class SessionFeed:
    """The events of one session, queued for ``until``."""

    __slots__ = ("_items", "_ready", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._items: deque[Any] = deque()
        self._ready = asyncio.Event()

    def put(self, event: Any) -> None:
        """A listener: keep ``event`` if it is this session's."""
        if getattr(event, "session_id", None) == self.session_id:
            self._items.append(event)
            self._ready.set()

    async def until(self, run: asyncio.Future[Any]) -> AsyncGenerator[Any, None]:
        """Yield what arrives until ``run`` is done and all of it was yielded."""
        run.add_done_callback(lambda _: self._ready.set())
        items = self._items
        while True:
            while items:
                yield items.popleft()
            if run.done():
                return
            self._ready.clear()
            if not items and not run.done():
                await self._ready.wait()


async def stop(run: asyncio.Future[Any]) -> None:
    """Cancel a run its caller left, and wait until it has recorded its end."""
    if not run.done():
        run.cancel()
    # The cancelled run records its end; its outcome is no one's now.
    await asyncio.gather(run, return_exceptions=True)


async def stream_turn(
    listeners: Listeners, session_id: str, turn: Coroutine[Any, Any, Any]
) -> AsyncGenerator[Any, None]:
    """Run ``turn`` (an agent's ``turn(...)`` on ``session_id``) and yield that
    session's events as they are delivered, then its ``TurnResult``.

    The feed is subscribed before the turn starts and dropped when the
    iteration ends; an iteration closed early cancels the turn.
    """
    feed = SessionFeed(session_id)
    unsubscribe = listeners.on("*", feed.put)
    run = asyncio.ensure_future(turn)
    try:
        events = feed.until(run)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()
        yield run.result()
    finally:
        await stop(run)  # a caller that left early: the turn is cancelled
        unsubscribe()
