"""The in-memory event store: streams, heads, facts and groups in one process.

Pattern: an adapter of the ``EventStore`` port (``events/_store.py``), built
         on ``StoreBase``; the same contract suite (``tests/contracts``) runs
         on it as on Redis and Redis Cluster.
Role:    events layer; the embedded default (``open_event_store(None)`` or
         ``memory://``), and the store the unit tests and the demo use.
Emits:   nothing; it stores what the journal seals.

Laws: R11 (``MemoryEventStore`` needs no server), R2 (an append checks the
stream's last seq and extends it without yielding, so it is atomic), R4
(facts are published through the same per-session cursor as a remote
store's outbox, synchronously, so ``publish_facts`` means the same here; a
consumer group keeps a delivered fact pending for its consumer until
acknowledged, and an idle one can be claimed), R7/R18 (the open-turns and
pending-asks index, ``events/_index.py``, kept beside the streams), R19 (the
head record, written by the same step as the append, outlives a deleted
stream), R25 (every session an append created is remembered, whatever is
deleted later), R26 (the store is marked as one that writes heads by its
first append; ``upgrade_head`` gives an older stream its head).

Why a module of its own: the port is what every adapter and every caller
shares; this adapter is one of them, like ``events/_redis_store.py``, and
the port module names neither.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import msgspec

from ._chain import StoredEvent, StreamHead, head_of, type_of, verify_records
from ._errors import SequenceConflictError, StoreError
from ._facts import fact_records
from ._index import MemoryIndex, PendingAsk, delta_of
from ._lease import MemoryLeases
from ._store import FactDelivery, FactRecord, StoreBase


class MemoryEventStore(StoreBase):
    """Streams in this process's memory: the embedded default (R11).

    Appends are atomic because they never yield to the event loop between the
    seq check and the write.
    """

    def __init__(self, *, chain_key: bytes | None = None) -> None:
        self.chain_key = chain_key
        self.url = "memory://"
        self._streams: dict[str, list[StoredEvent]] = {}
        self._heads: dict[str, StreamHead] = {}
        self._facts: list[FactRecord] = []
        # The outbox cursor per session (R4): facts up to it are published.
        self._facts_at: dict[str, int] = {}
        self._groups: dict[str, _MemoryGroup] = {}
        self._index = MemoryIndex()
        # R25/R26: sessions ever created here, and whether this version has
        # written the store (so a stream without its head is a downgrade).
        self._known: set[str] = set()
        self._writes_heads = False
        self._leases = MemoryLeases()  # R27

    async def head(self, session_id: str) -> tuple[int, str]:
        stream = self._streams.get(session_id)
        if not stream:
            return 0, ""
        last = stream[-1]
        return last.seq, last.hash

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        stream = self._streams.setdefault(session_id, [])
        actual = stream[-1].seq if stream else 0
        if actual != expected_seq:
            raise SequenceConflictError(
                session_id=session_id, expected=expected_seq, actual=actual
            )
        for offset, record in enumerate(records, start=1):
            if record.seq != expected_seq + offset:
                previous = expected_seq + offset - 1
                raise ValueError(f"record seq {record.seq} does not follow {previous}")
        records = [
            r
            if r.type and r.session_id == session_id
            else msgspec.structs.replace(r, type=type_of(r), session_id=session_id)
            for r in records
        ]
        delta = delta_of(session_id, records)
        if delta is not None and delta.open_at:
            self._index.mark_open(session_id, delta.open_at)
        stream.extend(records)
        if records:
            last = records[-1]
            self._heads[session_id] = head_of(
                session_id, last.seq, last.hash, self.chain_key
            )
            self._known.add(session_id)
            self._writes_heads = True
        # Publication is synchronous here, through the same cursor as a
        # remote store's outbox, so ``publish_facts`` means the same.
        self._publish(session_id, records)
        if delta is not None:
            self._index.apply(session_id, delta)
        return stream[-1].seq if stream else 0

    def _publish(self, session_id: str, records: Sequence[StoredEvent]) -> int:
        """Publish the facts of ``records`` after the cursor; then move it."""
        at = self._facts_at.get(session_id, 0)
        count = 0
        for seq, data in fact_records(session_id, records):
            if seq > at:
                self._facts.append(
                    FactRecord(
                        id=str(len(self._facts) + 1),
                        session_id=session_id,
                        seq=seq,
                        data=data,
                    )
                )
                count += 1
        if records and records[-1].seq > at:
            self._facts_at[session_id] = records[-1].seq
        return count

    async def publish_facts(self, session_id: str) -> int:
        # Never yields: publication here cannot have failed, so activation
        # pays nothing for asking (the cursor is at the head).
        at = self._facts_at.get(session_id, 0)
        return self._publish(session_id, self._streams.get(session_id, [])[at:])

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        stream = self._streams.get(session_id, [])
        # Invariant: seq n sits at index n-1 (no gaps), so slicing is exact.
        return list(stream[after_seq:])

    async def read_head(self, session_id: str) -> StreamHead | None:
        return self._heads.get(session_id)

    async def sessions(self) -> list[str]:
        return [sid for sid, stream in self._streams.items() if stream]

    async def remembers(self, session_id: str) -> bool:
        return session_id in self._known

    async def writes_heads(self) -> bool:
        return self._writes_heads

    async def upgrade_head(self, session_id: str) -> StreamHead | None:
        stream = self._streams.get(session_id)
        if session_id in self._heads:
            self._known.add(session_id)
            self._writes_heads = True
            return None
        if not stream:
            return None
        verify_records(session_id, stream, self.chain_key)
        last = stream[-1]
        head = head_of(session_id, last.seq, last.hash, self.chain_key)
        self._heads[session_id] = head
        self._known.add(session_id)
        self._writes_heads = True
        return head

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        start = int(after_id) if after_id else 0
        return list(self._facts[start:])

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        if group not in self._groups:
            self._groups[group] = _MemoryGroup(0 if from_start else len(self._facts))

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
        while state.next >= len(self._facts) and time.monotonic() < deadline:
            await asyncio.sleep(_MEMORY_POLL_S)
        taken = list(range(state.next, min(len(self._facts), state.next + count)))
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
                f"no consumer group {group!r} on the facts of {self.url} "
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
            fact = self._facts[i]
            out.append(FactDelivery(fact=fact, shard=0, entry_id=fact.id))
        return out

    async def open_turns(self) -> list[str]:
        return sorted(self._index.open)

    async def pending_asks(self) -> list[PendingAsk]:
        return sorted(self._index.asks.values(), key=_ask_order)

    async def reindex(self, session_id: str) -> None:
        stream = self._streams.get(session_id, [])
        self._index.replace(session_id, delta_of(session_id, stream))
        if not stream:
            self._facts_at.pop(session_id, None)  # no stream, no cursor
            return
        await self.publish_facts(session_id)

    async def repair_indexes(self) -> int:
        sessions = set(self._streams) | set(self._index.open) | set(self._index.asks)
        sessions |= set(self._facts_at)
        for session_id in sessions:
            await self.reindex(session_id)
        return len(sessions)

    async def claim_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        return self._leases.claim(name, owner, ttl_s)

    async def release_lease(self, name: str, owner: str) -> bool:
        return self._leases.release(name, owner)

    async def close(self) -> None:
        return None


_MEMORY_POLL_S = 0.01


class _MemoryGroup:
    """A consumer group on the memory facts list: its position and pending list.

    ``pending`` maps a fact's index to the consumer it was last delivered to
    and when (monotonic seconds), as Redis keeps a group's PEL.
    """

    __slots__ = ("next", "pending")

    def __init__(self, start: int) -> None:
        self.next = start
        self.pending: dict[int, tuple[str, float]] = {}


def _ask_order(ask: PendingAsk) -> tuple[str, int]:
    return ask.session_id, ask.seq
