"""What a Redis store remembers: the sessions it created, the format it writes.

Pattern: two records that outlive a session's keys — a per-session marker,
         written by the append script itself, and a store-wide registry,
         written after a session's first append — and a store-wide format
         mark, written once per store instance before its first append.
Role:    events layer, ``events/redis``; the store's ``remembers``,
         ``writes_heads`` and ``upgrade_head``; the appender calls
         ``mark_format`` before its first landing, and sends a new session's
         registry entry in its next round trip (an ``S`` operation).

Laws: R25 (a store remembers every session it created), R26 (a store this
version wrote is marked as writing heads; an older stream gets its head only
through ``upgrade_head``), R11. Two records of one fact: the marker shares
the session's slot (atomic with the append, deleted with the session's keys);
the registry lives in other slots and survives that. Either answers.
"""

from __future__ import annotations

import logging

from .._chain import StreamHead, encode_head, head_of, verify_records
from .._errors import StoreError
from .backend import Backend
from .keys import FORMAT_HEADS, FORMAT_KEY, head_key, known_key, registry_key
from .reader import Reader
from .wire import DRIVER_ERRORS

log = logging.getLogger("helmlog.events")


class Registry:
    """The sessions one Redis store created and its format mark (R25, R26)."""

    __slots__ = ("_backend", "_format_marked", "_reader")

    def __init__(self, backend: Backend, reader: Reader) -> None:
        self._backend = backend
        self._reader = reader
        # Whether this instance has marked (or seen marked) the store's
        # format; a store marked once stays marked, so True is never re-read.
        self._format_marked = False

    @property
    def format_marked(self) -> bool:
        """Whether this instance has marked (or seen marked) the format."""
        return self._format_marked

    async def mark_format(self) -> None:
        """Mark the store as one that writes heads, once per instance (R26)."""
        if not self._format_marked:
            await self._backend.set(FORMAT_KEY, "SET", FORMAT_KEY, FORMAT_HEADS)
            self._format_marked = True

    async def remembers(self, session_id: str) -> bool:
        known = known_key(session_id)
        registry = registry_key(self._backend.shard(session_id))
        try:
            await self._backend.routes.prepare()
            replies = await self._backend.routes.call(
                [
                    (known, ("EXISTS", known)),
                    (registry, ("SISMEMBER", registry, session_id)),
                ]
            )
        except DRIVER_ERRORS as exc:
            raise self._backend.error("ask what it remembers of", exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self._backend.error("ask what it remembers of", reply) from reply
        return any(int(reply) for reply in replies)

    async def writes_heads(self) -> bool:
        if self._format_marked:
            return True
        try:
            await self._backend.routes.prepare()
            mark = await self._backend.routes.one(FORMAT_KEY, "GET", FORMAT_KEY)
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read the format mark of", exc) from exc
        if mark is not None and bytes(mark) == FORMAT_HEADS:
            self._format_marked = True
        return self._format_marked

    async def upgrade_head(self, session_id: str) -> StreamHead | None:
        written = None
        head = await self._reader.read_head(session_id)
        if head is None:
            records = await self._reader.read(session_id)
            if not records:
                return None
            verify_records(session_id, records, self._backend.chain_key)
            last = records[-1]
            head = head_of(session_id, last.seq, last.hash, self._backend.chain_key)
            key = head_key(session_id)
            # NX: an append of this version landing meanwhile wrote a newer head.
            written = await self._backend.set(key, "SET", key, encode_head(head), "NX")
        await self._backend.set(FORMAT_KEY, "SET", FORMAT_KEY, FORMAT_HEADS)
        self._format_marked = True
        known = known_key(session_id)
        await self._backend.set(known, "SET", known, b"1")
        await self.register(session_id, strict=True)
        return head if written is not None else None

    async def register(self, session_id: str, *, strict: bool = False) -> None:
        """Add the session to the store-wide registry (R25).

        After a first append, a failure is logged, not raised: the append
        landed, and its marker, written in the same step, remembers it.
        """
        key = registry_key(self._backend.shard(session_id))
        try:
            await self._backend.set(key, "SADD", key, session_id)
        except StoreError as exc:
            if strict:
                raise
            log.warning(
                "redis event store %s: session %s is not in the sessions "
                "registry (%s); its marker remembers it",
                self._backend.url,
                session_id,
                exc,
                extra={"session_id": session_id},
            )
