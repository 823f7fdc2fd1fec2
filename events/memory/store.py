"""The in-memory event store: streams, heads, facts and groups in one process.

Pattern: an adapter of the store ports, on ``StoreBase``; it holds its facts
         log (``facts.MemoryFacts``), its index (``MemoryIndex``) and its
         leases, and keeps the streams and head records itself.
Role:    events layer; the embedded default (``open_event_store(None)`` or
         ``memory://``), the store of the unit tests and the demo.

Laws: R11 (no server), R2 (an append checks the last seq and extends the
stream without yielding, so it is atomic), R4 (facts through the same
per-session cursor as a remote outbox, synchronously), R7/R18 (the index
beside the streams), R19 (the head record outlives a deleted stream), R25
(every session an append created is remembered), R26 (marked as writing
heads by its first append; ``upgrade_head`` gives an older stream its head);
issue 30 (a signed head's log leaf is appended in the head's own step).
Why ``append_sealed_now``: an append here never waits, so a journal makes it
without a coroutine (the port's optional capability, issue 29 item 3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from .._chain import StoredEvent, StreamHead, head_of, type_of, verify_records
from .._envelope import Event, UnknownEvent
from .._errors import SequenceConflictError
from .._evidence_events import HeadSigned
from .._facts import FACT_TYPE, FILED_TYPE
from .._index import RELEVANT_TYPES, MemoryIndex, PendingAsk, delta_of
from .._lease import MemoryLeases
from .._signed_heads import HeadSigner, head_leaves
from .._store import FactDelivery, FactRecord, StoreBase
from .facts import MemoryFacts

_SIGNED = HeadSigned.type
_FACT_TYPES = frozenset((FILED_TYPE, FACT_TYPE))
# Every type an append must look at again: it moves the index, carries a
# fact, or is a signed head.
_NOTABLE = RELEVANT_TYPES | _FACT_TYPES | {_SIGNED}


class MemoryEventStore(StoreBase):
    """Streams in this process's memory: the embedded default (R11).

    Appends are atomic because they never yield to the event loop between the
    seq check and the write.
    """

    def __init__(
        self, *, chain_key: bytes | None = None, signer: HeadSigner | None = None
    ) -> None:
        self.chain_key = chain_key
        self.signer = signer
        self.url = "memory://"
        self._streams: dict[str, list[StoredEvent]] = {}
        self._heads: dict[str, StreamHead] = {}
        self._facts = MemoryFacts(self.url)
        self._index = MemoryIndex()
        # R25/R26: sessions ever created here, and whether this version has
        # written the store (so a stream without its head is a downgrade).
        self._known: set[str] = set()
        self._writes_heads = False
        self._leases = MemoryLeases()  # R27
        # The log of signed heads (issue 30): leaf hashes, and their indexes.
        self._log: list[bytes] = []
        self._log_at: dict[bytes, int] = {}
        # The store port's optional capability (issue 29 item 3): an append
        # here never waits, so a caller may make it without a coroutine;
        # not where a subclass changed what an append does.
        self.append_sealed_now: (
            Callable[[str, Sequence[StoredEvent], int], int] | None
        ) = (
            self._append
            if type(self).append_sealed is MemoryEventStore.append_sealed
            else None
        )

    async def head(self, session_id: str) -> tuple[int, str]:
        return self.head_now(session_id)

    def head_now(self, session_id: str) -> tuple[int, str]:
        """``head`` without a coroutine: every writer of a memory stream is in
        this process, so its last record is its head, known at once (a
        steered step's catch-up asks it on its hot path, issue 27)."""
        stream = self._streams.get(session_id)
        if not stream:
            return 0, ""
        last = stream[-1]
        return last.seq, last.hash

    async def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        *,
        events: Sequence[Event | UnknownEvent] | None = None,
    ) -> int:
        # ``events`` changes nothing here: the facts are projected from the
        # bytes when the log is read (``owe``).
        return self._append(session_id, records, expected_seq)

    def _append(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        """``append_sealed``'s body, which never yields (R2); a caller that
        knows so takes it as ``append_sealed_now``."""
        stream = self._streams.get(session_id)
        if stream is None:
            stream = self._streams[session_id] = []
        actual = stream[-1].seq if stream else 0
        if actual != expected_seq:
            raise SequenceConflictError(
                session_id=session_id, expected=expected_seq, actual=actual
            )
        if not records:
            return actual
        # One pass: the seq order, whether every record is as this store
        # keeps it (its type and session id set: a journal's are, and are
        # kept as they are; else a second pass makes them so), and whether
        # any moves the index, carries a fact or is a signed head (read here,
        # not from a set of the batch's types built after: issue 29 item 3).
        seq = expected_seq
        whole = True
        relevant = signed = rows = False
        for record in records:
            seq += 1
            if record.seq != seq:
                raise ValueError(f"record seq {record.seq} does not follow {seq - 1}")
            kind = record.type
            if not kind or record.session_id != session_id:
                whole = False
            elif kind in _NOTABLE:
                if kind in RELEVANT_TYPES:
                    relevant = True
                if kind in _FACT_TYPES:
                    rows = True
                elif kind == _SIGNED:
                    signed = True
        if not whole:
            records = [
                record
                if record.type and record.session_id == session_id
                else msgspec.structs.replace(
                    record, type=type_of(record), session_id=session_id
                )
                for record in records
            ]
            kinds = {record.type for record in records}
            signed = _SIGNED in kinds
            rows = not kinds.isdisjoint(_FACT_TYPES)
            relevant = not kinds.isdisjoint(RELEVANT_TYPES)
        delta = None
        if relevant:
            delta = delta_of(session_id, records)
            if delta is not None and delta.open_at:
                self._index.mark_open(session_id, delta.open_at)
        stream.extend(records)
        if signed:
            self._append_leaves(head_leaves(records))  # the head's own step
        last = records[-1]
        key = self.chain_key
        self._heads[session_id] = (
            head_of(session_id, last.seq, last.hash, key)
            if key
            else StreamHead(seq=last.seq, hash=last.hash)
        )
        self._known.add(session_id)
        self._writes_heads = True
        # Publication is synchronous here, through the same cursor as a
        # remote store's outbox, so ``publish_facts`` means the same; the
        # facts themselves are projected when the log is read (``owe``).
        self._facts.owe(session_id, records, rows=rows)
        if delta is not None:
            self._index.apply(session_id, delta)
        return last.seq

    async def publish_facts(self, session_id: str) -> int:
        # Never yields: publication here cannot have failed, so activation
        # pays nothing for asking (the cursor is at the head).
        at = self._facts.cursors.get(session_id, 0)
        return self._facts.publish(session_id, self._streams.get(session_id, [])[at:])

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
        return await self._facts.read_facts(after_id, block_ms=block_ms)

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        await self._facts.create_facts_group(group, from_start=from_start)

    async def read_facts_group(
        self,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = None,
        pending: bool = False,
    ) -> list[FactDelivery]:
        return await self._facts.read_facts_group(
            group, consumer, count=count, block_ms=block_ms, pending=pending
        )

    async def ack_facts(self, group: str, deliveries: Sequence[FactDelivery]) -> int:
        return await self._facts.ack_facts(group, deliveries)

    async def claim_facts(
        self, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[FactDelivery]:
        return await self._facts.claim_facts(
            group, consumer, min_idle_ms=min_idle_ms, count=count
        )

    async def open_turns(self) -> list[str]:
        return sorted(self._index.open)

    async def pending_asks(self) -> list[PendingAsk]:
        return sorted(self._index.asks.values(), key=_ask_order)

    async def reindex(self, session_id: str) -> None:
        stream = self._streams.get(session_id, [])
        self._index.replace(session_id, delta_of(session_id, stream))
        self._append_leaves(head_leaves(stream))
        if not stream:
            self._facts.cursors.pop(session_id, None)  # no stream, no cursor
            return
        await self.publish_facts(session_id)

    async def repair_indexes(self) -> int:
        sessions = set(self._streams) | set(self._index.open) | set(self._index.asks)
        sessions |= set(self._facts.cursors)
        for session_id in sessions:
            await self.reindex(session_id)
        return len(sessions)

    def _append_leaves(self, leaves: list[bytes]) -> int:
        added = 0
        for leaf in leaves:
            if leaf not in self._log_at:
                self._log_at[leaf] = len(self._log)
                self._log.append(leaf)
                added += 1
        return added

    async def log_leaves(self, size: int | None = None) -> list[bytes]:
        return list(self._log if size is None else self._log[:size])

    async def log_index(self, leaf: bytes) -> int | None:
        return self._log_at.get(leaf)

    async def repair_log(self, session_id: str | None = None) -> int:
        sessions = sorted(self._streams) if session_id is None else [session_id]
        return sum(
            self._append_leaves(head_leaves(self._streams.get(sid, [])))
            for sid in sessions
        )

    async def claim_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        return self._leases.claim(name, owner, ttl_s)

    async def release_lease(self, name: str, owner: str) -> bool:
        return self._leases.release(name, owner)

    async def close(self) -> None:
        return None


def _ask_order(ask: PendingAsk) -> tuple[str, int]:
    return ask.session_id, ask.seq
