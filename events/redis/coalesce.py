"""Auto-pipelining: single commands issued together share one round trip.

Pattern: a coalescer (ioredis's auto-pipelining): a command queued in one
         turn of the event loop waits for the loop's next turn, then goes out
         with every command queued meanwhile as one pipeline; up to
         ``in_flight`` such round trips run at once, each on its own pooled
         connection, and what queues while all are busy rides the next one.
Role:    events layer, ``events/redis``; ``topology.Routes.one`` (reads,
         head records, registry writes) sends through it; blocking reads and
         the appender's group commit do not.

Laws: R5 (each round trip keeps its read deadline; a failed one fails each
of its callers with the driver's error, which the caller turns into a
``StoreError``), R24 (a lost reply is a ``ReplyLostError`` for every command
of the round trip, as it was for each alone), R11.

Why: a turn's store reads (a catch-up read, a new session's head and stream)
each cost a pooled connection, a deadline and a ``send`` system call, more
than the read itself; many sessions' reads now share them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from .wire import Command

# Round trips of coalesced commands in flight at once (each on a connection).
IN_FLIGHT: Final = 4

Keyed = tuple[str, Command]
Queued = tuple[Keyed, asyncio.Future[Any]]
Send = Callable[[Sequence[Keyed]], Awaitable[list[Any]]]


class Coalescer:
    """Queues single commands and sends them in shared round trips."""

    __slots__ = ("_in_flight", "_limit", "_queue", "_scheduled", "_send", "_tasks")

    def __init__(self, send: Send, in_flight: int = IN_FLIGHT) -> None:
        self._send = send
        self._limit = in_flight
        self._queue: list[Queued] = []
        self._in_flight = 0
        self._scheduled = False
        # Strong references to the round trips under way (the loop keeps weak).
        self._tasks: set[asyncio.Task[None]] = set()

    async def one(self, key: str, command: Command) -> Any:
        """Send ``command`` (routed by ``key``) with what else is queued; its reply.

        Raises:
            BaseException: the command's error reply, or the round trip's
                driver error (``ReplyLostError`` when it was written, R24).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append(((key, command), future))
        if not self._scheduled and self._in_flight < self._limit:
            # The next turn of the loop: callers woken in this one join in.
            self._scheduled = True
            loop.call_soon(self._launch)
        reply = await future
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _launch(self) -> None:
        self._scheduled = False
        # A caller cancelled while queued needs no reply; its read is dropped.
        queued = [(k, f) for k, f in self._queue if not f.done()]
        self._queue = []
        if not queued:
            return
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._round_trip(queued))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _round_trip(self, queued: list[Queued]) -> None:
        try:
            replies = await self._send([keyed for keyed, _f in queued])
        except BaseException as exc:
            # Every caller gets the round trip's error (cancellation included:
            # nobody waits forever on a round trip that will not answer).
            error = exc if isinstance(exc, Exception) else asyncio.CancelledError()
            for _keyed, future in queued:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
        else:
            for (_keyed, future), reply in zip(queued, replies, strict=True):
                if not future.done():
                    future.set_result(reply)
        finally:
            self._in_flight -= 1
            if self._queue and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._launch)
