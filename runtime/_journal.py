"""The journal: the one place a session's state changes are recorded.

Pattern: unit of work over an append-only stream: events are sealed and folded
         as they are added, appended in atomic batches before every governed
         action (R5), then delivered to listeners (``stream.token`` never
         appended, R12).
Role:    runtime layer; every state change of the loop goes through ``add``.

Laws: R1, R2, R4, R5, R12, R19, R20, R24, R26, G49, G84; issue 30 (a store
with a signer: a batch that ends a turn or records a pause carries its signed
head, and activation checks the latest signed head under the public keys).
Why fold at ``add``: the loop reads what it just committed before the next
flush; a failed flush marks the cache broken and re-folds it from the store.
Why a conflict is not a ``LedgerAppendError``: an outage says "retry", a
conflict "another writer owns this turn"; the loser records nothing (R20).
Verification is incremental: ``(flushed_seq, last_hash)`` is a verified spot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from helmlog.events import DecisionFiled as _Filed
from helmlog.events import (
    Event,
    EventStore,
    Folder,
    HeadSigner,
    LedgerAppendError,
    LedgerOutcomeUnknownError,
    MiddlewareDecision,
    SequenceConflictError,
    StoredEvent,
    StoreError,
    StreamToken,
    UnknownEvent,
    fact_of,
    refuse_headless,
    verify_records,
)
from helmlog.events.lowlevel import (
    DIGEST_START,
    SIGN_AFTER,
    advance_digest,
    append_with_events,
    check_heads,
    seal_event,
)

from ._watchers import Listeners

# How long a journal waits for a store to say whether an append that raised
# is in the stream (R24), before the run is told the outcome is unknown.
READ_BACK_S = 5.0

log = logging.getLogger("helmlog")

Clock = Callable[[], int]
Transform = Callable[[Any], Any]


class Journal:
    """Records one session's events in its store and tells its listeners."""

    __slots__ = (
        "_append_now",
        "_buffer",
        "_evidence",
        "_recorded",
        "_served",
        "_signer",
        "_stored",
        "attempted",
        "broken",
        "clock",
        "fenced",
        "flushed_seq",
        "folder",
        "last_hash",
        "listeners",
        "next_seq",
        "reconciled",
        "session_id",
        "store",
    )

    def __init__(
        self,
        store: EventStore,
        session_id: str,
        listeners: Listeners,
        clock: Clock,
        *,
        stored_form: Transform | None = None,
        served_form: Transform | None = None,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.listeners = listeners
        self.clock = clock
        self.folder = Folder(session_id)
        self.flushed_seq = 0
        self.next_seq = 1
        self.last_hash = ""
        self.broken = False
        self.fenced = False
        # (seq, hash) the last failed append would have ended the stream at.
        self.attempted: tuple[int, str] | None = None
        # (first seq, last seq) of each append reported failed that landed,
        # as re-activation found them in the stream (R4, R5); a tuple, rarely
        # more than empty, so no list per resident session for the collector.
        self.reconciled: tuple[tuple[int, int], ...] = ()
        # The unflushed batch: empty tuples until an event is added, so an
        # idle resident session's journal holds two containers fewer for the
        # collector to walk (issue 29).
        self._buffer: list[StoredEvent] | tuple[()] = ()
        # The buffer's events, folded: what a reader decodes from the records.
        self._recorded: list[Event | UnknownEvent] | tuple[()] = ()
        self._stored = stored_form
        self._served = served_form
        # Signed heads (issue 30): the store's signer (as it carries the chain
        # key) and the evidence digest at ``flushed_seq``.
        self._signer: HeadSigner | None = getattr(store, "signer", None)
        self._evidence: tuple[int, bytes] = (0, DIGEST_START)
        # The store port's optional synchronous append (an in-process store
        # whose append never waits): a flush makes it without a coroutine.
        self._append_now: Callable[[str, list[StoredEvent], int], int] | None = getattr(
            store, "append_sealed_now", None
        )

    async def activate(self) -> None:
        """Verify and fold the session's stored stream silently (R6, R19).

        Called again on a cached session, it catches up with what other hosts
        appended since (the cache is only a cache), verifying only those
        records. On a broken journal it folds the whole stream into a fresh
        folder, dropping what the store never accepted; the journal is then
        whole again, and an append it reported failed that landed after all
        is reported (``reconciled``). The first activation and a
        re-activation then publish the facts the session's writers left
        unpublished (R4), best-effort. Only between operations: never while
        events are buffered.

        Raises:
            StreamTamperedError: a record read fails its hash or the chain, or
                (on a first activation) the stream is shorter than its head,
                or has none on a store that writes heads (R26); nothing read
                is folded.
        """
        key = self.store.chain_key
        if self.broken or (self.flushed_seq == 0 and not self._buffer):
            head = await self.store.read_head(self.session_id)
            stream = await self.store.read(self.session_id, 0)
            # R26: on a store that writes heads, a headless stream is refused.
            await refuse_headless(self.store, self.session_id, stream, head)
            events: list[Event | UnknownEvent] = []
            position = verify_records(
                self.session_id, stream, key, head=head, decoded=events
            )
            if self._signer is not None:
                # R19: the latest signed head too, before anything is folded.
                self._evidence = self._heads(stream, (0, DIGEST_START), "")
            self._reconcile(stream)
            folder = Folder(self.session_id)
            for event in events:
                folder.apply(event)
            self.folder = folder
            self.flushed_seq, self.last_hash = position
            self.next_seq = self.flushed_seq + 1
            self._buffer, self._recorded = (), ()
            self.broken = self.fenced = False
            if stream:
                await self._publish_facts()
            return
        assert not self._buffer, "catch-up would interleave with unflushed events"
        records = await self.store.read(self.session_id, self.flushed_seq)
        events = []
        position = verify_records(
            self.session_id,
            records,
            key,
            after=(self.flushed_seq, self.last_hash),
            decoded=events,
        )
        if self._signer is not None and records:
            self._evidence = self._heads(records, self._evidence, self.last_hash)
        for event in events:
            self.folder.apply(event)
        self.flushed_seq, self.last_hash = position
        self.next_seq = self.flushed_seq + 1

    def _heads(
        self, records: list[StoredEvent], position: tuple[int, bytes], last_hash: str
    ) -> tuple[int, bytes]:
        """The evidence digest after ``records``; with public keys, the latest
        signed head among them checked first (R19, issue 30)."""
        signer = self._signer
        if signer is not None and signer.public_keys:
            return check_heads(
                self.session_id, records, signer.public_keys, position, last_hash
            )
        return advance_digest(position, records)

    async def _sign_head(self, signer: HeadSigner) -> None:
        """Add the buffered batch's signed head when it ends a turn or records
        a pause (issue 30): one atomic append holds both."""
        buffer = self._buffer
        if not buffer or not any(record.type in SIGN_AFTER for record in buffer):
            return
        if self._evidence[0] != self.flushed_seq:  # never activated
            # A journal that never read its stream (a fresh one over an old
            # session): the digest needs the records before the batch.
            before = await self.store.read(self.session_id, 0)
            self._evidence = advance_digest(
                (0, DIGEST_START), before[: self.flushed_seq]
            )
        # Invariant: ``_evidence`` may run ahead of ``flushed_seq`` only
        # inside ``flush``; a failed append re-activates, which recomputes it.
        self._evidence = advance_digest(self._evidence, buffer)
        last = buffer[-1]
        keyed = self.store.chain_key is not None
        digest = self._evidence[1]
        self.add(signer.sign(self.session_id, last.seq, last.hash, digest, keyed=keyed))

    def _reconcile(self, stream: list[StoredEvent]) -> None:
        """Report an append that was reported failed but is in the stream."""
        if self.attempted is None:
            return
        last, digest = self.attempted
        self.attempted = None
        # Invariant: a full read holds seq n at index n-1.
        if len(stream) >= last and stream[last - 1].hash == digest:
            self._landed(self.flushed_seq + 1, last)

    def _landed(self, first: int, last: int) -> None:
        if (first, last) in self.reconciled:
            return
        self.reconciled += ((first, last),)
        log.warning(
            "session %s: the append of seqs %d-%d, whose outcome was reported "
            "unknown (or failed, by a store that does not read back, R24; or "
            "its run was cancelled while it was in flight), landed; it is part "
            "of the record, and its facts are published",
            self.session_id,
            first,
            last,
            extra={"session_id": self.session_id, "first_seq": first, "last_seq": last},
        )

    async def _read_back(self, records: list[StoredEvent]) -> bool | None:
        """Whether an append that raised is in the stream: ``None`` when the
        store does not say within ``READ_BACK_S`` (R24).

        The append was one atomic batch after ``flushed_seq``: the stream's
        record at the batch's last seq, with the batch's hash, is the answer.
        """
        last = records[-1]
        try:
            async with asyncio.timeout(READ_BACK_S):
                seq, digest = await self.store.head(self.session_id)
                # Invariant: an append is atomic, so a batch that landed left
                # the stream at least as long as its last seq.
                if seq < last.seq:
                    return False
                if seq == last.seq:
                    return digest == last.hash
                after = await self.store.read(self.session_id, last.seq - 1)
                return bool(after) and (after[0].seq, after[0].hash) == (
                    last.seq,
                    last.hash,
                )
        except Exception:  # R24: a store that cannot answer leaves it unknown
            log.warning(
                "session %s: could not read back an append that raised",
                self.session_id,
                exc_info=True,
            )
            return None

    async def _publish_facts(self) -> None:
        """Publish what earlier writers left unpublished (the outbox, R4).

        Whoever next touches a session publishes its missed facts; one call,
        best-effort: a publisher that fails never fails the run (R5).
        """
        try:
            await self.store.publish_facts(self.session_id)
        except Exception as exc:  # noqa: BLE001 - R5: a facts publisher never changes a run
            log.warning(
                "session %s: could not publish its missed facts (%s: %s); the "
                "hosts' sweep or the next activation publishes them",
                self.session_id,
                type(exc).__name__,
                exc,
                extra={"session_id": self.session_id},
            )

    def still_ours(self, fresh: Journal) -> bool:
        """Whether ``fresh`` (reopened after this journal's append failed)
        ends where this writer left the stream: at its last flush, or at the
        end of the append reported failed that landed after all. Anything
        else is another writer's (R20): this run must append nothing more.
        """
        if fresh.flushed_seq == self.flushed_seq:
            return True
        return (fresh.flushed_seq, fresh.last_hash) == self.attempted

    async def reopened(self) -> Journal:
        """A fresh journal over what the store holds, for use after a failed append."""
        fresh = Journal(
            self.store,
            self.session_id,
            self.listeners,
            self.clock,
            stored_form=self._stored,
            served_form=self._served,
        )
        await fresh.activate()  # its first activation publishes missed facts
        if (fresh.flushed_seq, fresh.last_hash) == self.attempted:
            self._landed(self.flushed_seq + 1, fresh.flushed_seq)
        return fresh

    @property
    def pending_count(self) -> int:
        """Events added but not yet appended."""
        return len(self._buffer)

    def add(self, event: Event) -> Event | UnknownEvent:
        """Seal and fold one event now; it is appended at the next ``flush``."""
        if self._stored is not None:
            event = self._stored(event)
        # Stamped in its stored form, encoded once (R3, R12); the folded
        # event is what a reader decodes from the record, its session id
        # included, made without decoding what was just encoded (issue 29
        # item 3: ``seal_event``).
        record, recorded = seal_event(
            event,
            self.session_id,
            self.next_seq,
            self.last_hash,
            event.timestamp or self.clock(),
            self.store.chain_key,
        )
        self.folder.apply(recorded)
        # Invariant: a non-empty buffer is a list, and so is its ``_recorded``.
        if self._buffer:
            self._buffer.append(record)
            self._recorded.append(recorded)  # type: ignore[union-attr]
        else:
            self._buffer, self._recorded = [record], [recorded]
        self.next_seq += 1
        self.last_hash = record.hash
        return recorded

    def file(self, rows: list[MiddlewareDecision]) -> None:
        """File ledger rows; each is stored once, its fact is delivered (R4)."""
        for row in rows:
            self.add(_Filed(row=row))

    async def flush(self) -> None:
        """Append what was added, atomically; then deliver it (R5, G49).

        Raises:
            SequenceConflictError: another writer appended first (R20); the
                journal is broken and fenced: its run appends nothing more.
            LedgerOutcomeUnknownError: the store lost the reply and could not
                read it back in time (R24): the append may be in the stream.
                Nothing after this point may happen; the journal is broken,
                and its next activation reports the append if it landed.
            LedgerAppendError: the store refused or failed, and the append is
                not in the stream (R24); nothing after this point may happen,
                and the cached state is marked broken.
        """
        if not self._buffer:
            return
        signer = self._signer
        if signer is not None and signer.key is not None:
            await self._sign_head(signer)
        records, recorded = self._buffer, self._recorded
        self._buffer, self._recorded = (), ()
        # Invariant: a buffer that holds events is a list (``add``).
        assert isinstance(records, list) and isinstance(recorded, list)
        append_now = self._append_now
        try:
            if append_now is not None:
                append_now(self.session_id, records, self.flushed_seq)
            else:
                await append_with_events(
                    self.store, self.session_id, records, self.flushed_seq, recorded
                )
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - re-raised or read back (R24)
            await self._not_appended(records, recorded, exc)
            return
        self._appended(records, recorded)

    def flush_now(self) -> Coroutine[Any, Any, None] | None:
        """``flush``, made here when nothing in it waits: ``None`` once the
        batch is appended and delivered; else a coroutine the caller awaits
        before anything else (``flush`` itself, or what an append that raised
        leads to), with ``flush``'s errors.

        Nothing waits when the batch is empty, or when the store appends
        synchronously (``append_sealed_now``) and signs no heads: the
        memory store's turn flushes without a coroutine (issue 29 item 3).
        """
        if not self._buffer:
            return None
        append_now = self._append_now
        if append_now is None or self._signer is not None:
            return self.flush()
        records, recorded = self._buffer, self._recorded
        self._buffer, self._recorded = (), ()
        # Invariant: a buffer that holds events is a list (``add``).
        assert isinstance(records, list) and isinstance(recorded, list)
        try:
            append_now(self.session_id, records, self.flushed_seq)
        except Exception as exc:  # noqa: BLE001 - re-raised or read back (R24)
            return self._not_appended(records, recorded, exc)
        self._appended(records, recorded)
        return None

    async def _not_appended(
        self,
        records: list[StoredEvent],
        recorded: list[Event | UnknownEvent],
        exc: BaseException,
    ) -> None:
        """What an append that raised ``exc`` comes to (R20, R24): ``flush``'s
        errors, or, for an append read back in the stream, the batch settled
        as appended (``_appended``)."""
        try:
            raise exc
        except SequenceConflictError:
            self.broken = self.fenced = True
            raise
        except asyncio.CancelledError:
            # Issue 29 item 5: cancelled with the append in flight, its
            # outcome is unknown here (a store may have sent it): like R24's
            # unknown, the cache is broken, and whoever records next reopens
            # the stream, never appends after seqs it may not hold.
            self.broken = True
            self.attempted = (records[-1].seq, records[-1].hash)
            raise
        except LedgerOutcomeUnknownError:
            # R24: the store read back and could not tell; the next
            # activation reads the stream and settles it (``_reconcile``).
            self.broken = True
            self.attempted = (records[-1].seq, records[-1].hash)
            raise
        except StoreError as error:
            # The store's own verdict (R24: it read a lost reply back, or it
            # never sent the append): not in the stream.
            self.broken = True
            self.attempted = (records[-1].seq, records[-1].hash)
            raise LedgerAppendError(
                session_id=self.session_id, store=self.store.url, cause=str(error)
            ) from error
        except Exception as error:
            # Anything else says nothing about the stream: read it back before
            # the run is told anything (R24). Never swallowed.
            landed = await self._read_back(records)
            if landed is not True:
                self.broken = True
                self.attempted = (records[-1].seq, records[-1].hash)
                kind = (
                    LedgerAppendError if landed is False else LedgerOutcomeUnknownError
                )
                raise kind(
                    session_id=self.session_id, store=self.store.url, cause=str(error)
                ) from error
            log.warning(
                "session %s: the append of seqs %d-%d raised (%s) but is in the "
                "stream; the run goes on, and its facts are published (R24)",
                self.session_id,
                records[0].seq,
                records[-1].seq,
                error,
                extra={"session_id": self.session_id},
            )
            await self._publish_facts()
        self._appended(records, recorded)

    def _appended(
        self, records: list[StoredEvent], recorded: list[Event | UnknownEvent]
    ) -> None:
        """A batch is in the stream: the evidence digest, the flushed seq,
        then the listeners (R5: only what was appended is delivered)."""
        if self._signer is not None:
            done = self._evidence[0]
            self._evidence = advance_digest(
                self._evidence, [r for r in records if r.seq > done]
            )
        self.flushed_seq = records[-1].seq
        if self.listeners:
            self._tell(records, recorded)

    def _tell(
        self, records: list[StoredEvent], recorded: list[Event | UnknownEvent]
    ) -> None:
        """Deliver appended events: rows as their facts, copies to whoever may
        change what it is handed (G84, G60, R4, G49).

        A journal stores no fact, so by ``watched``'s rule each row is
        delivered as ``fact_of`` it, with the row's seq; a fact holds no value.
        Any other event is delivered as folded to ``readonly`` watchers, and
        to the rest as a copy sharing no container with the folded objects
        (history and the pending call's args stay the session's): ``detached``
        decodes the stored bytes again for an event that holds one. A
        ``RecordTaker`` (by its class, never by its attributes: G95) is handed
        the append's records instead (frozen bytes: nothing to copy), unless
        the journal serves a redacted form, which is then everyone's.
        """
        listeners, served = self.listeners, self._served
        handed = False
        if served is None and listeners.takers:
            # Record takers read the append as stored: rows and all, as a
            # store reader would; the rest are handed events below.
            listeners.hand_records(records)
            handed = True
            if not listeners.others(handed):
                return
        if served is None and not listeners.copying_after(handed):
            # Everyone reads only: the folded events as they are, rows as facts.
            listeners.deliver_all(
                [
                    fact_of(event) if type(event) is _Filed else event
                    for event in recorded
                ],
                handed=handed,
            )
            return
        copying = served is not None or listeners.copying_after(handed)
        for record, event in zip(records, recorded, strict=True):
            copy = None
            if type(event) is _Filed:
                event = fact_of(event)
            elif copying:
                copy = record.detached(event)
                if copy is event:
                    copy = None
            if served is not None:  # the served form is everyone's
                listeners.deliver(served(copy if copy is not None else event))
            else:
                listeners.deliver(event, copy, handed=handed)

    def deliver(self, event: Any) -> None:
        """Hand one event to the listeners, in its served (redacted) form."""
        if self._served is not None:
            event = self._served(event)
        self.listeners.deliver(event)

    def token(self, content: str) -> None:
        """Deliver a transient ``stream.token`` (never appended, ``seq=None``).

        Callers flush first, so a token never overtakes a recorded event.
        """
        if self.listeners:
            self.deliver(
                StreamToken(
                    session_id=self.session_id, content=content, timestamp=self.clock()
                )
            )

    def discard(self) -> None:
        """Drop events not yet appended (they did not happen)."""
        self._buffer, self._recorded = (), ()
