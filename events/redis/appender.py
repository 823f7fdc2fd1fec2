"""Appending to a Redis store: the group commit, its settling, R24's hand-off.

Pattern: group commit: concurrent appends are queued, then sent by one
         flusher as one pipeline per node per round trip; each append is one
         call of the append script (the seq check and the write are one
         atomic step). The shard operations an append owes (facts, index
         entries, from the outbox) ride at the head of the next round trip.
Role:    events layer, ``events/redis``; the store's ``head``,
         ``append`` and ``append_sealed``.

Laws: R2, R3, R19 (the script checks seq and hash, writes each hash and the
head record), R20 (a resend is ours only with our token), R4 (only a landed
append publishes), R7 (the open-turn mark goes *before* its append: a crash
leaves a stale mark, never a missing one), R5, R24 (a sent append whose
reply was lost goes to ``readback.ReadBack``, never reported failed at once).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import Any, Final

from .._chain import StoredEvent, encode_head, head_of, seal, type_of
from .._codec import decode_envelope
from .._envelope import Event, UnknownEvent
from .._errors import LedgerOutcomeUnknownError, SequenceConflictError, StoreError
from .._evidence_events import HeadSigned
from .._facts import FACT_TYPE, FILED_TYPE
from .._index import RELEVANT_TYPES, delta_of, encode_ask
from .._signed_heads import head_leaves
from .backend import Backend
from .headlog import RedisHeadLog, after_append_command
from .heads import Heads
from .keys import Staged, append_keys, staged_fact_ops, stream_key
from .outbox import Outbox
from .queued import QueuedAppend
from .readback import ReadBack
from .registry import Registry
from .scripts import APPEND_SHA
from .wire import DRIVER_ERRORS, Arg, ReplyLostError, pack

log = logging.getLogger("helmlog.events")

_MARKS_MAX: Final = 4_096
_HEAD_SIGNED: Final = HeadSigned.type
# The kinds a batch's facts come from (``fact_records``): a batch of none
# projects no fact, and is not walked again for them (issue 29).
_FACT_KINDS: Final = frozenset({FILED_TYPE, FACT_TYPE})
# Index operations an append's caller waits for (read your writes).
_ACKED: Final = frozenset({"A", "R", "C"})


class Appender:
    """The appends of one Redis store: the queue, the flusher, settling."""

    __slots__ = (
        "_acks",
        "_backend",
        "_carrying",
        "_flusher",
        "_heads",
        "_outbox",
        "_queue",
        "_readback",
        "_registry",
        "_tokens",
        "_writer",
        "closed",
        "headlog",
    )

    def __init__(
        self, backend: Backend, heads: Heads, outbox: Outbox, registry: Registry
    ) -> None:
        self._backend = backend
        self._heads = heads
        self._outbox = outbox
        self._registry = registry
        self._readback = ReadBack(backend, heads, outbox, self.settle, self.kick)
        # Append tokens: this store's random id and a counter. The append
        # script takes a batch the stream already ends with for a resend of
        # its own (a reply lost on a dropped connection) only when the last
        # entry holds the same token: two writers can seal byte-identical
        # batches (one decision in the same millisecond), and must conflict.
        self._writer = os.urandom(8).hex()
        self._tokens = 0
        self._queue: list[QueuedAppend] = []
        # Appends that landed and wait for their index entries to be sent.
        self._acks: list[QueuedAppend] = []
        self._flusher: asyncio.Task[None] | None = None
        # The round trip under way, by each session whose append it carries
        # (``settled``): a future done when that round trip has ended.
        self._carrying: dict[str, asyncio.Future[None]] = {}
        self.closed = False
        # The store's log of signed heads (issue 30), set by the store.
        self.headlog: RedisHeadLog | None = None

    def flushing(self) -> bool:
        """Whether the flusher is sending (the outbox waits for it)."""
        return self._flusher is not None and not self._flusher.done()

    def carrying(self, session_id: str) -> asyncio.Future[None] | None:
        """The round trip under way that carries an append of ``session_id``
        (done when it has ended), or ``None``."""
        return self._carrying.get(session_id)

    async def settled(self, session_id: str) -> None:
        """Return once no round trip under way carries an append of
        ``session_id``: a read of the stream after it sees that append's
        outcome. Why the store's reads wait for it (issue 29 item 5, R24):
        a turn cancelled after the flusher took its append does not know
        whether it landed and reads the stream back; read while the append
        is still on its way, the stream looks as if it had not, and what
        the turn records next conflicts with it."""
        while (trip := self._carrying.get(session_id)) is not None:
            # Shielded: a cancelled reader must not cancel the round trip's
            # future, which every reader of the session shares.
            await asyncio.shield(trip)

    async def head(self, session_id: str) -> tuple[int, str]:
        """The last head this store saw, else the stream's.

        Another writer may have moved the stream since; an append against a
        stale head is a ``SequenceConflictError``, which drops the cache.
        """
        cached = self._heads.get(session_id)
        if cached is not None:
            return cached
        return await self._heads.fetch(session_id)

    async def head_for_append(
        self, session_id: str, expected_seq: int
    ) -> tuple[int, str]:
        cached = self._heads.get(session_id)
        # A cached head is only a guess; the script's check is the truth, and a
        # cache that disagrees with the caller is refreshed, never believed.
        if cached is not None and cached[0] == expected_seq:
            return cached
        return await self._heads.fetch(session_id)

    async def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        events: Sequence[Event | UnknownEvent] | None = None,
    ) -> int:
        if not records:
            # Nothing to append; still a seq check, answered by the stream.
            last_seq, _hash = await self._heads.fetch(session_id)
            if last_seq != expected_seq:
                raise SequenceConflictError(
                    session_id=session_id, expected=expected_seq, actual=last_seq
                )
            return last_seq
        try:
            prev_hash = decode_envelope(records[0].data)[2]
        except ValueError as exc:  # msgspec.DecodeError is a ValueError
            raise ValueError(
                f"record seq {records[0].seq} is not a stored event: {exc}"
            ) from exc
        if events is not None and (
            len(events) != len(records)
            or events[0].seq != records[0].seq
            or events[-1].seq != records[-1].seq
        ):
            raise ValueError(
                f"the events given with records {records[0].seq}-{records[-1].seq} "
                "are not theirs (one event per record, in order)"
            )
        if not self._registry.format_marked or self.closed:
            await self._ready()
        item = self._item(session_id, records, expected_seq, prev_hash, events)
        if item.closing and not self._outbox.vouches(session_id, expected_seq):
            await self._publish_before_close(session_id)
        return await self._queued(item)

    async def append(
        self, session_id: str, events: Sequence[Event], expected_seq: int
    ) -> int:
        # ``StoreBase.append``, keeping what sealing made: the batch's first
        # prev_hash is the head, and the stamped events project the facts,
        # so nothing just encoded is decoded again on the hot path.
        last_seq, last_hash = await self.head_for_append(session_id, expected_seq)
        if last_seq != expected_seq:
            raise SequenceConflictError(
                session_id=session_id, expected=expected_seq, actual=last_seq
            )
        if not events:
            return last_seq
        stamped, records = seal(
            session_id,
            events,
            after_seq=expected_seq,
            prev_hash=last_hash,
            key=self._backend.chain_key,
        )
        if not self._registry.format_marked or self.closed:
            await self._ready()
        item = self._item(session_id, records, expected_seq, last_hash, stamped)
        if item.closing and not self._outbox.vouches(session_id, expected_seq):
            await self._publish_before_close(session_id)
        return await self._queued(item)

    async def _ready(self) -> None:
        """What both appends need first, with what the registry keeps (R26):
        the store's format mark, set before this version's first append
        lands (so no head record this store writes sits on an unmarked
        store); and a store still open."""
        if not self._registry.format_marked:
            await self._registry.mark_format()
        if self.closed:
            raise StoreError(f"the redis event store {self._backend.url} is closed")

    def _queued(self, item: QueuedAppend) -> asyncio.Future[int]:
        """Queue ``item`` for the flusher; the future its caller awaits.

        The caller's own coroutine waits on the future (one coroutine per
        append, none of this store's own in between: issue 29). A caller
        cancelled before its append was sent cancels the future, and the
        flusher drops the item unsent (issue 29 item 5: never sent, so known
        not to be in the stream); once sent, it lands or not on its own, and
        the session's next writer reads the stream back (the journal, R24).
        """
        self._queue.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return item.future

    def _item(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        prev_hash: str,
        events: Sequence[Event | UnknownEvent] | None,
    ) -> QueuedAppend:
        """The queued append of a batch: its script call, packed, and what it
        owes the index, the facts and the log of heads once it lands.

        Synchronous, so what it builds on the way (the arguments, the facts)
        is gone before the caller waits: only the item lives through the
        round trip, and the collector is not handed a batch's worth of young
        objects per flush (issue 29).
        """
        self._tokens += 1
        token = f"{self._writer}:{self._tokens}"
        last = records[-1]
        head = encode_head(
            head_of(session_id, last.seq, last.hash, self._backend.chain_key)
        )
        args: list[Arg] = [
            "EVALSHA", APPEND_SHA, *append_keys(session_id, expected_seq),
            expected_seq, prev_hash, token, head,
        ]  # fmt: skip
        # One pass over the batch: its arguments, and which kinds it holds
        # (what the index, the facts and the log of heads need from it).
        push = args.append
        relevant = signed = facts = False
        seq = expected_seq
        for record in records:
            seq += 1
            if record.seq != seq:
                raise ValueError(f"record seq {record.seq} does not follow {seq - 1}")
            push(record.data)
            push(record.hash)
            kind = record.type or type_of(record)
            if kind in RELEVANT_TYPES:
                relevant = True
            elif kind in _FACT_KINDS:
                facts = True
            elif kind == _HEAD_SIGNED:
                signed = True
        n = self._backend.shard(session_id)
        after = staged_fact_ops(n, session_id, records, events) if facts else []
        premark: Staged | None = None
        closing = False
        delta = delta_of(session_id, records) if relevant else None
        if delta is not None:
            if delta.open_at:
                premark = (n, "O", session_id, delta.open_at, 0, b"")
            if delta.resolved_at:
                after.append((n, "R", session_id, delta.resolved_at, 0, b""))
            if delta.ask is not None:
                ask = encode_ask(delta.ask)
                after.append((n, "A", session_id, delta.ask.seq, 0, ask))
            if delta.close_at:
                after.append((n, "C", session_id, delta.close_at, 0, b""))
                closing = True
        item = QueuedAppend(
            session_id,
            expected_seq,
            pack(args),
            last.hash,
            # An append that owes nothing keeps no list through its round trip.
            after or (),
            premark,
            asyncio.get_running_loop().create_future(),
        )
        item.token, item.last_seq = token, last.seq
        item.shard = n
        item.closing = closing
        if signed and self.headlog is not None:
            heads = [r for r in records if type_of(r) == _HEAD_SIGNED]
            item.heads = (heads[-1].seq, heads[-1].hash, head_leaves(heads))
        return item

    async def _publish_before_close(self, session_id: str) -> None:
        """R4: a close may land only once every earlier fact of the session
        is published; this store cannot vouch for what others wrote, so it
        publishes them first (best-effort: if that fails the close waits for
        the sweep)."""
        try:
            await self._outbox.publish_facts(session_id)
        except StoreError as exc:
            log.warning(
                "redis event store %s: the facts of session %s could not be "
                "published before its turn's close (%s); the turn stays in the "
                "open-turns index until a sweep publishes them",
                self._backend.url,
                session_id,
                exc,
            )

    async def _flush(self) -> None:
        """Send queued appends (and the shard operations of earlier ones)."""
        try:
            await self._backend.routes.prepare()
            while self._queue or self._outbox.ops or self._acks or self._outbox.marks:
                # An append whose caller was cancelled while it was queued
                # is dropped unsent (``_queued``).
                batch = [i for i in self._queue if not i.future.cancelled()]
                self._queue = []
                ops = self._outbox.take_ops()
                if not batch or len(self._outbox.marks) >= _MARKS_MAX:
                    # Marks only save publish_facts from re-reading: under load
                    # they wait and coalesce, one script call per shard when idle.
                    ops.extend(self._outbox.take_marks())
                sent = await self.send(batch, ops)
                if not sent and not self._queue:
                    return  # the store is down: operations wait for the next append
                # Let the callers just woken queue their next append, so it
                # shares the next round trip with the operations of this one.
                await asyncio.sleep(0)
        except DRIVER_ERRORS as exc:
            error = self._backend.error("append to", exc)
            for item in self._queue:
                if not item.future.done():
                    item.future.set_exception(error)
            self._queue = []
        finally:
            # Invariant: no caller waits on a queued append this flusher
            # will never send, whatever stopped it.
            orphans, self._queue = self._queue, []
            self.fail(orphans, f"the append queue of {self._backend.url} stopped")
            acks, self._acks = self._acks, []
            self.release(acks)

    async def send(self, batch: list[QueuedAppend], ops: list[Staged]) -> bool:
        """One round trip (two on a cluster when a turn starts); settles all."""
        acks, self._acks = self._acks, []
        carried, trip = batch, self._carry(batch)
        try:
            self._outbox.inflight = ops
            premarks = [i.premark for i in batch if i.premark is not None]
            staged = ops + premarks
            keys, shard_cmds, owners = self._outbox.shard_commands(staged)
            if not shard_cmds and not batch:
                # Only cursor notes of fact-free batches: nothing to send.
                self._outbox.check_shards(staged, owners, [])
                return True
            try:
                if self._backend.routes.cluster and premarks:
                    # The marks must be in before the appends, on other nodes.
                    shard_replies = await self._backend.routes.call(
                        list(zip(keys, shard_cmds, strict=True))
                    )
                    refused = self._outbox.marks_refused(
                        staged, owners, shard_replies, batch
                    )
                    go = [i for i in batch if i.session_id not in refused]
                    append_replies = await self._backend.routes.call(
                        [(stream_key(i.session_id), i.packed) for i in go]
                    )
                    for item in batch:
                        if item.session_id in refused:
                            # Never sent: not in the stream (R24).
                            self.settle(
                                item,
                                self._backend.error(
                                    "append to", refused[item.session_id]
                                ),
                            )
                    batch = go
                else:
                    # Issue 30: on one server the log of heads' share rides in
                    # the same pipeline, after the appends (its script checks
                    # that the head landed); on a cluster it follows settling.
                    logs = self._log_commands(batch)
                    routes = self._backend.routes
                    if routes.cluster:
                        replies = await routes.call(
                            [
                                *zip(keys, shard_cmds, strict=True),
                                *[(stream_key(i.session_id), i.packed) for i in batch],
                                *logs,
                            ]
                        )
                    else:
                        # One server routes nothing: each command goes as it
                        # is, no (key, command) pair made for it.
                        replies = await routes.seed.call_loaded(
                            [
                                *shard_cmds,
                                *[i.packed for i in batch],
                                *[c for _k, c in logs],
                            ]
                        )
                    shard_replies = replies[: len(shard_cmds)]
                    append_replies = replies[
                        len(shard_cmds) : len(shard_cmds) + len(batch)
                    ]
                    self._logged(batch, replies[len(shard_cmds) + len(batch) :])
            except (*DRIVER_ERRORS, StoreError) as exc:
                self._outbox.requeue(staged, exc)
                if isinstance(exc, ReplyLostError):
                    # R24: sent, reply lost: read back before telling anyone.
                    self._readback.unknown(batch, exc)
                    return False
                error = (
                    exc
                    if isinstance(exc, StoreError)
                    else self._backend.error("append to", exc)
                )
                for item in batch:
                    # Never sent (a lost reply is read back above, R24).
                    self._heads.forget(item.session_id)
                    self._outbox.unvouch(item.session_id)
                    if not item.future.done():
                        item.future.set_exception(error)
                return False
            self._outbox.check_shards(staged, owners, shard_replies)
            lost: list[QueuedAppend] = []
            for item, reply in zip(batch, append_replies, strict=True):
                if isinstance(reply, ReplyLostError):
                    lost.append(item)  # a node's reply lost (R24)
                else:
                    self.settle(item, reply)
            if lost:
                self._readback.unknown(lost, append_replies[batch.index(lost[0])])
            return True
        finally:
            self._outbox.inflight = []
            # The appends behind ``acks`` landed; their index entries were
            # sent or requeued, and reindex repairs either way.
            self.release(acks)
            # Cancelled mid-send: the outcome is unknown, and nobody may wait
            # on it forever. A retry is safe: the script is idempotent.
            self.fail(
                batch, f"an append to {self._backend.url} was interrupted", unknown=True
            )
            if trip is not None:
                for item in carried:
                    if self._carrying.get(item.session_id) is trip:
                        del self._carrying[item.session_id]
                trip.set_result(None)

    def _carry(self, batch: list[QueuedAppend]) -> asyncio.Future[None] | None:
        """The future of a round trip that carries ``batch`` (``settled``),
        set for each of its sessions before anything of it is sent."""
        if not batch:
            return None
        trip = asyncio.get_running_loop().create_future()
        for item in batch:
            self._carrying[item.session_id] = trip
        return trip

    def _log_commands(self, batch: list[QueuedAppend]) -> list[tuple[str, list[Arg]]]:
        """The log's share of each append with signed heads, on one server."""
        if self._backend.routes.cluster:
            return []
        return [
            (
                stream_key(i.session_id),
                after_append_command(stream_key(i.session_id), i.heads),
            )
            for i in batch
            if i.heads is not None
        ]

    def _logged(self, batch: list[QueuedAppend], replies: list[Any]) -> None:
        """Settle the log's share: an item whose leaves the pipelined script
        appended is done; any other (the script ran before a NOSCRIPT resend
        of its append, or failed) keeps them for ``settle`` to queue, which
        the script's index makes safe to send twice."""
        owing = [item for item in batch if item.heads is not None]
        for item, reply in zip(owing, replies, strict=False):
            if isinstance(reply, int) and reply > 0:
                item.heads = None

    def settle(self, item: QueuedAppend, reply: Any) -> None:
        future = item.future
        sid = item.session_id
        if isinstance(reply, ReplyLostError):
            self._readback.unknown([item], reply)  # R24: read back before telling
            return
        if isinstance(reply, Exception):
            # Refused, or never sent (a lost reply is read back first, R24).
            self._heads.forget(sid)
            self._outbox.unvouch(sid)
            if not future.done():
                future.set_exception(
                    reply
                    if isinstance(reply, StoreError)
                    else self._backend.error("append to", reply)
                )
            return
        ok, seq = reply
        if not ok:
            self._heads.forget(sid)
            if not future.done():
                future.set_exception(
                    SequenceConflictError(
                        session_id=sid, expected=item.expected, actual=seq
                    )
                )
            return
        self._heads.remember(sid, (seq, item.last_hash))
        if item.heads is not None and self.headlog is not None:
            # Landed on a cluster (or read back, R24): the log follows.
            self.headlog.after_append(sid, item.heads[2])
            item.heads = None
        n = item.shard
        ops = self._outbox.ops
        indexed = False
        # R4: a session whose earlier facts this store cannot vouch for may
        # have unpublished ones: its close waits, and the open mark stays for
        # publish_facts to settle.
        vouched = self._outbox.vouches(sid, item.expected)
        for op in item.after:
            code = op[1]
            if code in _ACKED:
                if code == "C" and not vouched:
                    continue
                indexed = True
            ops.append(op)
        item.after = ()  # staged: the item may wait for its ack without them
        if vouched:
            self._outbox.vouch(sid, seq)
            ops.append((n, "B", sid, seq, item.expected, b""))
        if item.expected == 0:
            # R25: the session's first append; the registry's entry rides
            # in the next round trip (with its facts), and the caller waits
            # for it, as it did for its own SADD.
            ops.append((n, "S", sid, seq, 0, b""))
            indexed = True
        if indexed:
            # Read your writes: the caller sees its ask or closed turn in
            # the index once we return (facts alone may lag, R4).
            item.last_seq = seq
            self._acks.append(item)
            item.acked = True
            return
        if not future.done():
            future.set_result(seq)

    def release(self, acks: list[QueuedAppend]) -> None:
        """Resolve appends whose index round trip is over (sent, or requeued)."""
        for item in acks:
            if not item.future.done():
                item.future.set_result(item.last_seq)

    def fail(
        self, items: list[QueuedAppend], why: str, *, unknown: bool = False
    ) -> None:
        for item in items:
            if not item.future.done() and not item.acked and not item.resolving:
                self._heads.forget(item.session_id)
                self._outbox.unvouch(item.session_id)
                item.future.set_exception(
                    LedgerOutcomeUnknownError(
                        session_id=item.session_id, store=self._backend.url, cause=why
                    )
                    if unknown
                    else StoreError(why)
                )

    def kick(self) -> None:
        if (self._outbox.ops or self._acks or self._queue) and (
            self._flusher is None or self._flusher.done()
        ):
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def drain(self) -> None:
        """Close: read lost replies back, finish the flusher, send what is owed."""
        self.closed = True
        # R24: appends whose reply was lost are read back first (bounded).
        await self._readback.resolved()
        if self._flusher is not None:
            await self._flusher
        outbox = self._outbox
        for _round in range(2):
            if not (outbox.ops or outbox.marks):
                break
            # One last try for operations a failed flush left behind; the
            # second round sends the cursor moves the first noted.
            if not await self.send([], outbox.take_ops() + outbox.take_marks()):
                break
        if outbox.ops:
            log.warning(
                "redis event store %s closed with %d unsent index/fact "
                "operations; reindex(session_id) restores them from the streams",
                self._backend.url,
                len(outbox.ops),
            )
