"""What a Redis store remembers: the sessions it created and the format it writes.

Pattern: a part of ``RedisEventStore`` over the books of ``_redis_base.py``:
         two records that outlive a session's keys — a per-session marker,
         written by the append script itself, and a store-wide registry —
         and a store-wide format mark, written once per store instance.
Role:    events layer; the port's ``remembers``, ``writes_heads`` and
         ``upgrade_head`` for Redis, and the wrapper of ``append_sealed``
         that keeps the registry and the mark.
Emits:   ``helmlog:{<session_id>}:known`` (the append script, on a session's
         first append), ``helmlog:sessions:{<n>}`` (after it), and
         ``helmlog:format`` (before this instance's first append).

Laws: R25 (a store remembers every session it created: a checkpoint of one
it no longer holds is refused), R26 (a store written by this version is
marked as one that writes heads; an older stream gets its head only through
``upgrade_head``), R11 (the marker shares its session's slot; the registry
is sharded ``{<n>}`` like every key spanning sessions).

Why two records of one fact: the marker is written in the append's own
atomic step, so no crash leaves a created session unremembered, but it
carries the session's hash tag, so whoever deletes every key of that tag
deletes it too. The registry lives in other slots and survives that; it
cannot join the append's script (a cluster runs a script on one slot), so it
follows the first append, and a crash between the two leaves only the
marker. ``remembers`` answers true on either. Neither costs the hot path a
round trip: the marker rides in the append script, the registry costs one
on a session's first append, the format mark one per store instance.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ._chain import StoredEvent, StreamHead, encode_head, head_of, verify_records
from ._envelope import Event
from ._errors import StoreError
from ._redis_append import RedisAppends
from ._redis_keys import FORMAT_HEADS, FORMAT_KEY, head_key, known_key, registry_key
from ._redis_wire import DRIVER_ERRORS

log = logging.getLogger("helmlog.events")


class RedisRegistry(RedisAppends):
    """The appends of the Redis store, with what it remembers (R25, R26)."""

    # Whether this instance has marked (or seen marked) the store's format;
    # a store marked once stays marked, so True is never read again.
    _format_marked: bool = False

    async def _landed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        prev_hash: str,
        stamped: Sequence[Event] | None,
    ) -> int:
        if not self._format_marked:
            # R26: marked before this version's first append lands, so no
            # head record this store writes sits on an unmarked store.
            await self._set(FORMAT_KEY, "SET", FORMAT_KEY, FORMAT_HEADS)
            self._format_marked = True
        seq = await super()._landed(
            session_id, records, expected_seq, prev_hash, stamped
        )
        if expected_seq == 0:
            await self._register(session_id)
        return seq

    async def remembers(self, session_id: str) -> bool:
        known = known_key(session_id)
        registry = registry_key(self._shard(session_id))
        try:
            await self._routes.prepare()
            replies = await self._routes.call(
                [
                    (known, ("EXISTS", known)),
                    (registry, ("SISMEMBER", registry, session_id)),
                ]
            )
        except DRIVER_ERRORS as exc:
            raise self._error("ask what it remembers of", exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self._error("ask what it remembers of", reply) from reply
        return any(int(reply) for reply in replies)

    async def writes_heads(self) -> bool:
        if self._format_marked:
            return True
        try:
            await self._routes.prepare()
            mark = await self._routes.one(FORMAT_KEY, "GET", FORMAT_KEY)
        except DRIVER_ERRORS as exc:
            raise self._error("read the format mark of", exc) from exc
        if mark is not None and bytes(mark) == FORMAT_HEADS:
            self._format_marked = True
        return self._format_marked

    async def upgrade_head(self, session_id: str) -> StreamHead | None:
        written = None
        head = await self.read_head(session_id)
        if head is None:
            records = await self.read(session_id)
            if not records:
                return None
            verify_records(session_id, records, self.chain_key)
            last = records[-1]
            head = head_of(session_id, last.seq, last.hash, self.chain_key)
            key = head_key(session_id)
            # NX: an append of this version landing meanwhile wrote a newer head.
            written = await self._set(key, "SET", key, encode_head(head), "NX")
        await self._set(FORMAT_KEY, "SET", FORMAT_KEY, FORMAT_HEADS)
        self._format_marked = True
        known = known_key(session_id)
        await self._set(known, "SET", known, b"1")
        await self._register(session_id, strict=True)
        return head if written is not None else None

    async def _register(self, session_id: str, *, strict: bool = False) -> None:
        """Add the session to the store-wide registry (R25).

        After a first append, a failure is logged, not raised: the append
        landed, and its marker, written in the same step, remembers it.
        """
        key = registry_key(self._shard(session_id))
        try:
            await self._set(key, "SADD", key, session_id)
        except StoreError as exc:
            if strict:
                raise
            log.warning(
                "redis event store %s: session %s is not in the sessions "
                "registry (%s); its marker remembers it",
                self.url,
                session_id,
                exc,
                extra={"session_id": session_id},
            )

    async def _set(self, key: str, *command: bytes | str | int) -> object:
        """One write; a driver error or an error reply is a ``StoreError``."""
        try:
            await self._routes.prepare()
            return await self._routes.one(key, *command)
        except DRIVER_ERRORS as exc:
            raise self._error("write to", exc) from exc
