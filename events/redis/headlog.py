"""The log of signed heads on Redis: one list of leaf hashes and its index.

Pattern: two keys under one hash tag (``{evidence}``: one slot, so one script
         appends atomically on a cluster too); the append script skips a leaf
         the index holds, so a resend or a repair never appends it twice.
Role:    events layer, ``events/redis``; the store appends after each append
         that holds a signed head, and ``reindex``/``repair_indexes`` append
         what the streams hold and the log lacks.

Laws: issue 30 item 2. Why after the head and not in its script: a session's
keys share the session's slot and the log is store-wide, so on a cluster no
script can touch both; a head whose leaf failed to land is in its stream,
and repair appends it (append-only: nothing is moved or removed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from .._errors import StoreError
from .._signed_heads import head_leaves
from .backend import Backend
from .keys import HEADLOG_AT_KEY, HEADLOG_KEY
from .reader import Reader
from .wire import DRIVER_ERRORS

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


class RedisHeadLog:
    """The store-wide log of signed heads in one Redis slot."""

    __slots__ = ("_backend", "_reader")

    def __init__(self, backend: Backend, reader: Reader) -> None:
        self._backend = backend
        self._reader = reader

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

    async def after_append(self, session_id: str, leaves: Sequence[bytes]) -> None:
        """Append a landed append's leaves; a failure is logged (repair
        appends them from the stream), since the append itself landed."""
        try:
            await self.append(leaves)
        except StoreError as exc:
            log.warning(
                "redis event store %s: the signed head of session %s is in its "
                "stream but not yet in the log of heads (%s); reindex or "
                "`helmlog evidence` appends it",
                self._backend.url,
                session_id,
                exc,
                extra={"session_id": session_id},
            )

    async def leaves(self, size: int | None = None) -> list[bytes]:
        if size is not None and size <= 0:
            return []
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
        try:
            await self._backend.routes.prepare()
            reply = await self._backend.routes.one(
                HEADLOG_AT_KEY, "HGET", HEADLOG_AT_KEY, leaf
            )
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read the log of heads of", exc) from exc
        return None if reply is None else int(reply)

    async def repair(self, session_id: str | None = None) -> int:
        sessions = (
            sorted(await self._reader.sessions())
            if session_id is None
            else [session_id]
        )
        added = 0
        for sid in sessions:
            added += await self.append(head_leaves(await self._reader.read(sid)))
        return added
