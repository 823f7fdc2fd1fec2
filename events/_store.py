"""The event-store port: what every adapter of a session store answers.

Pattern: a port (``EventStore``, a ``Protocol``) with what its adapters
         share (``StoreBase``); the adapters are ``events/_memory_store.py``
         and ``events/_redis_store.py``, and one contract suite
         (``helmlog.events.testing``, run by ``tests/contracts``) runs
         against every adapter.
Role:    events layer; the runtime's journal appends through it, ``fold``,
         replay and verification read from it.
Emits:   nothing; it stores what the journal seals.

Laws: R2 (seq 1, 2, 3 … with no gaps; a batch appends atomically only when
the stream's last seq equals ``expected_seq``, else ``SequenceConflictError``
and nothing is appended), R3 (the store keeps each hash beside its event and
chains under its ``chain_key``), R4 (the facts of each appended batch — each
row's projection, ``fact_records`` — go to one global facts list, with the
row's seq, through a per-session cursor: ``publish_facts`` is the outbox's
port method, synchronous in the memory store, so the contract suite tests
it everywhere),
R12 (a record read carries its ``type`` and session id),
R19 (``read_verified``: a whole stream read and verified against its head
record, for readers that act on what they read),
R7/R18 (``open_turns`` and ``pending_asks`` answer from an index kept beside
the streams, repairable from them: ``events/_index.py``),
R11 (every adapter passes the same contract suite), R4 also
(consumer groups over the facts streams: ``create_facts_group``,
``read_facts_group``, ``ack_facts``, ``claim_facts``; a delivered fact stays
pending for its consumer until acknowledged, and an idle one can be claimed),
R19 (each session keeps a head record, ``read_head``, written by the same
atomic step as the append), R25 (``remembers``: a store keeps, beside the
streams, every session it ever created, so a checkpoint of a deleted session
is refused, never imported as new), R26 (``writes_heads``: a store marks
itself as one that writes head records when this version first writes it;
on such a store a stream without its head is refused by ``read_verified``
and every reader through ``refuse_headless``; ``upgrade_head`` gives an
older stream its head, explicitly, never as a side effect).

Why sealing happens before ``append_sealed``: the journal needs the stamped
events (seq, prev_hash) to fold and deliver, and a remote store cannot compute
SHA-256 inside its atomic script; so the caller seals against the head it
knows, and the store's seq check makes a stale head a conflict, never a fork.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ._chain import StoredEvent, StreamHead, seal, verify_records
from ._envelope import Event
from ._errors import SequenceConflictError, StreamTamperedError
from ._index import PendingAsk


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

    async def remembers(self, session_id: str) -> bool:
        """Whether this store ever created ``session_id`` (R25).

        True once an append created the session (or ``upgrade_head`` adopted
        it), and it stays true when its stream and head record are deleted:
        a checkpoint of a session the store remembers and no longer holds is
        refused (``CheckpointError("session-deleted")``), never imported.
        """
        ...

    async def writes_heads(self) -> bool:
        """Whether this store is marked as one that writes head records (R26).

        The mark is written when this version first writes the store; on a
        marked store a stream without its head record is refused (it is a
        downgrade, not an old stream). A store without the mark keeps
        verifying a headless stream by its chain alone.
        """
        ...

    async def upgrade_head(self, session_id: str) -> StreamHead | None:
        """Give a stream written before head records its head (R26).

        Verifies the whole stream under ``chain_key``, then writes the head
        of its last record (only if the session still has none), remembers
        the session and marks the store as one that writes heads. Returns
        the head written; ``None`` when there was nothing to upgrade (no
        stream, or it has its head: such a session is remembered too, so a
        session created before ``remembers`` existed is covered by R25 once
        upgraded). Only ever called explicitly (``helmlog upgrade-heads``):
        nothing upgrades a stream silently.

        Raises:
            StreamTamperedError: the stream fails its chain; nothing is written.
        """
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
        append's outcome was reported unknown but landed (R24) is published
        by the next call.
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
    await refuse_headless(store, session_id, records, head)
    verify_records(session_id, records, store.chain_key, head=head)
    return records


async def refuse_headless(
    store: EventStore,
    session_id: str,
    records: Sequence[StoredEvent],
    head: StreamHead | None,
) -> None:
    """Refuse a stream without its head on a store that writes heads (R26).

    Free on the common path: the store is asked only when a non-empty stream
    has no head. Such a stream is refused when the store is marked as one
    that writes heads (``writes_heads``) or remembers creating the session
    (``remembers``: this version created it, so it had a head); else it was
    written before head records and verifies by its chain alone.

    Raises:
        StreamTamperedError: ``reason="no-head"``, ``seq`` 0 (the head's place).
    """
    if head is not None or not records:
        return
    if await store.writes_heads() or await store.remembers(session_id):
        raise StreamTamperedError(session_id=session_id, seq=0, reason="no-head")
