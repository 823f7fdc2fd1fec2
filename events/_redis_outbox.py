"""The Redis store's facts outbox and indexes: publish, reindex, repair.

Pattern: an outbox (R4): each session has a cursor (``facts-at``) that only
         ever covers a range whose every fact is on the facts stream;
         ``publish_facts`` reads the stream after it, publishes, and moves it
         in one shard script that skips the move when a fact is refused. The
         shard operations of appends (facts, index entries, cursor moves) are
         built into commands and settled here.
Role:    events layer; the outbox half of ``RedisEventStore``: the port's
         ``publish_facts``, ``reindex``, ``repair_indexes``; the append path
         (``_redis_append.py``) sends its shard operations through
         ``_shard_commands`` and settles them with ``_check_shards``.
Emits:   decision facts to the facts shards ``helmlog:facts:{<n>}`` and the
         open-turn and pending-ask index entries (R4, R7, R18).

Laws: R4 (a turn's close lands only after every earlier fact of its session;
a session with an unpublished fact keeps its open mark, so the hosts' sweep
finds it), R7/R18 (the indexes of ``events/_index.py``; every rule is
seq-guarded, so a late or repeated operation is harmless), R11 (a cursor
whose stream is gone is dropped by its reindex), R5.

Why facts are an outbox: the facts shards live in other slots than the
session, so a fact cannot join its append's atomic step; a host can die, a
shard refuse, or a reply be lost between the two. The open-turn index is the
outbox's index: this store sends a turn's close only for a session it
vouches for (every earlier fact published or queued ahead here; else it
first runs ``publish_facts``), and a close riding with facts goes through
the same script after them and is skipped if one is refused.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any, Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from ._errors import StoreError
from ._index import delta_of
from ._redis_base import QueuedAppend
from ._redis_keys import Op, fact_ops, index_op, scripted
from ._redis_reads import RedisReads
from ._redis_wire import DRIVER_ERRORS, Command

log = logging.getLogger("helmlog.events")

# How long publish_facts waits for this store's own queued facts of a session.
_SETTLE_WAIT_S: Final = 1.0
# The operations that publish facts or move a facts cursor.
_OUTBOX_CODES: Final = frozenset({"F", "B", "K"})


class RedisOutbox(RedisReads):
    """The facts outbox and the indexes of the Redis event store."""

    async def publish_facts(self, session_id: str) -> int:
        """Publish the session's facts after its cursor; return how many.

        Reads only the stream after the cursor (``helmlog:facts-at:{<n>}``),
        publishes its facts and then moves the cursor, in one shard script
        that skips the move (and the close below) when a fact is refused; so
        the cursor never passes a fact that is not on the facts stream.
        Running it twice, or beside appends, is harmless: the script
        publishes only facts after the cursor as it stands. A turn's close in
        what it read is sent too (seq-guarded), since this store may have
        held it back (R4: a close lands only after its session's facts).
        """
        return (await self._publish(session_id, index=False))[1]

    async def republish_facts(self, session_id: str) -> int:
        """Deprecated: ``publish_facts`` (the outbox's port method) is its name."""
        warnings.warn(
            "RedisEventStore.republish_facts is deprecated; use publish_facts",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.publish_facts(session_id)

    async def reindex(self, session_id: str) -> None:
        await self._reindex(session_id)

    async def repair_indexes(self) -> int:
        sessions = set(await self.sessions())
        sessions |= set(await self.open_turns())
        sessions |= {a.session_id for a in await self.pending_asks()}
        # A cursor whose stream is gone is dropped by its reindex (R11).
        cursors = await self._shard_reads("HKEYS", 3, "list the facts cursors of")
        sessions |= {bytes(k).decode() for keys in cursors for k in keys}
        gate = asyncio.Semaphore(16)

        async def one(session_id: str) -> None:
            async with gate:
                await self._reindex(session_id)

        await asyncio.gather(*(one(s) for s in sessions))
        return len(sessions)

    async def _reindex(self, session_id: str) -> tuple[int, int]:
        return await self._publish(session_id, index=True)

    async def _publish(self, session_id: str, *, index: bool) -> tuple[int, int]:
        """Publish after the cursor (and with ``index`` repair the index entries).

        Returns ``(operations sent, facts published)``.
        """
        what = "reindex" if index else "publish the facts of"
        n = self._shard(session_id)
        keys = self._shards[n]
        await self._settled(session_id)
        # This process's own unsent cursor note goes first, so what it
        # published already is not read (or published) again.
        held = self._marks.pop((n, session_id), None)
        ops: list[Op] = []
        try:
            await self._routes.prepare()
            at = await self._routes.one(keys[3], "HGET", keys[3], session_id)
            cursor = int(at) if at else 0
            if held is not None:
                ops.append(("K", session_id, held[1], held[0], b""))
                if held[0] <= cursor < held[1]:
                    cursor = held[1]
            records = await self.read(session_id, 0 if index else cursor)
            fresh = [r for r in records if r.seq > cursor]
            ops.extend(scripted(op) for op in fact_ops(session_id, fresh))
            last = records[-1].seq if records else 0
            if index:
                ops.append(index_op(session_id, records, last))
            else:
                delta = delta_of(session_id, fresh)
                if delta is not None and delta.close_at:
                    ops.append(("C", session_id, delta.close_at, 0, b""))
            if last > cursor:
                ops.append(("K", session_id, last, cursor, b""))
            if not ops:
                self._vouch_at_least(session_id, cursor)
                return 0, 0
            reply = await self._routes.one(keys[0], *self._shard_command(keys, ops))
        except (*DRIVER_ERRORS, StoreError) as exc:
            if held is not None:
                self._mark(n, session_id, *held)
            if isinstance(exc, StoreError):
                raise
            raise self._error(f"{what} a session of", exc) from exc
        failed, first, count, _refused = reply
        if failed:
            self._vouched.pop(session_id, None)
            raise StoreError(
                f"could not {what} session {session_id!r} in the redis event store "
                f"{self.url}: {int(failed)} operations failed: {bytes(first).decode()}"
            )
        self._vouch_at_least(session_id, max(cursor, last))
        return len(ops), int(count)

    async def _settled(self, session_id: str) -> None:
        """Wait (briefly) until no fact or cursor move of the session is queued
        or under way here, so publishing does not race this store's own."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SETTLE_WAIT_S
        while (
            self._flusher is not None
            and not self._flusher.done()
            and self._owes(session_id)
            and loop.time() < deadline
        ):
            await asyncio.sleep(0.001)

    def _owes(self, session_id: str) -> bool:
        return any(
            op[1] == session_id and op[0] in _OUTBOX_CODES
            for _n, op in (*self._inflight, *self._ops)
        )

    def _shard_commands(
        self, staged: list[tuple[int, Op]]
    ) -> tuple[list[tuple[str, Command]], list[list[int]]]:
        """The commands for ``staged`` and, for each, the indexes it carries.

        A fact is a plain ``XADD`` (the hot path: a script call costs more
        than the write), unless a close of its session rides along: then its
        facts go through the shard script, ahead of the close, so the close
        is skipped when a fact is refused (R4: a session with an unpublished
        fact keeps its open mark). ``B`` (a batch's facts are out) is a local
        note, never sent; index operations and cursor moves go through the
        shard script, in queue order.
        """
        commands: list[tuple[str, Command]] = []
        owners: list[list[int]] = []
        by_shard: dict[int, list[int]] = {}
        closing = {op[1] for _n, op in staged if op[0] == "C"}
        maxlen = self.options.facts_maxlen
        for i, (n, (code, sid, a, _b, value)) in enumerate(staged):
            if code == "B":
                continue
            if code == "F" and sid not in closing:
                key = self._shards[n][0]
                commands.append(
                    (
                        key,
                        (
                            "XADD", key, "MAXLEN", "~", maxlen, "*",
                            "session_id", sid, "seq", a, "data", value,
                        ),
                    )
                )  # fmt: skip
                owners.append([i])
            else:
                by_shard.setdefault(n, []).append(i)
        for n, carried in by_shard.items():
            keys = self._shards[n]
            ops = [scripted(staged[i][1]) for i in carried]
            commands.append((keys[0], self._shard_command(keys, ops)))
            owners.append(carried)
        return commands, owners

    def _marks_refused(
        self,
        staged: list[tuple[int, Op]],
        owners: list[list[int]],
        replies: list[Any],
        batch: list[QueuedAppend],
    ) -> dict[str, Exception]:
        """Sessions whose open mark did not land: their appends must wait."""
        refused: dict[str, Exception] = {}
        for carried, reply in zip(owners, replies, strict=True):
            if isinstance(reply, Exception):
                for i in carried:
                    op = staged[i][1]
                    if op[0] == "O":
                        refused[op[1]] = reply
        return {
            i.session_id: refused[i.session_id]
            for i in batch
            if i.premark and i.session_id in refused
        }

    def _check_shards(
        self, staged: list[tuple[int, Op]], owners: list[list[int]], replies: list[Any]
    ) -> None:
        """Settle the shard operations: cursor notes, refusals, requeues."""
        lost: set[int] = set()
        refusals: list[str] = []
        unpublished: set[str] = set()
        for carried, reply in zip(owners, replies, strict=True):
            if isinstance(reply, ResponseError):
                # The server refused (a key of the wrong type): resending
                # would fail again; publish_facts publishes from the stream.
                refusals.append(str(reply))
                unpublished.update(
                    staged[i][1][1] for i in carried if staged[i][1][0] in ("F", "P")
                )
            elif isinstance(reply, Exception):
                lost.update(carried)  # a node failed: send again next flush
            elif isinstance(reply, list) and len(reply) == 4 and reply[0]:
                refusals.append(bytes(reply[1]).decode(errors="replace"))
                unpublished.update(bytes(s).decode() for s in reply[3])
        for sid in unpublished:
            self._vouched.pop(sid, None)
        lost_sessions = {staged[i][1][1] for i in lost}
        for i, (n, (code, sid, a, b, _v)) in enumerate(staged):
            if code != "B" or sid in unpublished:
                continue
            if sid in lost_sessions:
                lost.add(i)  # noted once the facts before it are out
            else:
                self._mark(n, sid, b, a)
        if refusals:
            log.warning(
                "redis event store %s: %d facts or index entries not published "
                "(%s); publish_facts(session_id) or the hosts' sweep publishes "
                "them from the streams",
                self.url,
                len(refusals),
                refusals[0],
            )
        if lost:
            self._requeue(
                [staged[i] for i in sorted(lost)],
                RedisConnectionError("a shard node failed"),
            )
