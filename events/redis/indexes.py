"""A Redis store's session indexes: open turns, pending asks, their repair.

Pattern: projections kept in sharded hashes (``helmlog:open:{<n>}``,
         ``helmlog:asks:{<n>}``) beside the streams, which stay the truth:
         read by ``HKEYS``/``HVALS`` on every shard, recomputed from a stream
         by ``reindex`` (through the outbox's shard script) and from every
         stream by ``repair_indexes``.
Role:    events layer, ``events/redis``; the store's ``SessionIndex`` port.

Laws: R7 (``open_turns``), R18 (``pending_asks``), R11 (a facts cursor whose
stream is gone is dropped by its reindex), R4 (reindex also publishes).
"""

from __future__ import annotations

import asyncio

from .._index import PendingAsk, decode_ask
from .backend import Backend
from .outbox import Outbox
from .reader import Reader


class Indexes:
    """The open-turn and pending-ask indexes of one Redis store."""

    __slots__ = ("_backend", "_outbox", "_reader")

    def __init__(self, backend: Backend, reader: Reader, outbox: Outbox) -> None:
        self._backend = backend
        self._reader = reader
        self._outbox = outbox

    async def open_turns(self) -> list[str]:
        replies = await self._backend.shard_reads("HKEYS", 1, "list the open turns of")
        return sorted({bytes(k).decode() for keys in replies for k in keys})

    async def pending_asks(self) -> list[PendingAsk]:
        replies = await self._backend.shard_reads(
            "HVALS", 2, "list the pending asks of"
        )
        asks = [decode_ask(bytes(v)) for values in replies for v in values]
        return sorted(asks, key=lambda a: (a.session_id, a.seq))

    async def reindex(self, session_id: str) -> None:
        await self._outbox.publish(session_id, index=True)

    async def repair_indexes(self) -> int:
        sessions = set(await self._reader.sessions())
        sessions |= set(await self.open_turns())
        sessions |= {a.session_id for a in await self.pending_asks()}
        # A cursor whose stream is gone is dropped by its reindex (R11).
        cursors = await self._backend.shard_reads(
            "HKEYS", 3, "list the facts cursors of"
        )
        sessions |= {bytes(k).decode() for keys in cursors for k in keys}
        gate = asyncio.Semaphore(16)

        async def one(session_id: str) -> None:
            async with gate:
                await self._outbox.publish(session_id, index=True)

        await asyncio.gather(*(one(s) for s in sessions))
        return len(sessions)
