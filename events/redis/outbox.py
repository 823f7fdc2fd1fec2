"""A Redis store's facts outbox (R4): what is owed to the facts shards.

Pattern: an outbox: each session has a cursor (``facts-at``) that only ever
         covers a range whose every fact is on the facts stream. The outbox
         owns the shard operations owed (facts, index entries), the cursor
         moves noted (marks) and what this store vouches for; ``publish``
         reads a stream after its cursor and publishes in one shard script.
Role:    events layer, ``events/redis``; the appender sends its shard
         operations through it (``shard_commands``, ``check_shards``).

Laws: R4 (a turn's close lands only after every earlier fact of its session:
it is sent only for a session this store vouches for, else after
``publish``; a session with an unpublished fact keeps its open mark, so the
hosts' sweep finds it), R7/R18 (every index rule is seq-guarded), R5.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .._errors import StoreError
from .._index import delta_of
from .backend import Backend, put_bounded
from .keys import Op, Staged, fact_ops, index_op, registry_key, scripted, unstaged
from .queued import QueuedAppend
from .reader import Reader
from .wire import DRIVER_ERRORS, Command, pack

log = logging.getLogger("helmlog.events")

# How long publish_facts waits for this store's own queued facts of a session.
_SETTLE_WAIT_S: Final = 1.0
# The operations that publish facts or move a facts cursor.
_OUTBOX_CODES: Final = frozenset({"F", "B", "K"})
_VOUCHED_MAX: Final = 65_536
_OPS_BACKLOG_MAX: Final = 100_000

# The staged operations a shard command carries: one index (a fact's XADD,
# a registry SADD: no list made per command, issue 29) or a shard script's.
Carried = int | list[int]


def indexes(carried: Carried) -> list[int] | tuple[int]:
    """The staged indexes a shard command carries."""
    return (carried,) if isinstance(carried, int) else carried


class Outbox:
    """The facts outbox of one Redis store: owed operations, marks, vouching.

    ``flushing`` answers whether the appender's flusher is sending, so
    ``publish`` waits (briefly) for this store's own queued facts.
    """

    __slots__ = (
        "_backend",
        "_flushing",
        "_reader",
        "inflight",
        "marks",
        "ops",
        "vouched",
    )

    def __init__(
        self, backend: Backend, reader: Reader, flushing: Callable[[], bool]
    ) -> None:
        self._backend = backend
        self._reader = reader
        self._flushing = flushing
        # Shard operations owed (sent at the head of the next round trip).
        self.ops: list[Staged] = []
        # The shard operations of the round trip under way.
        self.inflight: list[Staged] = []
        # Cursor moves (start, end] of published facts, sent when the flusher
        # idles; the facts-at cursor of a session only ever covers a range
        # whose every fact is on the facts stream (R4).
        # Keyed by session id: ``(shard, start, end)``, one tuple a session.
        self.marks: dict[str, tuple[int, int, int]] = {}
        # Per session, the seq up to which this store knows every fact is
        # published or queued ahead of anything it sends next: a turn's close
        # is sent only for a session it vouches for (R4).
        self.vouched: dict[str, int] = {}

    async def publish_facts(self, session_id: str) -> int:
        """Publish the session's facts after its cursor; return how many.

        Reads only the stream after the cursor (``helmlog:facts-at:{<n>}``),
        publishes its facts and then moves the cursor, in one shard script
        that skips the move (and a close) when a fact is refused; so the
        cursor never passes a fact that is not on the facts stream. Running
        it twice, or beside appends, is harmless. A turn's close in what it
        read is sent too (seq-guarded): this store may have held it back.
        """
        return (await self.publish(session_id, index=False))[1]

    async def publish(self, session_id: str, *, index: bool) -> tuple[int, int]:
        """Publish after the cursor (and with ``index`` repair the index entries).

        Returns ``(operations sent, facts published)``.
        """
        what = "reindex" if index else "publish the facts of"
        n = self._backend.shard(session_id)
        keys = self._backend.shards[n]
        await self.settled(session_id)
        # This process's own unsent cursor note goes first, so what it
        # published already is not read (or published) again.
        held = self.marks.pop(session_id, None)
        ops: list[Op] = []
        try:
            await self._backend.routes.prepare()
            at = await self._backend.routes.one(keys[3], "HGET", keys[3], session_id)
            cursor = int(at) if at else 0
            if held is not None:
                ops.append(("K", session_id, held[2], held[1], b""))
                if held[1] <= cursor < held[2]:
                    cursor = held[2]
            records = await self._reader.read(session_id, 0 if index else cursor)
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
                self.vouch_at_least(session_id, cursor)
                return 0, 0
            reply = await self._backend.routes.one(
                keys[0], *self._backend.shard_command(keys, ops)
            )
        except (*DRIVER_ERRORS, StoreError) as exc:
            if held is not None:
                self.mark(n, session_id, held[1], held[2])
            if isinstance(exc, StoreError):
                raise
            raise self._backend.error(f"{what} a session of", exc) from exc
        failed, first, count, _refused = reply
        if failed:
            self.vouched.pop(session_id, None)
            raise StoreError(
                f"could not {what} session {session_id!r} in the redis event store "
                f"{self._backend.url}: {int(failed)} operations failed: "
                f"{bytes(first).decode()}"
            )
        self.vouch_at_least(session_id, max(cursor, last))
        return len(ops), int(count)

    async def settled(self, session_id: str) -> None:
        """Wait (briefly) until no fact or cursor move of the session is queued
        or under way here, so publishing does not race this store's own."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SETTLE_WAIT_S
        while self._flushing() and self.owes(session_id) and loop.time() < deadline:
            await asyncio.sleep(0.001)

    def owes(self, session_id: str) -> bool:
        return any(
            op[2] == session_id and op[1] in _OUTBOX_CODES
            for op in (*self.inflight, *self.ops)
        )

    def shard_commands(
        self, staged: list[Staged]
    ) -> tuple[list[str], list[Command], list[Carried]]:
        """The commands for ``staged``: each one's routing key, the commands,
        and the indexes each carries (three lists, so a round trip to one
        server makes no pair per command, issue 29).

        A fact is a plain ``XADD`` (the hot path: a script call costs more
        than the write), unless a close of its session rides along: then its
        facts go through the shard script, ahead of the close, so the close
        is skipped when a fact is refused (R4: a session with an unpublished
        fact keeps its open mark). ``B`` (a batch's facts are out) is a local
        note, never sent; index operations and cursor moves go through the
        shard script, in queue order.
        """
        keys: list[str] = []
        commands: list[Command] = []
        owners: list[Carried] = []
        by_shard: dict[int, list[int]] = {}
        closing = {op[2] for op in staged if op[1] == "C"}
        maxlen = self._backend.options.facts_maxlen
        for i, (n, code, sid, a, _b, value) in enumerate(staged):
            if code == "B":
                continue
            if code == "S":
                # R25: the session's entry in the store-wide registry (its
                # shard is the index's), after its first append landed.
                key = registry_key(n)
                keys.append(key)
                commands.append(("SADD", key, sid))
                owners.append(i)
                continue
            if code == "F" and sid not in closing:
                key = self._backend.shards[n][0]
                keys.append(key)
                commands.append(
                    pack(
                        (
                            "XADD", key, "MAXLEN", "~", maxlen, "*",
                            "session_id", sid, "seq", a, "data", value,
                        )
                    )
                )  # fmt: skip
                owners.append(i)
            else:
                by_shard.setdefault(n, []).append(i)
        for n, carried in by_shard.items():
            shard = self._backend.shards[n]
            ops = [scripted(unstaged(staged[i])) for i in carried]
            keys.append(shard[0])
            commands.append(self._backend.shard_command(shard, ops))
            owners.append(carried)
        return keys, commands, owners

    def marks_refused(
        self,
        staged: list[Staged],
        owners: list[Carried],
        replies: list[Any],
        batch: list[QueuedAppend],
    ) -> dict[str, Exception]:
        """Sessions whose open mark did not land: their appends must wait."""
        refused: dict[str, Exception] = {}
        for carried, reply in zip(owners, replies, strict=True):
            if isinstance(reply, Exception):
                for i in indexes(carried):
                    op = staged[i]
                    if op[1] == "O":
                        refused[op[2]] = reply
        return {
            i.session_id: refused[i.session_id]
            for i in batch
            if i.premark and i.session_id in refused
        }

    def check_shards(
        self, staged: list[Staged], owners: list[Carried], replies: list[Any]
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
                    staged[i][2] for i in indexes(carried) if staged[i][1] in ("F", "P")
                )
            elif isinstance(reply, Exception):
                lost.update(indexes(carried))  # a node failed: send again
            elif isinstance(reply, list) and len(reply) == 4 and reply[0]:
                refusals.append(bytes(reply[1]).decode(errors="replace"))
                unpublished.update(bytes(s).decode() for s in reply[3])
        for sid in unpublished:
            self.vouched.pop(sid, None)
        lost_sessions = {staged[i][2] for i in lost}
        for i, (n, code, sid, a, b, _v) in enumerate(staged):
            if code != "B" or sid in unpublished:
                continue
            if sid in lost_sessions:
                lost.add(i)  # noted once the facts before it are out
            else:
                self.mark(n, sid, b, a)
        if refusals:
            log.warning(
                "redis event store %s: %d facts or index entries not published "
                "(%s); publish_facts(session_id) or the hosts' sweep publishes "
                "them from the streams",
                self._backend.url,
                len(refusals),
                refusals[0],
            )
        if lost:
            self.requeue(
                [staged[i] for i in sorted(lost)],
                RedisConnectionError("a shard node failed"),
            )

    def vouches(self, session_id: str, expected_seq: int) -> bool:
        """Whether every fact up to ``expected_seq`` is published or queued here."""
        return expected_seq == 0 or self.vouched.get(session_id) == expected_seq

    def vouch(self, session_id: str, seq: int) -> None:
        put_bounded(self.vouched, session_id, seq, _VOUCHED_MAX)

    def vouch_at_least(self, session_id: str, seq: int) -> None:
        if self.vouched.get(session_id, -1) < seq:
            self.vouch(session_id, seq)

    def unvouch(self, session_id: str) -> None:
        self.vouched.pop(session_id, None)

    def mark(self, n: int, session_id: str, start: int, end: int) -> None:
        """Note that the facts of ``(start, end]`` are published (a cursor move)."""
        held = self.marks.get(session_id)
        if held is not None and held[1] <= start <= held[2]:
            self.marks[session_id] = (n, held[1], max(held[2], end))
        else:
            # A gap: the cursor was moved past ``held`` meanwhile (a publish
            # that re-vouched the session), so the newer range supersedes it.
            self.marks[session_id] = (n, start, end)

    def take_ops(self) -> list[Staged]:
        ops, self.ops = self.ops, []
        return ops

    def take_marks(self) -> list[Staged]:
        marks, self.marks = self.marks, {}
        return [
            (n, "K", sid, end, start, b"") for sid, (n, start, end) in marks.items()
        ]

    def requeue(self, ops: list[Staged], exc: BaseException) -> None:
        if not ops:
            return
        room = max(0, _OPS_BACKLOG_MAX - len(self.ops))
        kept = ops[:room]
        for op in ops[room:]:
            self.vouched.pop(op[2], None)  # dropped: publish_facts must vouch
        self.ops[:0] = kept
        log.warning(
            "redis event store %s: sending %d fact/index operations failed "
            "(%s: %s); %d kept for the next flush, %d left to publish_facts",
            self._backend.url,
            len(ops),
            type(exc).__name__,
            exc,
            len(kept),
            len(ops) - len(kept),
        )
