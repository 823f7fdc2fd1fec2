"""The agent: run, continue, resume; the checkpoint and the snapshot.

Pattern: a facade over the loop that hosts sessions as caches of their
         streams, serializing the operations of each session (R2).
Role:    runtime layer; what library users hold. ``helmlog.Agent`` is this.
Emits:   through the loop; ``agent.on``/``attach`` subscribe listeners.

Laws: G33–G38 (admission, continued turns, a refused input is not a
conversation, the errors), G59–G68 (pause and resume, decisions, a pending
question blocks continuation), G82–G84, G86 (``last_snapshot`` is served
redacted), R1 (``last_snapshot`` is the fold of the last run's session), R9
(checkpoints are checked before anything is appended, and single-use; a
pause checkpoint whose session the store lacks is imported: the stream it
seeds opens with ``session.imported``, and the import is checked like any
resume, on that stream, before anything is appended), R14,
R20 (one writer per session: a run that loses a sequence conflict appends
nothing more and raises ``CheckpointError("replayed")`` when the winner
answered the pause it resumed, else the ``SequenceConflictError``; a turn
holding dispatched calls without results is refused continuation with
``RecoveryRequiredError``), R21 (at most ``max_resident`` sessions resident,
idle ones dropped, busy ones never; a dropped session re-activates silently),
issue 8 item 8 (``run``/``follow_up``/``resume`` take the caller's W3C trace
context; without one a turn gets a minted context and a resume continues the
turn's recorded one, see ``_trace.py``), R19 (activation and every
operation's catch-up verify what they read, ``Journal.activate``; a stream
that fails is refused with ``StreamTamperedError`` and nothing runs; a
pause's MAC is computed here, from the stream's bindings under a key derived
from the chain key, whenever a checkpoint is handed out or checked, and never
stored).

Why sessions are re-activated from the store after a failed append: the
cached fold then holds events the store never accepted; the store's stream is
the truth (R1, R5).

Why an import is checked on a scratch fold of its own event: the checks that
bind a checkpoint to a stream (R9) are then the same code for a stream this
store holds and for the one the import would seed, MAC included; only what a
stream cannot say (the carried arguments against ``args_digest``) is checked
beside them. Without a chain key nothing can tell a forged checkpoint from a
genuine one that is self-consistent; with one, the MAC covers the history and
the paused call too.

Why resume checks everything and then hands over: what a resume may append
is decided here (the checkpoint's bindings, the decision's type, both before
``pause.resume``); what the call does next is the pipeline's
(``ToolPipeline.resume``: the asker's row, then the asking link's next link,
credentials after a check-in, or the after-tool walk over an answer), the
same steps a fresh call takes, so the order lives in one place.

Why ``recover`` settles a turn ended by ``error.fatal``: such a turn is
finished (the open-turns index does not list it), but a call it left
dispatched without a result would block the session forever; recovery records
that call's outcome as unknown and runs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    ConversationSeeded,
    DecisionRequiredError,
    Folder,
    HelmlogError,
    Message,
    MessageCommitted,
    NoConversationError,
    PauseResumed,
    PendingPause,
    RecoveryRequiredError,
    SessionImported,
    SessionState,
    ToolCallRequest,
    TurnStarted,
    digest,
    shape,
    sign_checkpoint,
)

from ._builder import AgentBuilder
from ._chain import CallSite, walk_messages
from ._config import AgentConfig
from ._journal import Journal
from ._loop import Loop, MessageRefused, Session, find_call
from ._pause import AskPause, CheckInDecision
from ._residency import Residency
from ._tools import Tool
from ._trace import NO_TRACE, Trace, given, resolve
from ._watchers import Listeners
from .providers import Provider

log = logging.getLogger("helmlog")


class Agent:
    """A governed agent. Build one with ``Agent.create(provider=..., model=...)``."""

    def __init__(self, config: AgentConfig, listeners: Listeners) -> None:
        self._config = config
        self._loop = Loop(config)
        self._listeners = listeners
        self._resident = Residency(
            max_resident=config.max_resident, idle_s=config.idle_s, clock=config.clock
        )
        # The resident sessions, least recently used first (R21).
        self._sessions = self._resident.sessions
        self._last_session_id: str | None = None
        # The last run's session, kept for last_snapshot() even once dropped.
        self._last: Session | None = None
        self._checkpoint: Checkpoint | None = None
        self._admitted_once = False
        self._last_input_refused = False

    @staticmethod
    def create(provider: Provider, model: str, **options: Any) -> AgentBuilder:
        """Start building an agent.

        Options: ``redact``, ``store``, ``clock``, ``ids``, ``traces`` (the
        source of minted W3C ``traceparent`` values, default random), ``credentials``,
        ``max_resident`` (sessions kept resident, default 10,000) and
        ``idle_s`` (seconds without an operation after which a resident
        session is dropped, default 600, on the agent's clock). A dropped
        session re-activates from its stream on next use (R21, R6).
        """
        return AgentBuilder(provider, model, **options)

    @property
    def config(self) -> AgentConfig:
        """The frozen configuration this agent runs with."""
        return self._config

    @property
    def store(self) -> Any:
        """The event store this agent records into."""
        return self._config.store

    @property
    def policy_version(self) -> str:
        """Digest of this agent's governance posture (R9)."""
        return self._config.policy_version

    # -- listening --------------------------------------------------------

    def on(self, event_type: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe ``fn`` to one event type (``"*"`` for all); returns unsubscribe."""
        return self._listeners.on(event_type, fn)

    def attach(self, watcher: Any) -> Callable[[], None]:
        """Attach a watcher at runtime (G82, G83); returns unsubscribe."""
        (w,) = self._listeners.check_watchers([watcher]) or (watcher,)
        return self._listeners.attach(w)

    async def idle(self) -> None:
        """Wait until async watchers have seen every event delivered so far."""
        await self._listeners.idle()

    # -- state ------------------------------------------------------------

    def checkpoint(self) -> Checkpoint | None:
        """Where the last run left its conversation; ``None`` after a refused input."""
        return self._checkpoint

    def last_snapshot(self) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        if self._last_session_id is None:
            return SessionState()
        session = self._resident.get(self._last_session_id) or self._last
        state = session.journal.folder.state() if session else SessionState()
        key = self._config.store.chain_key
        if key and state.checkpoint is not None:
            # R1's keyed exception: the fold is keyless; the MAC is added here.
            keyed = sign_checkpoint(state.checkpoint, state.pending, key)
            state = msgspec.structs.replace(state, checkpoint=keyed)
        redact = self._config.redact
        return redact.served(state) if redact is not None else state

    @property
    def session_id(self) -> str | None:
        """The id of the last run's session."""
        return self._last_session_id

    # -- residency (R21) ----------------------------------------------------

    @property
    def resident_count(self) -> int:
        """How many sessions this agent holds in memory now."""
        return len(self._resident)

    def evict_idle(self, now: int | None = None) -> int:
        """Drop resident sessions idle longer than ``idle_s``; return how many.

        Args:
            now: the agent clock's reading in ms (default: the clock's now).

        A session with an operation in flight is never dropped; a dropped one
        re-activates from its stream on next use, silently (R6).
        """
        return self._resident.evict_idle(now)

    def forget(self, session_id: str) -> bool:
        """Drop one resident session unless an operation is in flight on it.

        Returns whether it was dropped. Nothing is appended (R6).
        """
        return self._resident.forget(session_id)

    @contextlib.asynccontextmanager
    async def _operating(self, session: Session) -> AsyncIterator[None]:
        """Hold a session's lock for one operation; it is busy meanwhile (R21)."""
        session.users += 1
        self._resident.touch(session)
        try:
            async with session.lock:
                yield
        finally:
            session.users -= 1
            self._resident.release(session)

    def _use(self, session: Session) -> None:
        self._last_session_id = session.session_id
        self._last = session

    # -- sessions ---------------------------------------------------------

    def _new_session(self, session_id: str) -> Session:
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
        self._resident.admit(session)
        return session

    async def _activate(self, session_id: str) -> Session | None:
        """The hosted session, activated from its stream on first use (R6).

        A cached session is returned as it is; a broken one re-folds the
        stream when its next operation catches up (``Journal.activate``).
        """
        session = self._resident.get(session_id)
        if session is not None:
            return session
        session = self._new_session(session_id)
        # R9, R2: a caller that finds this session cached meanwhile waits on its
        # lock, so the stream is never folded twice into one cache.
        try:
            async with self._operating(session):
                await session.journal.activate()
        except BaseException:
            # A cache that never read its stream must not pass for one.
            self._resident.discard(session)
            raise
        if session.journal.folder.last_seq == 0:
            self._resident.discard(session)
            return None
        return session

    async def _hosted(self, session_id: str) -> Session:
        """The session, activated; ``CheckpointError("unknown-session")`` if absent."""
        session = await self._activate(session_id)
        if session is None:
            raise CheckpointError(
                "unknown-session", f"no session '{session_id}' in the store"
            )
        return session

    # -- running ----------------------------------------------------------

    async def run(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Run one turn: admit the message, loop, return the answer or a pause.

        ``session_id`` names a fresh session (a cluster places a session before
        it exists); it must be new to the store. ``traceparent`` (with
        ``tracestate``) is the caller's W3C trace context: the turn's spans
        become its children. Without one (or with a malformed one) the turn
        gets a fresh context; either is recorded on ``agent.turn_start``.
        """
        if not isinstance(message, str):
            raise TypeError(f"run() takes the message as a str, got {shape(message)}")
        seed: Checkpoint | None = None
        cp: Checkpoint | None = None
        base_seq = 0
        if continue_from is None and session_id is not None:
            if not isinstance(session_id, str) or not session_id:
                raise ValueError("run(session_id=...) takes a non-empty str")
            if await self._activate(session_id) is not None:
                raise ValueError(
                    f"session '{session_id}' already exists: continue it with "
                    "run(message, continue_from=checkpoint)"
                )
            session = self._new_session(session_id)
        elif continue_from is None:
            session = self._new_session(self._config.new_id())
        else:
            cp = Checkpoint.coerce(continue_from)
            found = await self._activate(cp.session_id)
            if found is None:
                session, seed, cp = self._new_session(cp.session_id), cp, None
            else:
                session = found
        async with self._operating(session):
            if cp is not None:
                await session.journal.activate()  # catch up with other hosts
                base_seq = self._check_continuation(session.journal.folder, cp)
            self._use(session)
            trace = resolve(
                traceparent, tracestate, NO_TRACE, self._config.new_traceparent
            )
            return await self._guard(
                session,
                self._start_turn(session, message, identity, base_seq, seed, trace),
            )

    def _check_continuation(self, f: Folder, cp: Checkpoint) -> int:
        if f.pending is not None:
            raise NoConversationError("pending-question")
        if f.dispatched:
            # R20, R7: whether those calls took effect is not recorded yet.
            raise RecoveryRequiredError(
                session_id=cp.session_id, call_ids=tuple(f.dispatched)
            )
        if cp.kind != "conversation":
            raise CheckpointError("stale", "a pause checkpoint was already resumed")
        held = f.history_at(cp.seq)
        if held is None or held[0] != cp.history:
            raise CheckpointError(
                "tampered",
                f"seq {cp.seq} and history do not match session '{cp.session_id}'",
            )
        return cp.seq

    async def _start_turn(
        self,
        s: Session,
        message: str,
        identity: Mapping[str, Any] | None,
        base_seq: int,
        seed: Checkpoint | None,
        trace: Trace,
    ) -> str | AskPause:
        cfg = self._config
        j = s.journal
        ident = dict(identity) if identity is not None else {"session_id": s.session_id}
        admitted = message
        if cfg.message_links:
            verdict = await walk_messages(
                cfg.message_links,
                "input",
                message,
                history=(),
                identity=ident,
                iteration=0,
            )
            j.file(verdict.rows)
            if verdict.denied:
                self._checkpoint = None
                self._last_input_refused = True
                raise MessageRefused.of(verdict, "input")
            admitted = verdict.content
        self._admitted_once = True
        self._last_input_refused = False
        if seed is not None:
            seeded = j.add(
                ConversationSeeded(
                    history=seed.history, original_input=seed.original_input
                )
            )
            base_seq = seeded.seq or 0
        j.add(
            TurnStarted(
                turn=j.folder.turn + 1,
                base_seq=base_seq,
                identity=ident,
                traceparent=trace[0],
                tracestate=trace[1],
            )
        )
        j.add(MessageCommitted(message=Message(role="user", content=admitted)))
        return await self._loop.drive(s)

    async def follow_up(
        self,
        message: str,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Continue the last conversation: ``run(m, continue_from=checkpoint())``."""
        cp = self._checkpoint
        if cp is None:
            reason = (
                "last-input-refused"
                if self._last_input_refused and self._admitted_once
                else "never-run"
            )
            raise NoConversationError(reason)
        if cp.kind == "pause":
            raise NoConversationError("pending-question")
        return await self.run(
            message, continue_from=cp, traceparent=traceparent, tracestate=tracestate
        )

    async def _guard(
        self, s: Session, body: Any, *, resumed: int | None = None
    ) -> str | AskPause:
        """Run a body; on a raise, record it once (G91) and re-raise.

        A body that lost a sequence conflict records nothing (R20); when it
        was resuming the pause at seq ``resumed`` and the winner resolved that
        pause, the loss is the checkpoint's replay (R9).
        """
        try:
            out: str | AskPause = await body
        except MessageRefused as refused:
            err = refused.error
            await self._loop.fail(
                s, refused, phase=err.phase, middleware=err.middleware
            )
            await self._after(s, refused=err.phase == "input")
            raise err from None
        except BaseException as exc:
            if s.journal.fenced:
                await self._refold(s)
                if resumed is not None and resumed in s.journal.folder.resolved_pauses:
                    raise CheckpointError(
                        "replayed",
                        f"another writer resolved the pause at seq {resumed} first",
                    ) from exc
                raise
            await self._loop.fail(s, exc)
            await self._after(s)
            raise
        await self._after(s)
        return out

    async def _refold(self, s: Session) -> None:
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
            self._resident.discard(s)

    async def _after(self, s: Session, *, refused: bool = False) -> None:
        await self._refold(s)
        if not refused:
            f = s.journal.folder
            key = self._config.store.chain_key
            self._checkpoint = sign_checkpoint(f.checkpoint, f.pending, key)

    async def recover(self, session_id: str) -> str | AskPause | None:
        """Take over a session whose host stopped mid-turn, and finish the turn.

        Activation folds the stream; if a turn was left unfinished with no
        pause pending, the turn continues from the record (R7): a call that
        was dispatched without a recorded result is not run again (its outcome
        is recorded as unknown) unless its tool is idempotent, the rest of the
        batch is dispatched, and the model is called. Returns the answer or a
        new pause; ``None`` when there was nothing to finish.

        A turn is unfinished when it started and was ended neither by
        ``agent.turn_end`` nor by ``error.fatal``, with no pause pending
        (``Folder.unfinished``). A turn ended by ``error.fatal`` is not
        continued, but calls it left dispatched without a result are recorded
        as ``tool.outcome_unknown`` (nothing runs again), so the session can
        be continued; this returns ``None``.

        Raises:
            CheckpointError: ``unknown-session`` when the store lacks it.
            SequenceConflictError: another writer appended first; this
                recovery appended nothing more (R20).
        """
        session = await self._hosted(session_id)
        async with self._operating(session):
            await session.journal.activate()  # catch up with other hosts
            f = session.journal.folder
            if f.unfinished:
                self._use(session)
                return await self._guard(session, self._loop.drive(session))
            if f.dispatched and f.pending is None:
                self._use(session)
                try:
                    await self._loop.settle(session)
                finally:
                    await self._after(session)
            return None

    def run_sync(self, message: str, **kwargs: Any) -> str | AskPause:
        """``run`` for scripts without an event loop.

        Its loop ends with it, so it waits for async and deferred watchers to
        catch up first (G84): what they were handed is not dropped.
        """

        async def settled() -> str | AskPause:
            out = await self.run(message, **kwargs)
            await self.idle()
            return out

        return asyncio.run(settled())

    # -- resume -------------------------------------------------------------

    async def resume(
        self,
        checkpoint: Checkpoint | str,
        decision: Any = None,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Answer a pause and continue the run (G59–G70).

        ``traceparent``/``tracestate``: the resuming caller's W3C trace
        context (an approval request's, say); the continuation's spans become
        its children. Without one the turn's recorded context goes on (an
        imported checkpoint carries none: its session gets a fresh one).
        """
        cp = Checkpoint.coerce(checkpoint)
        caller = given(traceparent, tracestate)
        found = await self._activate(cp.session_id)
        imported: SessionImported | None = None
        if found is None:
            # R9: a pause checkpoint of a session this store lacks is imported.
            traceparent, tracestate = caller or (self._config.new_traceparent(), "")
            imported = msgspec.structs.replace(
                self._importable(cp), traceparent=traceparent, tracestate=tracestate
            )
            session = self._new_session(cp.session_id)
        else:
            session = found
        try:
            return await self._resume_in(session, cp, decision, imported, caller)
        finally:
            if imported is not None and session.journal.folder.last_seq == 0:
                # Refused before anything was appended: no session to keep.
                self._resident.discard(session)

    async def _resume_in(
        self,
        session: Session,
        cp: Checkpoint,
        decision: Any,
        imported: SessionImported | None,
        caller: Trace | None,
    ) -> str | AskPause:
        async with self._operating(session):
            if imported is None:
                await session.journal.activate()  # catch up with other hosts
                f = session.journal.folder
            else:
                # Check the import as resume checks any pause, on the stream
                # it would seed, before anything is appended.
                f = Folder(cp.session_id)
                f.apply(imported)
            pending = self._check_pause(f, cp)
            call, tool = self._paused_call(f, pending)
            if pending.kind in ("ask", "check-in"):
                if not isinstance(decision, CheckInDecision):
                    raise DecisionRequiredError(
                        gate=pending.kind,
                        middleware=pending.middleware,
                        tool_name=pending.tool_name,
                        received="nothing" if decision is None else shape(decision),
                    )
            elif decision is None:
                raise DecisionRequiredError(
                    gate="ask-human",
                    middleware=None,
                    tool_name=pending.tool_name,
                    received="nothing",
                )
            if imported is not None:
                # The pause as recorded (stamped) is the one resumed.
                session.journal.add(imported)
                pending = session.journal.folder.pending or pending
            self._use(session)
            trace = caller or resolve(
                None, None, session.journal.folder.trace, self._config.new_traceparent
            )
            return await self._guard(
                session,
                self._resume(session, pending, call, tool, decision, trace),
                resumed=cp.seq,
            )

    def _importable(self, cp: Checkpoint) -> SessionImported:
        """The import event for a pause checkpoint this store lacks (R9).

        Refused, before anything is appended, when the checkpoint cannot be
        resumed faithfully: ``"unknown-session"`` for a conversation
        checkpoint or one written before checkpoints carried their call,
        ``"tampered"`` when the carried arguments do not match
        ``args_digest``. ``_check_pause`` then checks the rest on the stream
        the import would seed, the MAC included under a chain key.
        """
        call = cp.call
        if cp.kind != "pause" or isinstance(call, msgspec.UnsetType):
            raise CheckpointError(
                "unknown-session",
                f"no session '{cp.session_id}' in the store, and a "
                f"{cp.kind} checkpoint without its paused call cannot seed one",
            )
        if digest(call.args) != cp.args_digest:
            raise CheckpointError(
                "tampered", "the carried arguments do not match args_digest"
            )
        return SessionImported(
            session_id=cp.session_id,
            kind=cp.kind,
            checkpoint_digest=cp.digest(),
            checkpoint_seq=cp.seq,
            history=cp.history,
            original_input=cp.original_input,
            tool_name=cp.tool_name or "",
            tool_call_id=cp.tool_call_id or "",
            args_digest=cp.args_digest or "",
            policy_version=cp.policy_version or "",
            content_digest=cp.content_digest() or "",
            call=call,
        )

    def _paused_call(self, f: Folder, p: PendingPause) -> tuple[ToolCallRequest, Tool]:
        """The paused call and its tool, checked as read from the stream.

        The stream is data, not an invariant: a pause whose kind, call, tool or
        asking link the session does not hold is refused as ``"tampered"``
        before anything is appended (G91, R9), never by an ``assert``.
        """
        call = find_call(f.history, p.tool_call_id)
        tool = self._config.tools.get(p.tool_name)
        if call is None or tool is None or call.name != p.tool_name:
            raise CheckpointError(
                "tampered", f"call {p.tool_call_id} is not in the session"
            )
        if p.kind not in ("ask", "check-in", "ask-human"):
            raise CheckpointError("tampered", f"no pause of kind {p.kind!r}")
        if p.kind == "ask":
            links = self._config.tool_links
            if (
                p.middleware is None
                or not 0 <= p.link_index < len(links)
                or links[p.link_index].name != p.middleware
            ):
                raise CheckpointError(
                    "tampered", "the ask names no link of this agent's chain"
                )
        return call, tool

    def _check_pause(self, f: Folder, cp: Checkpoint) -> PendingPause:
        """R9: refuse a checkpoint before anything is appended; the pending pause."""
        if cp.kind != "pause":
            raise CheckpointError(
                "stale", "a conversation checkpoint cannot be resumed"
            )
        if cp.seq in f.resolved_pauses:
            raise CheckpointError(
                "replayed", f"the pause at seq {cp.seq} was already resolved"
            )
        if cp.seq not in f.pause_seqs:
            # R9: the seq binding names no pause.request in the stream.
            raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
        p = f.pending
        if p is None or p.seq != cp.seq:
            if p is not None and cp.seq > p.seq:
                raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
            raise CheckpointError(
                "stale", f"the session moved past the pause at seq {cp.seq}"
            )
        stored = f.pause_checkpoint
        if stored is None:
            raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
        if (
            cp.tool_call_id != p.tool_call_id
            or cp.args_digest != p.args_digest
            or cp.policy_version != p.policy_version
            or cp.tool_name != p.tool_name
            or cp.history != stored.history
            # A checkpoint written before it carried its call is still good.
            or (not isinstance(cp.call, msgspec.UnsetType) and cp.call != stored.call)
        ):
            raise CheckpointError(
                "tampered", "a binding disagrees with the session stream"
            )
        self._check_mac(cp, p, stored.mac)
        if p.policy_version != self._config.policy_version:
            raise CheckpointError(
                "policy-changed",
                "the agent's rules changed since this pause; resume it with the agent "
                "that paused it",
            )
        return p

    def _check_mac(self, cp: Checkpoint, p: PendingPause, stored: str | None) -> None:
        """R9: the checkpoint's MAC, recomputed from the stream's bindings.

        A pause recorded before R19 stored its MAC (``stored``): its old
        checkpoints carry that MAC, made by ``binding_mac`` under the chain
        key itself. A newer pause stores none; its MAC is ``pause_mac``'s,
        under the derived checkpoint key. Without a chain key a checkpoint
        carries no MAC beyond one its stream stored.
        """
        key = self._config.store.chain_key
        content = p.content_digest or None
        if stored:
            if (cp.mac or None) != stored:
                raise CheckpointError(
                    "tampered", "a binding disagrees with the session stream"
                )
            if not key:
                return
            expected = cp.expected_mac(key, content, stored=True)
        elif key:
            expected = cp.expected_mac(key, content)
        elif cp.mac:
            raise CheckpointError(
                "tampered", "a binding disagrees with the session stream"
            )
        else:
            return
        if not cp.mac or not hmac.compare_digest(cp.mac.encode(), expected.encode()):
            raise CheckpointError("tampered", "the checkpoint's MAC does not verify")

    async def _resume(
        self,
        s: Session,
        p: PendingPause,
        call: ToolCallRequest,
        tool: Tool,
        decision: Any,
        trace: Trace,
    ) -> str | AskPause:
        cfg = self._config
        loop = self._loop
        j = s.journal
        f = j.folder
        checkin = decision if isinstance(decision, CheckInDecision) else None
        if checkin is None and p.kind != "ask-human":
            # resume() refused this already; a gate never falls through to a result.
            raise DecisionRequiredError(
                gate=p.kind,
                middleware=p.middleware,
                tool_name=p.tool_name,
                received=shape(decision),
            )
        j.add(
            PauseResumed(
                kind=p.kind,
                tool_call_id=p.tool_call_id,
                approved=checkin.approved if checkin is not None else None,
                by=checkin.by if checkin is not None else None,
                note=checkin.note if checkin is not None else None,
                paused_duration_ms=max(0, cfg.clock() - p.timestamp),
                component_id=p.component_id,
                traceparent=trace[0],
                tracestate=trace[1],
            )
        )
        site = CallSite(
            p.tool_name,
            tool.source,
            p.tool_call_id,
            p.iteration,
            tuple(f.history),
            loop.identity(s),
        )
        outcome = await loop.pipeline.resume(tool, site, p, decision, s)
        pause = await loop.conclude(s, call, site, outcome)
        if pause is not None:
            return pause
        return await loop.drive(s)
