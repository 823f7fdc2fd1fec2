"""The memory store's facts log: the facts list, its cursors, consumer groups.

Pattern: one object owning the global facts list, the per-session outbox
         cursor and the consumer groups (each with its pending list, as
         Redis keeps a group's PEL); publication is synchronous.
Role:    events layer, ``events/memory``; the ``FactsLog`` half of
         ``MemoryEventStore``, which publishes each append through it.

Laws: R4 (facts go out through the same per-session cursor as a remote
store's outbox; a delivered fact stays pending until acked; an idle one can
be claimed).

Why an append only queues its rows (``owe``): a fact is a projection of
bytes that never change, so it is computed when the log is first read, in
publication order, with the same ids; an append pays no decode and leaves
no new object for the collector (issue 29 item 3).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Final

from .._chain import StoredEvent
from .._errors import StoreError
from .._facts import fact_bytes, fact_records, fact_sources
from .._store import FactDelivery, FactRecord
from .log import AppendLog

_MEMORY_POLL_S: Final = 0.01


class MemoryFacts:
    """The facts of one memory store, with the cursors and groups over them."""

    def __init__(self, url: str) -> None:
        self._url = url
        # Both in ``AppendLog``s, which the collector does not walk item by
        # item (issue 29 item 2).
        self._records: AppendLog[FactRecord] = AppendLog()
        # Published, not yet projected: ``fact_sources`` records, each with
        # its session id set (the store's), in publication order.
        self._owed: AppendLog[StoredEvent] = AppendLog()
        # The outbox cursor per session (R4): facts up to it are published.
        self.cursors: dict[str, int] = {}
        self._groups: dict[str, _MemoryGroup] = {}

    @property
    def records(self) -> AppendLog[FactRecord]:
        """Every published fact, in publication order (``id`` is its place)."""
        if self._owed:
            self._project()
        return self._records

    def _project(self) -> None:
        owed, self._owed = self._owed, AppendLog()
        out = self._records
        facts = [
            (record.session_id, record.seq, data)
            for record in owed
            if (data := fact_bytes(record.session_id, record)) is not None
        ]
        out.extend(
            FactRecord(id=str(n), session_id=sid, seq=seq, data=data)
            for n, (sid, seq, data) in enumerate(facts, len(out) + 1)
        )

    def owe(
        self, session_id: str, records: Sequence[StoredEvent], *, rows: bool = True
    ) -> None:
        """``publish``, for an append's ``records`` (each stored under
        ``session_id``; ``rows=False`` when none is a row or a fact): their
        facts are projected when the log is read."""
        if not records:
            return
        at = self.cursors.get(session_id, 0)
        if rows:
            owed = fact_sources(records)
            if owed and owed[0].seq <= at:  # in seq order: a suffix is owed
                owed = [record for record in owed if record.seq > at]
            if owed:
                self._owed.extend(owed)
        last = records[-1].seq
        if last > at:
            self.cursors[session_id] = last

    def publish(self, session_id: str, records: Sequence[StoredEvent]) -> int:
        """Publish the facts of ``records`` after the cursor; then move it."""
        at = self.cursors.get(session_id, 0)
        out = self.records  # what was owed goes first
        facts = [
            (seq, data) for seq, data in fact_records(session_id, records) if seq > at
        ]
        out.extend(
            FactRecord(id=str(n), session_id=session_id, seq=seq, data=data)
            for n, (seq, data) in enumerate(facts, len(out) + 1)
        )
        if records and records[-1].seq > at:
            self.cursors[session_id] = records[-1].seq
        return len(facts)

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        start = int(after_id) if after_id else 0
        return self.records.since(start)

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        if group not in self._groups:
            self._groups[group] = _MemoryGroup(0 if from_start else len(self.records))

    async def read_facts_group(
        self,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = None,
        pending: bool = False,
    ) -> list[FactDelivery]:
        state = self._group(group)
        if pending:
            mine = [i for i, (who, _t) in state.pending.items() if who == consumer]
            return self._deliver(state, consumer, sorted(mine)[:count])
        deadline = time.monotonic() + (block_ms or 0) / 1000
        while state.next >= len(self.records) and time.monotonic() < deadline:
            await asyncio.sleep(_MEMORY_POLL_S)
        taken = list(range(state.next, min(len(self.records), state.next + count)))
        state.next += len(taken)
        return self._deliver(state, consumer, taken)

    async def ack_facts(self, group: str, deliveries: Sequence[FactDelivery]) -> int:
        state = self._group(group)
        acked = 0
        for delivery in deliveries:
            if state.pending.pop(int(delivery.entry_id) - 1, None) is not None:
                acked += 1
        return acked

    async def claim_facts(
        self, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[FactDelivery]:
        state = self._group(group)
        cutoff = time.monotonic() - min_idle_ms / 1000
        idle = sorted(i for i, (_who, at) in state.pending.items() if at <= cutoff)
        return self._deliver(state, consumer, idle[:count])

    def _group(self, group: str) -> _MemoryGroup:
        state = self._groups.get(group)
        if state is None:
            raise StoreError(
                f"no consumer group {group!r} on the facts of {self._url} "
                "(create_facts_group first)"
            )
        return state

    def _deliver(
        self, state: _MemoryGroup, consumer: str, indexes: Sequence[int]
    ) -> list[FactDelivery]:
        now = time.monotonic()
        out: list[FactDelivery] = []
        for i in indexes:
            state.pending[i] = (consumer, now)
            fact = self.records[i]
            out.append(FactDelivery(fact=fact, shard=0, entry_id=fact.id))
        return out


class _MemoryGroup:
    """A consumer group on the memory facts list: its position and pending list.

    ``pending`` maps a fact's index to the consumer it was last delivered to
    and when (monotonic seconds), as Redis keeps a group's PEL.
    """

    __slots__ = ("next", "pending")

    def __init__(self, start: int) -> None:
        self.next = start
        self.pending: dict[int, tuple[str, float]] = {}
