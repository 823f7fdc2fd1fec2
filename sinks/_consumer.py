"""Consumer-group watchers: the facts streams delivered to a sink, acked after.

Pattern: a competing consumer over the store's facts groups: at-least-once
         delivery made effectively-once by idempotent sinks.
Role:    sinks layer; ``FactsConsumer(store, group, consumer, sink).run()``
         and ``helmlog watch``; runs beside the agents, never inside a run.

Laws: R4 (acked only after the sink returned; a dead consumer's facts are
re-read by its restart or claimed by another), R16 (a failing sink is retried
with backoff and logged; no run waits on it).
Why a restart first re-reads its own pending facts: only its name finds them
at once. A fact that cannot be decoded is logged and left pending, never
acked: acking would lose it; pending, a newer reader can claim it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any

from helmlog.events import (
    EventStore,
    FactDelivery,
    HelmlogError,
    StoreError,
    decode_event,
)

log = logging.getLogger("helmlog.sinks")


class FactsConsumer:
    """Deliver the facts streams to ``sink`` as consumer ``consumer`` of ``group``.

    Args:
        store: the event store whose facts streams are read.
        group: the consumer group; consumers of one group share the work.
        consumer: this consumer's name; a restart under the same name
            resumes its own pending facts first.
        sink: anything with ``on_event(event)`` (sync or async), idempotent
            by ``(session_id, seq)`` as every helmlog sink is.
        from_start: a new group starts at the oldest retained fact (else
            after the newest); an existing group keeps its position.
        count: facts read per shard per round trip.
        block_ms: how long one read waits for a new fact.
        claim_idle_ms: a fact pending this long on any consumer (a dead
            one) is claimed; ``None`` never claims.
        claim_every_s: how often to look for such facts.
        retry_s: the first wait after a failure; doubled up to ``retry_max_s``.
    """

    def __init__(
        self,
        store: EventStore,
        group: str,
        consumer: str,
        sink: Any,
        *,
        from_start: bool = True,
        count: int = 100,
        block_ms: int = 1_000,
        claim_idle_ms: int | None = 30_000,
        claim_every_s: float = 5.0,
        retry_s: float = 0.1,
        retry_max_s: float = 5.0,
    ) -> None:
        self.store = store
        self.group = group
        self.consumer = consumer
        self.sink = sink
        self.from_start = from_start
        self.count = count
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        self.claim_every_s = claim_every_s
        self.retry_s = retry_s
        self.retry_max_s = retry_max_s
        # Counters, for callers and tests: facts the sink returned on, facts
        # acknowledged, sink failures, facts claimed from other consumers.
        self.delivered = 0
        self.acked = 0
        self.failures = 0
        self.claimed = 0
        self._ready = False
        self._last_claim: float | None = None
        self._limit: int | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Ask ``run`` to return after the fact it is delivering."""
        self._stop.set()

    async def run(
        self, *, limit: int | None = None, idle_exit_s: float | None = None
    ) -> int:
        """Deliver until ``stop()``, ``limit`` facts, or ``idle_exit_s`` idle.

        Returns how many facts the sink returned on. Store errors that may
        pass (``retryable``) are logged and retried with backoff. Facts read
        past ``limit`` stay pending for this consumer's next run.
        """
        loop = asyncio.get_running_loop()
        self._limit = limit
        idle_since = loop.time()
        wait = self.retry_s
        while not self._stop.is_set():
            if limit is not None and self.delivered >= limit:
                break
            try:
                done = await self.step()
            except HelmlogError as exc:
                if not exc.retryable:
                    raise
                log.warning(
                    "facts consumer %s/%s: %s; retrying in %.2f s",
                    self.group,
                    self.consumer,
                    exc,
                    wait,
                )
                self._ready = False  # the group may be gone: create it again
                await self._pause(wait)
                wait = min(wait * 2, self.retry_max_s)
                continue
            wait = self.retry_s
            if done:
                idle_since = loop.time()
            elif idle_exit_s is not None and loop.time() - idle_since >= idle_exit_s:
                break
        return self.delivered

    async def step(self) -> int:
        """One round: own pending facts (first), claims (when due), new facts.

        Returns how many facts the sink returned on in this round.
        """
        store = self.store
        before = self.delivered
        if not self._ready:
            await store.create_facts_group(self.group, from_start=self.from_start)
            self._ready = True
            while not self._done():
                mine = await store.read_facts_group(
                    self.group, self.consumer, count=self.count, pending=True
                )
                if not await self._deliver(mine):
                    break
        idle_ms = self.claim_idle_ms
        if idle_ms is not None and self._claim_due():
            claimed = await store.claim_facts(
                self.group, self.consumer, min_idle_ms=idle_ms, count=self.count
            )
            if claimed:
                self.claimed += len(claimed)
                log.info(
                    "facts consumer %s/%s claimed %d idle facts",
                    self.group,
                    self.consumer,
                    len(claimed),
                )
            await self._deliver(claimed)
        if self._done():
            return self.delivered - before
        fresh = await store.read_facts_group(
            self.group, self.consumer, count=self.count, block_ms=self.block_ms
        )
        await self._deliver(fresh)
        return self.delivered - before

    def _done(self) -> bool:
        """Stopped, or the ``run`` limit reached."""
        limit = self._limit
        return self._stop.is_set() or (limit is not None and self.delivered >= limit)

    def _claim_due(self) -> bool:
        now = asyncio.get_running_loop().time()
        if self._last_claim is not None and now - self._last_claim < self.claim_every_s:
            return False
        self._last_claim = now
        return True

    async def _deliver(self, deliveries: Sequence[FactDelivery]) -> int:
        """Hand each fact to the sink, retrying a failure; ack what it took.

        Returns how many the sink returned on (fewer than given when stopped
        mid-way, or when a fact does not decode).
        """
        done: list[FactDelivery] = []
        delivered = 0
        try:
            for delivery in deliveries:
                if self._done():
                    break
                if await self._one(delivery):
                    done.append(delivery)
                    self.delivered += 1
                    delivered += 1
                elif self._stop.is_set():
                    break
                else:
                    continue  # undecodable: left pending, logged
                if len(done) >= self.count:
                    await self._ack(done)
                    done = []
        finally:
            if done:
                await self._ack(done)
        return delivered

    async def _one(self, delivery: FactDelivery) -> bool:
        """Deliver one fact until the sink returns; ``False`` if it was skipped."""
        fact = delivery.fact
        try:
            event = decode_event(fact.data)
        except (ValueError, HelmlogError) as exc:
            log.error(
                "facts consumer %s/%s: fact %s of session %r seq %d does not "
                "decode (%s); left pending",
                self.group,
                self.consumer,
                delivery.entry_id,
                fact.session_id,
                fact.seq,
                exc,
            )
            return False
        wait = self.retry_s
        attempt = 0
        while True:
            attempt += 1
            try:
                out = self.sink.on_event(event)
                if inspect.isawaitable(out):
                    await out
                return True
            except Exception as exc:  # noqa: BLE001 - R16: logged, retried, never acked
                self.failures += 1
                log.warning(
                    "facts consumer %s/%s: sink %r failed on session %r seq %d "
                    "(attempt %d: %s: %s); not acknowledged, retrying in %.2f s",
                    self.group,
                    self.consumer,
                    self.sink,
                    fact.session_id,
                    fact.seq,
                    attempt,
                    type(exc).__name__,
                    exc,
                    wait,
                )
            await self._pause(wait)
            if self._stop.is_set():
                return False
            wait = min(wait * 2, self.retry_max_s)

    async def _ack(self, done: Sequence[FactDelivery]) -> None:
        try:
            self.acked += await self.store.ack_facts(self.group, done)
        except StoreError as exc:
            # Unacked facts are redelivered; the sink's idempotency absorbs it.
            log.warning(
                "facts consumer %s/%s: acknowledging %d facts failed (%s); "
                "they will be delivered again",
                self.group,
                self.consumer,
                len(done),
                exc,
            )

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when ``stop()`` is called."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            return
