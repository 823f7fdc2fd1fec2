"""The client's line to one host: operations queued and sent in batches.

Pattern: group commit on the client side: every operation queued for a host
         during one turn of the event loop goes out as ONE actor call, whose
         results stream back in groups as the host finishes them.
Role:    actors layer; each ``Cluster`` keeps one ``HostLink`` per host, and
         every ``ClusterAgent`` view submits through it.

Laws: R12, R22 (a cut operation fails with its own session's id), R27 (a host
silent to pings for ``answer_s`` fails its waiting operations).
Why batch: an actor call costs about a millisecond of Ray, more than a
governed turn costs the host. Why a watchdog and not a deadline per
operation: an operation may rightly wait minutes on a tool or a person. The
link binds to the running loop lazily: one process may run several loops.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from ray.exceptions import RayActorError, RayTaskError

from ._errors import HostError, HostUnavailableError
from ._wire import Op, Result, decode_results, encode_ops

log = logging.getLogger("helmlog.actors")

Waiting = dict[int, tuple[Op, "asyncio.Future[Result]"]]


class HostLink:
    """Queues operations for one host and sends them in batches."""

    def __init__(
        self, handle: Any, index: int, *, answer_s: float | None = None
    ) -> None:
        self.handle = handle
        self.index = index
        # How long the host may stay silent while batches wait (R27).
        self.answer_s = answer_s
        self._watchdog: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._queue: list[tuple[Op, asyncio.Future[Result]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        # The batches out, each with the operations it still owes.
        self._sending: dict[asyncio.Task[None], Waiting] = {}
        self.calls = 0

    def next_id(self) -> int:
        """A number for the next operation (unique on this link)."""
        return next(self._ids)

    def submit(self, op: Op) -> asyncio.Future[Result]:
        """Queue ``op``; its future resolves with the host's ``Result``."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._queue, self._scheduled = loop, [], False
        future: asyncio.Future[Result] = loop.create_future()
        self._queue.append((op, future))
        if not self._scheduled:
            self._scheduled = True
            # After every task already woken this turn has queued its op.
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        batch, self._queue = self._queue, []
        if not batch:
            return
        waiting = {op.id: (op, future) for op, future in batch}
        task = asyncio.ensure_future(self._send(batch, waiting))
        self._sending[task] = waiting
        task.add_done_callback(self._sent)
        if self.answer_s is not None and (
            self._watchdog is None or self._watchdog.done()
        ):
            self._watchdog = asyncio.ensure_future(self._watch(self.answer_s))

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.pop(task, None)

    async def _watch(self, answer_s: float) -> None:
        """While batches are out, ping the host every third of ``answer_s``;
        when it does not answer within ``answer_s``, fail what it owes."""
        while self._sending:
            await asyncio.sleep(answer_s / 3)
            if not self._sending:
                return
            try:
                await asyncio.wait_for(self._ping(), answer_s)
            except TimeoutError:
                silent = TimeoutError(
                    f"it did not answer for {answer_s:g} s (stopped or hung); "
                    "another host finishes its turns when its lease lapses"
                )
                for task, waiting in list(self._sending.items()):
                    self._fail(waiting, silent, unavailable=True)
                    task.cancel()
            except (RayActorError, RayTaskError):
                continue  # dead or restarting: each batch's call says so

    async def _ping(self) -> None:
        await self.handle.ping.remote()

    async def _send(
        self, batch: list[tuple[Op, asyncio.Future[Result]]], waiting: Waiting
    ) -> None:
        self.calls += 1
        try:
            replies = self.handle.call.remote(encode_ops([op for op, _ in batch]))
            async for ref in replies:
                for result in decode_results(await ref):
                    _op, future = waiting.pop(result.id)
                    if not future.done():
                        future.set_result(result)
        except RayActorError as exc:
            # The host died or is restarting: what it had not answered may or
            # may not have run; each caller learns which session it was.
            self._fail(waiting, exc, unavailable=True)
        except RayTaskError as exc:
            self._fail(waiting, exc, unavailable=False)
        except asyncio.CancelledError:
            for _op, future in waiting.values():
                future.cancel()
            raise
        except Exception as exc:
            log.error("host %d: a batch failed", self.index, exc_info=exc)
            self._fail(waiting, exc, unavailable=False)
        else:
            if waiting:  # Invariant: a host answers every op of its batch.
                self._fail(waiting, RuntimeError("no result"), unavailable=True)

    def _fail(
        self,
        waiting: Waiting,
        exc: BaseException,
        *,
        unavailable: bool,
    ) -> None:
        cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        for op, future in waiting.values():
            if future.done():
                continue
            err: Exception
            if unavailable:
                err = HostUnavailableError(
                    session_id=op.session_id, host=self.index, cause=cause
                )
            else:
                err = HostError(
                    session_id=op.session_id,
                    error_type=type(exc).__name__,
                    detail=cause,
                )
            future.set_exception(err)
