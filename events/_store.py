"""The store ports: a stream recorder, a facts log, a session index.

Pattern: narrow ports in the manner of eventsourcing's recorders;
         ``EventStore`` is their union, so a caller may ask for one. The
         adapters are ``events/memory/`` and ``events/redis/``; each port has
         a shipped contract module in ``helmlog.events.testing``.
Role:    events layer; the journal appends through it, fold/replay/verify read.

Laws: R2, R3, R4, R7, R11, R12, R18, R19, R25, R26 (each method's docstring
says which); ``read_verified``/``refuse_headless`` enforce R19/R26 for readers.
``append_with_events`` hands a store the events it may project facts from.

Why sealing happens before ``append_sealed``: a remote store cannot compute
SHA-256 inside its atomic script, so the caller seals against the head it
knows, and the store's seq check makes a stale head a conflict, never a fork.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from ._chain import StoredEvent, StreamHead, seal, verify_records
from ._envelope import Event, UnknownEvent
from ._errors import SequenceConflictError, StreamTamperedError
from ._index import PendingAsk
from ._signed_heads import HeadSigner


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
class StreamRecorder(Protocol):
    """Session streams: sealed, seq-guarded appends, reads and head records.

    With what R25/R26 ask of the record: the sessions a store created
    (``remembers``), its format mark (``writes_heads``) and ``upgrade_head``.

    Optional: an in-process store whose append never waits may offer
    ``append_sealed_now(session_id, records, expected_seq) -> int``, the same
    append made synchronously (``None`` where it cannot vouch for that, e.g. a
    subclass that overrides ``append_sealed``); a caller may use it instead of
    awaiting ``append_sealed`` (the journal does, issue 29 item 3).
    """

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
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        *,
        events: Sequence[Event | UnknownEvent] | None = None,
    ) -> int:
        """Append already-sealed records atomically; return the new last seq.

        ``events``, when given, are the records' decoded events, one per
        record in the same order (a journal holds them: ``seal_event``
        made each record and its event together). A store may project the
        batch's facts and index entries from them instead of decoding the
        bytes again, or ignore them; what it checks and stores is the
        records' bytes, and its facts are the same bytes either way (R4).
        A store written before ``events`` existed takes three arguments;
        ``append_with_events`` calls each store as it takes them.
        """
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

    async def close(self) -> None:
        """Release connections; a closed store may not be used again."""
        ...


@runtime_checkable
class FactsLog(Protocol):
    """The decision facts of every session: the outbox, reads, consumer groups."""

    url: str

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

    async def close(self) -> None:
        """Release connections; a closed store may not be used again."""
        ...


@runtime_checkable
class SessionIndex(Protocol):
    """Open turns and pending asks across sessions, repairable from the streams."""

    url: str

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


@runtime_checkable
class EventStore(StreamRecorder, FactsLog, SessionIndex, Protocol):
    """Where session streams live: all three ports. Every adapter passes
    ``tests/contracts``; a caller that needs one port may ask for just it."""


class StoreBase:
    """What every adapter shares: ``append`` in terms of ``head``/``append_sealed``."""

    chain_key: bytes | None = None
    url: str = ""
    # The signing key and trusted public keys of signed heads (issue 30);
    # ``None``: nothing is signed or checked.
    signer: HeadSigner | None = None

    async def head(self, session_id: str) -> tuple[int, str]:
        raise NotImplementedError

    async def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        *,
        events: Sequence[Event | UnknownEvent] | None = None,
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


# Per store class: whether its ``append_sealed`` takes ``events`` (read once).
_TAKES_EVENTS: dict[type, bool] = {}


def append_with_events(
    store: StreamRecorder,
    session_id: str,
    records: Sequence[StoredEvent],
    expected_seq: int,
    events: Sequence[Event | UnknownEvent],
) -> Coroutine[Any, Any, int]:
    """``store.append_sealed`` with the records' decoded ``events``, where
    the store takes them; a store written to the port before ``events``
    existed (three arguments) is called as it was.

    Returns the append's coroutine (the caller awaits it): no frame of this
    helper lives through the store's round trip.
    """
    kind = type(store)
    takes = _TAKES_EVENTS.get(kind)
    if takes is None:
        takes = _TAKES_EVENTS[kind] = _takes_events(kind)
    if takes:
        return store.append_sealed(session_id, records, expected_seq, events=events)
    return store.append_sealed(session_id, records, expected_seq)


def _takes_events(kind: type) -> bool:
    """Whether ``kind.append_sealed`` accepts an ``events`` keyword."""
    try:
        parameters = inspect.signature(kind.append_sealed).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False  # nothing to inspect: called the way the port began
    named = parameters.get("events")
    if named is not None:
        return named.kind in (named.POSITIONAL_OR_KEYWORD, named.KEYWORD_ONLY)
    return any(p.kind is p.VAR_KEYWORD for p in parameters.values())


async def read_verified(store: StreamRecorder, session_id: str) -> list[StoredEvent]:
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
    store: StreamRecorder,
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
