"""What every part of the Redis store shares: its books and their keeping.

Pattern: the state of one ``RedisEventStore`` declared in one place (routes,
         shard keys, the head cache, the append queue, the shard operations
         waiting to be sent, the facts cursors' notes and what the store
         vouches for), with the small operations that keep those books; the
         parts of the store (reads, facts groups, outbox, appends) are
         classes over this one, composed in ``_redis_store.py``.
Role:    events layer; the base of ``RedisReads``, ``RedisGroups``,
         ``RedisOutbox`` and ``RedisAppends``; ``RedisEventStore.__init__``
         fills the books.
Emits:   nothing.

Laws: R5 (``_error``: every driver error becomes a ``StoreError`` naming the
store), R4 (the outbox's books: ``_marks`` holds cursor moves of published
facts, ``_vouched`` the seq up to which this store knows every fact of a
session is published or queued ahead; a turn's close is sent only for a
session it vouches for), R2 (the head cache is only a guess; the append
script's check is the truth).

Why the state is declared apart from the code that fills it: each part of
the store reads books another part writes (an append's settling notes the
cursor moves the outbox sends); one declaration keeps them one set of books,
typed once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

import redis.asyncio as aioredis

from ._errors import StoreError
from ._index import shard_of
from ._redis_keys import Op, records_into, stream_key
from ._redis_scripts import SHARD_SHA
from ._redis_wire import DRIVER_ERRORS, Arg, Routes, StoreOptions
from ._store import StoreBase

log = logging.getLogger("helmlog.events")

_HEAD_CACHE_MAX: Final = 65_536
_OPS_BACKLOG_MAX: Final = 100_000


class QueuedAppend:
    """One queued append: its script arguments and the caller's future."""

    __slots__ = (
        "acked",
        "after",
        "args",
        "expected",
        "future",
        "last_hash",
        "last_seq",
        "premark",
        "resolving",
        "session_id",
        "token",
    )

    def __init__(
        self,
        session_id: str,
        expected: int,
        args: list[Arg],
        last_hash: str,
        after: list[Op],
        premark: Op | None,
        future: asyncio.Future[int],
    ) -> None:
        self.session_id = session_id
        self.expected = expected
        self.args = args
        self.last_hash = last_hash
        self.after = after
        self.premark = premark
        self.future = future
        # Landed; resolved once its index entries are sent (``_release``).
        self.acked = False
        # R24: the append's token (its last entry's ``w``), the seq the batch
        # ends at were it in the stream, and whether its reply was lost and a
        # read-back now settles it (``_redis_resolve.py``).
        self.token = ""
        self.last_seq = expected
        self.resolving = False


class RedisStoreBase(StoreBase):
    """The books of one Redis event store (filled by ``RedisEventStore``)."""

    options: StoreOptions
    _client: aioredis.Redis
    _routes: Routes
    _shards: list[tuple[str, str, str, str]]
    _writer: str
    _tokens: int
    _heads: dict[str, tuple[int, str]]
    _queue: list[QueuedAppend]
    _ops: list[tuple[int, Op]]
    _marks: dict[tuple[int, str], tuple[int, int]]
    _vouched: dict[str, int]
    _inflight: list[tuple[int, Op]]
    _acks: list[tuple[asyncio.Future[int], int]]
    _flusher: asyncio.Task[None] | None
    _closed: bool
    # R24: the read-backs under way (``_redis_resolve.py``); made on first use.
    _resolving: set[asyncio.Task[None]] | None = None

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"could not {what} the redis event store {self.url}: "
            f"{type(exc).__name__}: {exc}"
        )

    def _shard(self, session_id: str) -> int:
        return shard_of(session_id, self.options.shards)

    async def _shard_reads(self, command: str, slot: int, what: str) -> list[Any]:
        try:
            await self._routes.prepare()
            keyed = [(keys[slot], (command, keys[slot])) for keys in self._shards]
            replies = await self._routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self._error(what, exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self._error(what, reply) from reply
        return replies

    def _shard_command(self, keys: Sequence[str], ops: Sequence[Op]) -> list[Arg]:
        args: list[Arg] = [
            "EVALSHA", SHARD_SHA, 4, *keys, self.options.facts_maxlen
        ]  # fmt: skip
        for op in ops:
            args.extend(op)
        return args

    async def _fetch_head(self, session_id: str) -> tuple[int, str]:
        key = stream_key(session_id)
        try:
            await self._routes.prepare()
            top = await self._routes.one(key, "XREVRANGE", key, "+", "-", "COUNT", 1)
        except DRIVER_ERRORS as exc:
            raise self._error("read the head of", exc) from exc
        if not top:
            self._heads.pop(session_id, None)
            return 0, ""
        record = records_into([], top, session_id)[0]
        head = (record.seq, record.hash)
        self._remember(session_id, head)
        return head

    def _remember(self, session_id: str, head: tuple[int, str]) -> None:
        heads = self._heads
        heads.pop(session_id, None)
        if len(heads) >= _HEAD_CACHE_MAX:
            del heads[next(iter(heads))]
        heads[session_id] = head

    def _vouches(self, session_id: str, expected_seq: int) -> bool:
        """Whether every fact up to ``expected_seq`` is published or queued here."""
        return expected_seq == 0 or self._vouched.get(session_id) == expected_seq

    def _vouch(self, session_id: str, seq: int) -> None:
        vouched = self._vouched
        vouched.pop(session_id, None)
        if len(vouched) >= _HEAD_CACHE_MAX:
            del vouched[next(iter(vouched))]
        vouched[session_id] = seq

    def _vouch_at_least(self, session_id: str, seq: int) -> None:
        if self._vouched.get(session_id, -1) < seq:
            self._vouch(session_id, seq)

    def _mark(self, n: int, session_id: str, start: int, end: int) -> None:
        """Note that the facts of ``(start, end]`` are published (a cursor move)."""
        key = (n, session_id)
        held = self._marks.get(key)
        if held is not None and held[0] <= start <= held[1]:
            self._marks[key] = (held[0], max(held[1], end))
        else:
            # A gap: the cursor was moved past ``held`` meanwhile (a publish
            # that re-vouched the session), so the newer range supersedes it.
            self._marks[key] = (start, end)

    def _take_ops(self) -> list[tuple[int, Op]]:
        ops, self._ops = self._ops, []
        return ops

    def _take_marks(self) -> list[tuple[int, Op]]:
        marks, self._marks = self._marks, {}
        return [
            (n, ("K", sid, end, start, b"")) for (n, sid), (start, end) in marks.items()
        ]

    def _requeue(self, ops: list[tuple[int, Op]], exc: BaseException) -> None:
        if not ops:
            return
        room = max(0, _OPS_BACKLOG_MAX - len(self._ops))
        kept = ops[:room]
        for _n, op in ops[room:]:
            self._vouched.pop(op[1], None)  # dropped: publish_facts must vouch
        self._ops[:0] = kept
        log.warning(
            "redis event store %s: sending %d fact/index operations failed "
            "(%s: %s); %d kept for the next flush, %d left to publish_facts",
            self.url,
            len(ops),
            type(exc).__name__,
            exc,
            len(kept),
            len(ops) - len(kept),
        )
