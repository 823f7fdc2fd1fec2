"""The log of signed heads on Redis: one list of leaf hashes and its index.

Pattern: two keys under one hash tag (``{evidence}``: one slot, so one script
         appends atomically on a cluster too); the append script skips a leaf
         the index holds, so a resend or a repair never appends it twice;
         landed heads' leaves go by group commit, off the append's path.
Role:    events layer, ``events/redis``; the store appends after each append
         that holds a signed head, and ``reindex``/``repair_indexes`` append
         what the streams hold and the log lacks.

Laws: issue 30 item 2. Why beside the head's script and not in it: a
session's keys share its slot and the log is store-wide; on one server the
log's script rides in the append's pipeline (same round trip, checking the
head landed), on a cluster it follows the landing; a head whose leaf failed
to land is in its stream, and repair appends it (nothing moved or removed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

from .._errors import StoreError
from .._signed_heads import head_leaves
from .backend import Backend
from .keys import HEADLOG_AT_KEY, HEADLOG_KEY
from .reader import Reader
from .wire import DRIVER_ERRORS, Arg

log = logging.getLogger("helmlog.events")

# KEYS[1] the log (list), KEYS[2] its index (hash leaf -> index); ARGV the
# leaves. Returns how many were appended.
APPEND_LEAVES_LUA: Final = b"""
local added = 0
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then
    local size = redis.call('RPUSH', KEYS[1], ARGV[i])
    redis.call('HSET', KEYS[2], ARGV[i], size - 1)
    added = added + 1
  end
end
return added
"""


# The log's share of an append, sent in the append's own pipeline (one round
# trip) on a single server: KEYS[1] the log, KEYS[2] its index, KEYS[3] the
# session's stream; ARGV[1] the signed head's seq, ARGV[2] its stored hash,
# then the leaves. Appends only when the stream holds that record, so a
# refused append never leaves a head in the log. Returns how many appended.
LEAVES_AFTER_APPEND_LUA: Final = b"""
local id = '0-' .. ARGV[1]
local entry = redis.call('XRANGE', KEYS[3], id, id)
if #entry == 0 then return 0 end
local fields, landed = entry[1][2], false
for i = 1, #fields, 2 do
  if fields[i] == 'hash' and fields[i + 1] == ARGV[2] then landed = true end
end
if not landed then return 0 end
local added = 0
for i = 3, #ARGV do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then
    local size = redis.call('RPUSH', KEYS[1], ARGV[i])
    redis.call('HSET', KEYS[2], ARGV[i], size - 1)
    added = added + 1
  end
end
return added
"""


def after_append_command(stream: str, heads: tuple[int, str, list[bytes]]) -> list[Arg]:
    """The log's share of an append, to ride in its pipeline (one server)."""
    seq, stored_hash, leaves = heads
    return [
        "EVAL", LEAVES_AFTER_APPEND_LUA, 3, HEADLOG_KEY, HEADLOG_AT_KEY, stream,
        seq, stored_hash, *leaves,
    ]  # fmt: skip


class RedisHeadLog:
    """The store-wide log of signed heads in one Redis slot.

    A landed append's leaves are queued and sent by one flusher, many appends'
    leaves in one script call (a group commit), off the append's own path;
    every read of the log, ``repair`` and the store's ``close`` wait for the
    queue first, so a store reads its own writes.
    """

    __slots__ = ("_backend", "_flusher", "_queue", "_reader")

    def __init__(self, backend: Backend, reader: Reader) -> None:
        self._backend = backend
        self._reader = reader
        self._queue: list[tuple[str, bytes]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def append(self, leaves: Sequence[bytes]) -> int:
        """Append the leaves the log lacks, in order; how many were appended.

        Raises:
            StoreError: the server could not be reached or refused.
        """
        if not leaves:
            return 0
        reply = await self._backend.set(
            HEADLOG_KEY,
            "EVAL",
            APPEND_LEAVES_LUA,
            2,
            HEADLOG_KEY,
            HEADLOG_AT_KEY,
            *leaves,
        )
        return int(str(reply))  # the script returns an integer

    def after_append(self, session_id: str, leaves: Sequence[bytes]) -> None:
        """Queue a landed append's leaves for the flusher."""
        self._queue.extend((session_id, leaf) for leaf in leaves)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self.append([leaf for _sid, leaf in batch])
            except StoreError as exc:
                # The heads are in their streams: repair appends them.
                log.warning(
                    "redis event store %s: %d signed heads (sessions %s) are in "
                    "their streams but not yet in the log of heads (%s); "
                    "reindex or `helmlog evidence` appends them",
                    self._backend.url,
                    len(batch),
                    ", ".join(sorted({sid for sid, _leaf in batch})),
                    exc,
                )

    async def drain(self) -> None:
        """Wait until every queued leaf was sent (or its failure logged)."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    async def leaves(self, size: int | None = None) -> list[bytes]:
        if size is not None and size <= 0:
            return []
        await self.drain()
        stop = -1 if size is None else size - 1
        try:
            await self._backend.routes.prepare()
            reply = await self._backend.routes.one(
                HEADLOG_KEY, "LRANGE", HEADLOG_KEY, 0, stop
            )
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read the log of heads of", exc) from exc
        return [bytes(leaf) for leaf in reply]

    async def index(self, leaf: bytes) -> int | None:
        await self.drain()
        try:
            await self._backend.routes.prepare()
            reply = await self._backend.routes.one(
                HEADLOG_AT_KEY, "HGET", HEADLOG_AT_KEY, leaf
            )
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read the log of heads of", exc) from exc
        return None if reply is None else int(reply)

    async def repair(self, session_id: str | None = None) -> int:
        await self.drain()
        sessions = (
            sorted(await self._reader.sessions())
            if session_id is None
            else [session_id]
        )
        added = 0
        for sid in sessions:
            added += await self.append(head_leaves(await self._reader.read(sid)))
        return added
