"""Appending to the Redis store: the group commit and its settling.

Pattern: group commit: concurrent appends are queued, then sent by one
         flusher as one pipeline per node per round trip; each append is one
         call of the append script, so the sequence check and the write are
         one atomic step. The shard operations an append owes (facts, index
         entries) ride at the head of the next round trip.
Role:    events layer; the append half of ``RedisEventStore``: the port's
         ``head``, ``head_for_append`` and ``append_sealed``.
Emits:   session events to ``helmlog:{<session_id>}:events`` (and the head
         record, R19); the facts and index operations of what landed, through
         the outbox (``_redis_outbox.py``).

Laws: R2 (the script appends a batch only when the stream's last seq equals
``expected_seq``; stream ids are ``0-<seq>``, so Redis itself refuses a gap
or a duplicate), R3 (each entry keeps its hash beside its data), R19 (the
script also sets the session's head record, computed here where the chain
key is), R20 (a resend is taken for our own append only when the stream ends
with it and holds its token), R4 (only a successful append publishes), R7
(the open-turn mark goes before the append that opens the turn), R5 (a
driver error is a retryable ``StoreError``; nobody waits on an append the
flusher will never send), R24 (an append sent whose reply was lost is not
reported failed: ``_redis_resolve.py`` reads it back first; only one that
was never sent, or that the store refused, fails at once).

Why facts and index entries travel in the round trip *after* their append:
their keys live in other cluster slots than the session, so they cannot join
the session's atomic script, and only a successful append may publish. The
one exception is the open-turn mark, which must exist before the turn does:
it goes *before* the append (same pipeline on one server; a round trip
earlier on a cluster), so a crash in between leaves a stale mark, never a
missing one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from ._chain import StoredEvent, encode_head, head_of, seal, type_of
from ._codec import decode_envelope
from ._envelope import Event
from ._errors import LedgerOutcomeUnknownError, SequenceConflictError, StoreError
from ._index import RELEVANT_TYPES, delta_of, encode_ask
from ._redis_base import QueuedAppend
from ._redis_keys import Op, append_keys, fact_ops, stream_key
from ._redis_resolve import RedisResolve
from ._redis_scripts import APPEND_SHA
from ._redis_wire import DRIVER_ERRORS, Arg, ReplyLostError

log = logging.getLogger("helmlog.events")

_MARKS_MAX: Final = 4_096


class RedisAppends(RedisResolve):
    """The appends of the Redis event store."""

    async def head(self, session_id: str) -> tuple[int, str]:
        """The last head this store saw, else the stream's.

        Another writer may have moved the stream since; an append against a
        stale head is a ``SequenceConflictError``, which drops the cache.
        """
        cached = self._heads.get(session_id)
        if cached is not None:
            return cached
        return await self._fetch_head(session_id)

    async def head_for_append(
        self, session_id: str, expected_seq: int
    ) -> tuple[int, str]:
        cached = self._heads.get(session_id)
        # A cached head is only a guess; the script's check is the truth, and a
        # cache that disagrees with the caller is refreshed, never believed.
        if cached is not None and cached[0] == expected_seq:
            return cached
        return await self._fetch_head(session_id)

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if not records:
            # Nothing to append; still a seq check, answered by the stream.
            last_seq, _hash = await self._fetch_head(session_id)
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
        return await self._landed(session_id, records, expected_seq, prev_hash, None)

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
            key=self.chain_key,
        )
        return await self._landed(session_id, records, expected_seq, last_hash, stamped)

    async def _landed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        prev_hash: str,
        stamped: Sequence[Event] | None,
    ) -> int:
        """Both appends meet here (a subclass adds what it remembers)."""
        return await self._append(session_id, records, expected_seq, prev_hash, stamped)

    async def _append(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        prev_hash: str,
        stamped: Sequence[Event] | None = None,
    ) -> int:
        if self._closed:
            raise StoreError(f"the redis event store {self.url} is closed")
        self._tokens += 1
        token = f"{self._writer}:{self._tokens}"
        last = records[-1]
        head = encode_head(head_of(session_id, last.seq, last.hash, self.chain_key))
        args: list[Arg] = [
            "EVALSHA", APPEND_SHA, *append_keys(session_id, expected_seq),
            expected_seq, prev_hash, token, head,
        ]  # fmt: skip
        relevant = False
        seq = expected_seq
        for record in records:
            seq += 1
            if record.seq != seq:
                raise ValueError(f"record seq {record.seq} does not follow {seq - 1}")
            args.append(record.data)
            args.append(record.hash)
            if type_of(record) in RELEVANT_TYPES:
                relevant = True
        after = fact_ops(session_id, records, stamped)
        premark: Op | None = None
        delta = delta_of(session_id, records) if relevant else None
        if delta is not None:
            if delta.open_at:
                premark = ("O", session_id, delta.open_at, 0, b"")
            if delta.resolved_at:
                after.append(("R", session_id, delta.resolved_at, 0, b""))
            if delta.ask is not None:
                after.append(("A", session_id, delta.ask.seq, 0, encode_ask(delta.ask)))
            if delta.close_at:
                after.append(("C", session_id, delta.close_at, 0, b""))
                if not self._vouches(session_id, expected_seq):
                    # R4: a close may land only once every earlier fact of the
                    # session is published; this store cannot vouch for what
                    # others wrote, so it publishes them first (best-effort:
                    # if that fails the close waits for the sweep).
                    await self._publish_before_close(session_id)
        last_hash = records[-1].hash if records else prev_hash
        loop = asyncio.get_running_loop()
        item = QueuedAppend(
            session_id,
            expected_seq,
            args,
            last_hash,
            after,
            premark,
            loop.create_future(),
        )
        item.token, item.last_seq = token, last.seq
        self._queue.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await item.future

    async def _publish_before_close(self, session_id: str) -> None:
        try:
            await self.publish_facts(session_id)
        except StoreError as exc:
            log.warning(
                "redis event store %s: the facts of session %s could not be "
                "published before its turn's close (%s); the turn stays in the "
                "open-turns index until a sweep publishes them",
                self.url,
                session_id,
                exc,
            )

    async def _flush(self) -> None:
        """Send queued appends (and the shard operations of earlier ones)."""
        try:
            await self._routes.prepare()
            while self._queue or self._ops or self._acks or self._marks:
                batch, self._queue = self._queue, []
                ops = self._take_ops()
                if not batch or len(self._marks) >= _MARKS_MAX:
                    # Marks only save publish_facts from re-reading: under load
                    # they wait and coalesce, one script call per shard when idle.
                    ops.extend(self._take_marks())
                sent = await self._send(batch, ops)
                if not sent and not self._queue:
                    return  # the store is down: operations wait for the next append
                # Let the callers just woken queue their next append, so it
                # shares the next round trip with the operations of this one.
                await asyncio.sleep(0)
        except DRIVER_ERRORS as exc:
            error = self._error("append to", exc)
            for item in self._queue:
                if not item.future.done():
                    item.future.set_exception(error)
            self._queue = []
        finally:
            # Invariant: no caller waits on a queued append this flusher
            # will never send, whatever stopped it.
            orphans, self._queue = self._queue, []
            self._fail(orphans, f"the append queue of {self.url} stopped")
            acks, self._acks = self._acks, []
            self._release(acks)

    async def _send(self, batch: list[QueuedAppend], ops: list[tuple[int, Op]]) -> bool:
        """One round trip (two on a cluster when a turn starts); settles all."""
        acks, self._acks = self._acks, []
        try:
            self._inflight = ops
            premarks = [
                (self._shard(i.session_id), i.premark) for i in batch if i.premark
            ]
            staged = ops + [(n, op) for n, op in premarks if op is not None]
            shard_cmds, owners = self._shard_commands(staged)
            appends = [(stream_key(i.session_id), i.args) for i in batch]
            if not shard_cmds and not appends:
                # Only cursor notes of fact-free batches: nothing to send.
                self._check_shards(staged, owners, [])
                return True
            try:
                if self._routes.cluster and premarks:
                    # The marks must be in before the appends, on other nodes.
                    shard_replies = await self._routes.call(shard_cmds)
                    refused = self._marks_refused(staged, owners, shard_replies, batch)
                    go = [i for i in batch if i.session_id not in refused]
                    append_replies = await self._routes.call(
                        [(stream_key(i.session_id), i.args) for i in go]
                    )
                    for item in batch:
                        if item.session_id in refused:
                            # Never sent: not in the stream (R24).
                            self._settle(
                                item, self._error("append to", refused[item.session_id])
                            )
                    batch = go
                else:
                    replies = await self._routes.call([*shard_cmds, *appends])
                    shard_replies = replies[: len(shard_cmds)]
                    append_replies = replies[len(shard_cmds) :]
            except (*DRIVER_ERRORS, StoreError) as exc:
                self._requeue(staged, exc)
                if isinstance(exc, ReplyLostError):
                    # R24: sent, reply lost: read back before telling anyone.
                    self._unknown(batch, exc)
                    return False
                error = (
                    exc
                    if isinstance(exc, StoreError)
                    else self._error("append to", exc)
                )
                for item in batch:
                    # Never sent (a lost reply is read back above, R24).
                    self._heads.pop(item.session_id, None)
                    self._vouched.pop(item.session_id, None)
                    if not item.future.done():
                        item.future.set_exception(error)
                return False
            self._check_shards(staged, owners, shard_replies)
            lost: list[QueuedAppend] = []
            for item, reply in zip(batch, append_replies, strict=True):
                if isinstance(reply, ReplyLostError):
                    lost.append(item)  # a node's reply lost (R24)
                else:
                    self._settle(item, reply)
            if lost:
                self._unknown(lost, append_replies[batch.index(lost[0])])
            return True
        finally:
            self._inflight = []
            # The appends behind ``acks`` landed; their index entries were
            # sent or requeued, and reindex repairs either way.
            self._release(acks)
            # Cancelled mid-send: the outcome is unknown, and nobody may wait
            # on it forever. A retry is safe: the script is idempotent.
            self._fail(batch, f"an append to {self.url} was interrupted", unknown=True)

    def _settle(self, item: QueuedAppend, reply: Any) -> None:
        future = item.future
        sid = item.session_id
        if isinstance(reply, ReplyLostError):
            self._unknown([item], reply)  # R24: read back before telling
            return
        if isinstance(reply, Exception):
            # Refused, or never sent (a lost reply is read back first, R24).
            self._heads.pop(sid, None)
            self._vouched.pop(sid, None)
            if not future.done():
                future.set_exception(
                    reply
                    if isinstance(reply, StoreError)
                    else self._error("append to", reply)
                )
            return
        ok, seq = reply
        if not ok:
            self._heads.pop(sid, None)
            if not future.done():
                future.set_exception(
                    SequenceConflictError(
                        session_id=sid, expected=item.expected, actual=seq
                    )
                )
            return
        self._remember(sid, (seq, item.last_hash))
        after = item.after
        if self._vouches(sid, item.expected):
            self._vouch(sid, seq)
            after = [*after, ("B", sid, seq, item.expected, b"")]
        else:
            # R4: earlier facts of this session may be unpublished; its close
            # waits, and the open mark stays for publish_facts to settle.
            after = [op for op in after if op[0] != "C"]
        n = self._shard(sid)
        self._ops.extend((n, op) for op in after)
        if any(op[0] in ("A", "R", "C") for op in after):
            # Read your writes: the caller sees its ask or closed turn in
            # the index once we return (facts alone may lag, R4).
            self._acks.append((future, seq))
            item.acked = True
            return
        if not future.done():
            future.set_result(seq)

    def _release(self, acks: list[tuple[asyncio.Future[int], int]]) -> None:
        """Resolve appends whose index round trip is over (sent, or requeued)."""
        for future, seq in acks:
            if not future.done():
                future.set_result(seq)

    def _fail(
        self, items: list[QueuedAppend], why: str, *, unknown: bool = False
    ) -> None:
        for item in items:
            if not item.future.done() and not item.acked and not item.resolving:
                self._heads.pop(item.session_id, None)
                self._vouched.pop(item.session_id, None)
                item.future.set_exception(
                    LedgerOutcomeUnknownError(
                        session_id=item.session_id, store=self.url, cause=why
                    )
                    if unknown
                    else StoreError(why)
                )

    def _kick(self) -> None:
        if (self._ops or self._acks or self._queue) and (
            self._flusher is None or self._flusher.done()
        ):
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
