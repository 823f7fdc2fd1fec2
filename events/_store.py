"""The event-store port and its in-memory implementation.

Pattern: a port (``EventStore``) with an in-memory adapter; one contract
         suite in ``tests/contracts`` runs against every adapter.
Role:    events layer; the runtime's journal appends through it, ``fold``,
         replay and verification read from it.
Emits:   nothing; it stores what the journal seals.

Laws: R2 (seq 1, 2, 3 … with no gaps; a batch appends atomically only when
the stream's last seq equals ``expected_seq``, else ``SequenceConflictError``
and nothing is appended), R3 (the store keeps each hash beside its event and
chains under its ``chain_key``), R4 (the facts of each appended batch — each
row's projection, ``fact_records`` — go to one global facts list, with the
row's seq, through a per-session cursor: ``publish_facts`` is the outbox's
port method, synchronous here, so the contract suite tests it everywhere),
R12 (a record read carries its ``type`` and session id),
R19 (``read_verified``: a whole stream read and verified against its head
record, for readers that act on what they read),
R7/R18 (``open_turns`` and ``pending_asks`` answer from an index kept beside
the streams, repairable from them: ``events/_index.py``),
R11 (``MemoryEventStore`` needs no server), R4 also
(consumer groups over the facts streams: ``create_facts_group``,
``read_facts_group``, ``ack_facts``, ``claim_facts``; a delivered fact stays
pending for its consumer until acknowledged, and an idle one can be claimed),
R19 (each session keeps a head record, ``read_head``, written by the same
atomic step as the append: the memory store keeps it beside the stream).

Why sealing happens before ``append_sealed``: the journal needs the stamped
events (seq, prev_hash) to fold and deliver, and a remote store cannot compute
SHA-256 inside its atomic script; so the caller seals against the head it
knows, and the store's seq check makes a stale head a conflict, never a fork.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ._chain import StoredEvent, StreamHead, head_of, seal, type_of, verify_records
from ._envelope import Event
from ._errors import SequenceConflictError, StoreError
from ._facts import fact_records
from ._index import MemoryIndex, PendingAsk, delta_of


class FactRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One decision fact on the global facts stream, with where it came from."""

    id: str
    session_id: str
    seq: int
    data: bytes


class FactDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """A fact read through a consumer group, with what acknowledging it needs.

    ``shard`` and ``entry_id`` name the facts-stream entry (``fact.id`` is the
    entry id too); the group keeps it pending for its consumer until
    ``ack_facts`` names it.
    """

    fact: FactRecord
    shard: int
    entry_id: str


@runtime_checkable
class EventStore(Protocol):
    """Where session streams live. Every adapter passes ``tests/contracts``."""

    chain_key: bytes | None
    url: str

    async def head(self, session_id: str) -> tuple[int, str]:
        """``(last seq, last hash)`` of a stream; ``(0, "")`` when it is empty."""
        ...

    async def append(
        self, session_id: str, events: Sequence[Event], expected_seq: int
    ) -> int:
        """Stamp, seal and append a batch atomically; return the new last seq."""
        ...

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        """Append already-sealed records atomically; return the new last seq."""
        ...

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """The stored records with ``seq > after_seq``, in order."""
        ...

    async def read_head(self, session_id: str) -> StreamHead | None:
        """The session's head record (R19): where its appends left the stream.

        Written by the same atomic step as every append; ``None`` for a
        session never appended to, or one written before heads existed. It
        outlives a deleted stream, so verification can tell what was cut.
        """
        ...

    async def sessions(self) -> list[str]:
        """Ids of every session this store holds."""
        ...

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        """Decision facts published after ``after_id`` (all when ``None``)."""
        ...

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        """Create consumer group ``group`` on every facts shard; idempotent.

        A new group starts at the oldest retained fact (``from_start``) or
        after the newest; an existing group keeps its position.
        """
        ...

    async def read_facts_group(
        self,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = None,
        pending: bool = False,
    ) -> list[FactDelivery]:
        """Facts for ``consumer``: new ones (each to one consumer of the group),
        or with ``pending`` the ones delivered to it and not yet acknowledged.

        Waits up to ``block_ms`` for a new fact; ``count`` caps each shard.
        """
        ...

    async def ack_facts(self, group: str, deliveries: Sequence[FactDelivery]) -> int:
        """Acknowledge delivered facts; return how many were still pending."""
        ...

    async def claim_facts(
        self, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[FactDelivery]:
        """Take over facts pending (on any consumer) for at least ``min_idle_ms``.

        ``count`` caps each shard; a claimed fact is pending on ``consumer``.
        """
        ...

    async def open_turns(self) -> list[str]:
        """Sessions whose latest turn may be unfinished, from the index.

        A superset: a session with ``agent.turn_start`` and no
        ``agent.turn_end``/``error.fatal`` after it (or a pending pause) is
        always listed; a listed session may turn out to be finished.
        """
        ...

    async def pending_asks(self) -> list[PendingAsk]:
        """Pending pauses across sessions, from the index (no fold of each)."""
        ...

    async def publish_facts(self, session_id: str) -> int:
        """Publish the session's facts after its cursor; return how many (R4).

        The outbox: each session has a cursor (the seq up to which its facts
        are on the facts streams). This reads only the stream after it,
        publishes the facts found there and only then advances the cursor,
        so a fact whose publication failed, whose writer died, or whose
        append was reported failed but landed is published by the next call.
        Idempotent, and safe beside appends: a fact is published again only
        when two calls race, and watchers dedupe by ``(session_id, seq)``.

        Raises:
            StoreError: the stream or the facts streams could not be reached,
                or refused a fact; the cursor did not move past it.
        """
        ...

    async def reindex(self, session_id: str) -> None:
        """Recompute this session's index entries from its stream; idempotent.

        Also publishes the session's facts after its cursor, as
        ``publish_facts`` does.
        """
        ...

    async def repair_indexes(self) -> int:
        """``reindex`` every session (a scan); return how many were reindexed."""
        ...

    async def close(self) -> None:
        """Release connections; a closed store may not be used again."""
        ...


class StoreBase:
    """What every adapter shares: ``append`` in terms of ``head``/``append_sealed``."""

    chain_key: bytes | None = None
    url: str = ""

    async def head(self, session_id: str) -> tuple[int, str]:
        raise NotImplementedError

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        raise NotImplementedError

    async def head_for_append(
        self, session_id: str, expected_seq: int
    ) -> tuple[int, str]:
        """The head to seal a batch against; an adapter may answer from a cache."""
        return await self.head(session_id)

    async def append(
        self, session_id: str, events: Sequence[Event], expected_seq: int
    ) -> int:
        last_seq, last_hash = await self.head_for_append(session_id, expected_seq)
        if last_seq != expected_seq:
            raise SequenceConflictError(
                session_id=session_id, expected=expected_seq, actual=last_seq
            )
        if not events:
            return last_seq
        _stamped, records = seal(
            session_id,
            events,
            after_seq=expected_seq,
            prev_hash=last_hash,
            key=self.chain_key,
        )
        return await self.append_sealed(session_id, records, expected_seq)


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


async def read_verified(store: EventStore, session_id: str) -> list[StoredEvent]:
    """A session's whole stream, verified with its head record (R19).

    The head is read first, so an append landing meanwhile only makes the
    stream longer than its head, never shorter.

    Raises:
        StreamTamperedError: the stream fails its chain (under the store's
            chain key) or is shorter than its head.
    """
    head = await store.read_head(session_id)
    records = await store.read(session_id)
    verify_records(session_id, records, store.chain_key, head=head)
    return records
