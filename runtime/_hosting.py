"""The sessions one agent hosts: caches of their streams, one operation each.

Pattern: activation on first use (Orleans' grains): a session is folded from
         its stream when an operation first names it, kept in a bounded cache
         (``Residency``), operated on under its own lock, one operation at a
         time; ``guard`` runs an operation's body and records a raise once.
Role:    runtime layer; the run, resume and recovery paths find, create and
         lock sessions here; nothing else builds a ``Session``.

Laws: R1/R5 (a broken cache is re-folded from the store), R2, R6, R9, R19,
R20, R21 (busy from start to end of an operation), G91.
Why an empty stream's session is discarded: the cache must not pass for a
session the store lacks. Why activation holds the session's lock: a caller
finding it cached meanwhile waits, so a stream is never folded twice.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

from helmlog.events import CheckpointError, HelmlogError
from helmlog.events.lowlevel import sign_checkpoint

from ._config import AgentConfig
from ._cursor import LastRun
from ._journal import Journal
from ._loop import Loop
from ._residency import Residency
from ._session import MessageRefused, Session
from ._watchers import Listeners
from .pause._pause import AskPause, TurnResult

log = logging.getLogger("helmlog")

T = TypeVar("T")


class Hosting:
    """The resident sessions of one agent, and the operations on them."""

    __slots__ = ("_config", "_cursor", "_listeners", "_loop", "resident")

    def __init__(
        self, config: AgentConfig, listeners: Listeners, loop: Loop, cursor: LastRun
    ) -> None:
        self._config = config
        self._listeners = listeners
        self._loop = loop
        self._cursor = cursor
        self.resident: Residency[Session] = Residency(
            max_resident=config.max_resident, idle_s=config.idle_s, clock=config.clock
        )

    @property
    def sessions(self) -> OrderedDict[str, Session]:
        """The resident sessions, least recently used first (R21)."""
        return self.resident.sessions

    def new(self, session_id: str) -> Session:
        """A fresh, empty session of this id, made resident."""
        cfg = self._config
        journal = Journal(
            cfg.store,
            session_id,
            self._listeners,
            cfg.clock,
            stored_form=cfg.redact.stored if cfg.redact is not None else None,
            served_form=cfg.redact.served if cfg.redact is not None else None,
        )
        session = Session(journal)
        self.resident.admit(session)
        return session

    def discard(self, session: Session) -> None:
        """Drop a session that must not stay resident (nothing of it is recorded)."""
        self.resident.discard(session)

    @contextlib.asynccontextmanager
    async def operating(self, session: Session) -> AsyncIterator[None]:
        """Hold a session's lock for one operation; it is busy meanwhile (R21)."""
        await self.hold(session)
        try:
            yield
        finally:
            self.unhold(session)

    async def hold(self, session: Session) -> None:
        """``operating``'s start, for a caller that pairs it with ``unhold``
        itself (a steered step, on its hot path): busy, then its lock."""
        session.users += 1
        self.resident.touch(session)
        try:
            await session.lock.acquire()
        except BaseException:
            session.users -= 1
            self.resident.release(session)
            raise

    def unhold(self, session: Session) -> None:
        """``operating``'s end: the lock released, no longer busy (R21)."""
        session.lock.release()
        session.users -= 1
        self.resident.release(session)

    def use(self, session: Session) -> None:
        """An operation runs on ``session``: the last-run cursor moves to it."""
        self._cursor.use(session)

    async def activate(self, session_id: str) -> Session | None:
        """The hosted session, activated from its stream on first use (R6).

        A cached session is returned as it is; a broken one re-folds the
        stream when its next operation catches up (``Journal.activate``).
        ``None`` when the store holds no such session.
        """
        session = self.resident.get(session_id)
        if session is not None:
            return session
        session = self.new(session_id)
        try:
            async with self.operating(session):
                await session.journal.activate()
        except BaseException:
            # A cache that never read its stream must not pass for one.
            self.resident.discard(session)
            raise
        if session.journal.folder.last_seq == 0:
            self.resident.discard(session)
            return None
        return session

    async def hosted(self, session_id: str) -> Session:
        """The session, activated; ``CheckpointError("unknown-session")`` if absent."""
        session = await self.activate(session_id)
        if session is None:
            raise CheckpointError(
                "unknown-session", f"no session '{session_id}' in the store"
            )
        return session

    async def refold(self, s: Session) -> None:
        """Re-activate a broken session from the store, in place (R1, R5).

        If the store is still down, it stays broken and its next operation
        re-activates it; the snapshot meanwhile stays the cache's.
        """
        if not s.journal.broken:
            return
        try:
            await s.journal.activate()
        except HelmlogError:
            log.warning("could not re-activate session %s", s.session_id, exc_info=True)
            return
        if s.journal.folder.last_seq == 0:
            # Nothing of it was recorded: the store holds no such session.
            self.resident.discard(s)

    async def guard(
        self,
        s: Session,
        body: Awaitable[T],
        *,
        resumed: int | None = None,
    ) -> T:
        """Run a body; on a raise, record it once (G91) and re-raise.

        The body is a run's, a resume's or one step of a steered turn
        (``_steering.py``): whatever it returns is handed back.

        A body that lost a sequence conflict records nothing (R20); when it
        was resuming the pause at seq ``resumed`` and the winner resolved that
        pause, the loss is the checkpoint's replay (R9).
        """
        try:
            out: T = await body
        except MessageRefused as refused:
            err = refused.error
            await self._loop.fail(
                s, refused, phase=err.phase, middleware=err.middleware
            )
            await self.after(s, refused=err.phase == "input")
            raise err from None
        except BaseException as exc:
            if s.journal.fenced:
                await self.refold(s)
                if resumed is not None and resumed in s.journal.folder.resolved_pauses:
                    raise CheckpointError(
                        "replayed",
                        f"another writer resolved the pause at seq {resumed} first",
                    ) from exc
                raise
            await self._loop.fail(s, exc)
            await self.after(s)
            raise
        settling = self.settled(s)
        if settling is not None:
            await settling
        return out

    def settled(self, s: Session) -> Coroutine[Any, Any, None] | None:
        """An operation ended without a raise (``guard``'s end, and a steered
        step's, which runs its body inline): the checkpoint moved now, or,
        for a broken cache, the coroutine that re-folds it first (``after``),
        to await. No coroutine for a cache that is whole."""
        if s.journal.broken:
            return self.after(s)
        self._cursor.settle(s.journal.folder, self._config.store.chain_key)
        return None

    def result(self, s: Session, out: str | AskPause) -> TurnResult:
        """What an operation on ``s`` came to, read while it still holds the
        session: its answer or pause, and the checkpoint it left (R1, R9)."""
        output, s.output = s.output, None
        if isinstance(out, AskPause):
            return TurnResult(s.session_id, None, out, out.checkpoint)
        cursor = self._cursor
        settled = cursor.conversation.checkpoint
        if cursor.session is s and settled is not None:
            # ``after`` just settled it, with nothing run in between.
            return TurnResult(s.session_id, out, None, settled, output)
        f = s.journal.folder
        checkpoint = sign_checkpoint(
            f.checkpoint, f.pending, self._config.store.chain_key
        )
        return TurnResult(s.session_id, out, None, checkpoint, output)

    async def after(self, s: Session, *, refused: bool = False) -> None:
        """An operation ended: re-fold a broken cache, then move the checkpoint."""
        if s.journal.broken:
            await self.refold(s)
        if not refused:
            self._cursor.settle(s.journal.folder, self._config.store.chain_key)
