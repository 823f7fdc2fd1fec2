"""The event-store port and its in-memory implementation.

Pattern: a port (``EventStore``) with an in-memory adapter; one contract
         suite in ``tests/contracts`` runs against every adapter.
Role:    events layer; the runtime's journal appends through it, ``fold``,
         replay and verification read from it.
Emits:   nothing; it stores what the journal seals.

Laws: R2 (seq 1, 2, 3 … with no gaps; a batch appends atomically only when
the stream's last seq equals ``expected_seq``, else ``SequenceConflictError``
and nothing is appended), R3 (the store keeps each hash beside its event and
chains under its ``chain_key``), R4 (decision facts also go to one global
facts list), R7/R18 (``open_turns`` and ``pending_asks`` answer from an
index kept beside the streams, repairable from them: ``events/_index.py``),
R11 (``MemoryEventStore`` needs no server; ``open_event_store``).

Why sealing happens before ``append_sealed``: the journal needs the stamped
events (seq, prev_hash) to fold and deliver, and a remote store cannot compute
SHA-256 inside its atomic script; so the caller seals against the head it
knows, and the store's seq check makes a stale head a conflict, never a fork.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ._chain import StoredEvent, seal
from ._errors import SequenceConflictError
from ._index import MemoryIndex, PendingAsk, delta_of
from ._types import Event, MiddlewareDecisionEvent


class FactRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One decision fact on the global facts stream, with where it came from."""

    id: str
    session_id: str
    seq: int
    data: bytes


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

    async def sessions(self) -> list[str]:
        """Ids of every session this store holds."""
        ...

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        """Decision facts published after ``after_id`` (all when ``None``)."""
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

    async def reindex(self, session_id: str) -> None:
        """Recompute this session's index entries from its stream; idempotent."""
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


_FACT_TYPE = MiddlewareDecisionEvent.type.encode()


def is_fact_record(record: StoredEvent) -> bool:
    """Whether a stored record is a ``middleware.decision`` fact (cheap check)."""
    return b'"type":"' + _FACT_TYPE + b'"' in record.data[:40]


class MemoryEventStore(StoreBase):
    """Streams in this process's memory: the embedded default (R11).

    Appends are atomic because they never yield to the event loop between the
    seq check and the write.
    """

    def __init__(self, *, chain_key: bytes | None = None) -> None:
        self.chain_key = chain_key
        self.url = "memory://"
        self._streams: dict[str, list[StoredEvent]] = {}
        self._facts: list[FactRecord] = []
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
        delta = delta_of(session_id, records)
        if delta is not None and delta.open_at:
            self._index.mark_open(session_id, delta.open_at)
        stream.extend(records)
        if delta is not None:
            self._index.apply(session_id, delta)
        for record in records:
            if is_fact_record(record):
                self._facts.append(
                    FactRecord(
                        id=str(len(self._facts) + 1),
                        session_id=session_id,
                        seq=record.seq,
                        data=record.data,
                    )
                )
        return stream[-1].seq if stream else 0

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        stream = self._streams.get(session_id, [])
        # Invariant: seq n sits at index n-1 (no gaps), so slicing is exact.
        return list(stream[after_seq:])

    async def sessions(self) -> list[str]:
        return [sid for sid, stream in self._streams.items() if stream]

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        start = int(after_id) if after_id else 0
        return list(self._facts[start:])

    async def open_turns(self) -> list[str]:
        return sorted(self._index.open)

    async def pending_asks(self) -> list[PendingAsk]:
        return sorted(self._index.asks.values(), key=_ask_order)

    async def reindex(self, session_id: str) -> None:
        stream = self._streams.get(session_id, [])
        self._index.replace(session_id, delta_of(session_id, stream))

    async def repair_indexes(self) -> int:
        sessions = set(self._streams) | set(self._index.open) | set(self._index.asks)
        for session_id in sessions:
            await self.reindex(session_id)
        return len(sessions)

    async def close(self) -> None:
        return None


def _ask_order(ask: PendingAsk) -> tuple[str, int]:
    return ask.session_id, ask.seq


def open_event_store(
    url: str | None = None,
    *,
    chain_key: bytes | None = None,
    max_connections: int | None = None,
) -> EventStore:
    """The store a URL names: ``None``/``memory://`` or ``redis://``/``rediss://``.

    ``max_connections`` sizes a Redis store's blocking pool per node (it wins
    over the URL's ``?max_connections=``); the memory store ignores it.
    """
    if url is None or url == "memory://":
        return MemoryEventStore(chain_key=chain_key)
    if url.startswith(("redis://", "rediss://")):
        from ._redis_store import RedisEventStore

        return RedisEventStore.from_url(
            url, chain_key=chain_key, max_connections=max_connections
        )
    raise ValueError(
        f"unknown event store URL {url!r}: use memory:// or redis://host:port/db"
    )
