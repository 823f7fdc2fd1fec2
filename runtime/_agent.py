"""The agent: run, continue, resume; the checkpoint and the snapshot.

Pattern: a facade over the loop that hosts sessions as caches of their
         streams, serializing the operations of each session (R2). Its jobs
         live beside it: the session cache and the operation guard
         (``_hosting.py``), the "last run" cursor (``_cursor.py``), the
         checkpoint-binding checks (``_bindings.py``) and the resume path
         onto the pipeline (``_resume.py``); here are the doors, the run
         path and recovery.
Role:    runtime layer; what library users hold. ``helmlog.Agent`` is this,
         and ``helmlog.AgentBuilder`` (the builder's doors, ``_builder.py``,
         plus ``build()``).
Emits:   through the loop; ``agent.on``/``attach`` subscribe listeners.

Laws: G33–G38 (admission, continued turns, a refused input is not a
conversation, the errors), G59–G68 (pause and resume, decisions, a pending
question blocks continuation), G82–G84, G86 (``last_snapshot`` is served
redacted), R1 (``last_snapshot`` is the fold of the last run's session), R9
(checkpoints are checked before anything is appended, and single-use,
``_bindings.py``; a pause checkpoint whose session the store lacks is
imported, ``_resume.py``), R14, R20 (one writer per session: a run that
loses a sequence conflict appends nothing more and raises
``CheckpointError("replayed")`` when the winner answered the pause it
resumed, else the ``SequenceConflictError``; a turn holding dispatched calls
without results is refused continuation with ``RecoveryRequiredError``), R21
(at most ``max_resident`` sessions resident, idle ones dropped, busy ones
never; a dropped session re-activates silently), issue 8 item 8
(``run``/``follow_up``/``resume`` take the caller's W3C trace context;
without one a turn gets a minted context and a resume continues the turn's
recorded one, see ``_trace.py``), R19 (activation and every operation's
catch-up verify what they read, ``Journal.activate``; a stream that fails is
refused with ``StreamTamperedError`` and nothing runs; a pause's MAC is
computed from the stream's bindings under a key derived from the chain key,
whenever a checkpoint is handed out or checked, and never stored).

Why ``build()`` is here and not in ``_builder.py``: ``Agent.create`` returns
a builder, so this module imports the builder's; the builder constructing
the agent would close an import circle.

Why ``recover`` settles a turn ended by ``error.fatal``: such a turn is
finished (the open-turns index does not list it), but a call it left
dispatched without a result would block the session forever; recovery records
that call's outcome as unknown and runs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from helmlog.events import (
    Checkpoint,
    ConversationSeeded,
    Message,
    MessageCommitted,
    SessionState,
    TurnStarted,
    shape,
)

from ._bindings import check_continuation, continuation_by_id
from ._builder import AgentParts
from ._chain import walk_messages
from ._config import AgentConfig
from ._cursor import LastRun
from ._feed import stream_turn
from ._hosting import Hosting
from ._loop import Loop
from ._pause import AskPause, TurnResult
from ._resume import Resume
from ._session import MessageRefused, Session
from ._trace import NO_TRACE, Trace, resolve
from ._watchers import Listeners
from .providers import Provider


class AgentBuilder(AgentParts):
    """Collects an agent's parts; ``build()`` freezes them into an ``Agent``."""

    def build(self) -> Agent:
        """Freeze the configuration into an agent."""
        return Agent(*self.freeze())


class Agent:
    """A governed agent. Build one with ``Agent.create(provider=..., model=...)``."""

    def __init__(self, config: AgentConfig, listeners: Listeners) -> None:
        self._config = config
        self._loop = Loop(config)
        self._listeners = listeners
        self._cursor = LastRun()
        self._hosting = Hosting(config, listeners, self._loop, self._cursor)
        self._resume = Resume(config, self._loop, self._hosting)
        # The resident sessions, least recently used first (R21).
        self._sessions = self._hosting.sessions

    @staticmethod
    def create(provider: Provider, model: str, **options: Any) -> AgentBuilder:
        """Start building an agent.

        Options: ``redact``, ``store``, ``clock``, ``ids``, ``traces`` (the
        source of minted W3C ``traceparent`` values, default random), ``credentials``,
        ``max_resident`` (sessions kept resident, default 10,000) and
        ``idle_s`` (seconds without an operation after which a resident
        session is dropped, default 600, on the agent's clock). A dropped
        session re-activates from its stream on next use (R21, R6).

        Limits of one turn: ``max_model_calls`` (default 25),
        ``max_tool_calls`` (default 100) and ``max_turn_s`` (seconds of one
        run or resume, on the agent's clock; default none). A turn that
        reaches one stops with ``TurnLimitError``, recorded as
        ``error.fatal``; the session continues from its last answer.
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
        return self._cursor.checkpoint

    def last_snapshot(self) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        return self._cursor.snapshot(self._hosting.resident.get, self._config)

    @property
    def session_id(self) -> str | None:
        """The id of the last run's session."""
        return self._cursor.session_id

    # -- residency (R21) ----------------------------------------------------

    @property
    def resident_count(self) -> int:
        """How many sessions this agent holds in memory now."""
        return len(self._hosting.resident)

    def evict_idle(self, now: int | None = None) -> int:
        """Drop resident sessions idle longer than ``idle_s``; return how many.

        Args:
            now: the agent clock's reading in ms (default: the clock's now).

        A session with an operation in flight is never dropped; a dropped one
        re-activates from its stream on next use, silently (R6).
        """
        return self._hosting.resident.evict_idle(now)

    def forget(self, session_id: str) -> bool:
        """Drop one resident session unless an operation is in flight on it.

        Returns whether it was dropped. Nothing is appended (R6).
        """
        return self._hosting.resident.forget(session_id)

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

        ``session_id`` names the session: a new one (a cluster places a
        session before it exists), or a stored one, continued from its stream
        where its conversation stands, with no checkpoint from the caller.
        ``continue_from`` continues from a checkpoint instead. ``traceparent``
        (with ``tracestate``) is the caller's W3C trace context: the turn's
        spans become its children. Without one (or with a malformed one) the
        turn gets a fresh context; either is recorded on ``agent.turn_start``.
        ``turn`` takes the same arguments and returns the ``TurnResult``.
        """
        result = await self.turn(
            message,
            continue_from=continue_from,
            identity=identity,
            session_id=session_id,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        return result.value

    async def turn(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> TurnResult:
        """``run``, returning this call's own result: the answer or the pause,
        its session id and the checkpoint it left (issue 12 item 3).

        Raises:
            NoConversationError: ``pending-question`` when the session named
                waits on a person.
            RecoveryRequiredError: its last turn left calls dispatched without
                results.
            ValueError: both ``session_id`` and ``continue_from`` name sessions,
                and not the same one.
        """
        if not isinstance(message, str):
            raise TypeError(f"run() takes the message as a str, got {shape(message)}")
        seed: Checkpoint | None = None
        cp: Checkpoint | None = None
        by_id = False
        base_seq = 0
        if session_id is not None and (
            not isinstance(session_id, str) or not session_id
        ):
            raise ValueError("run(session_id=...) takes a non-empty str")
        if continue_from is None and session_id is not None:
            found = await self._hosting.activate(session_id)
            if found is None:
                session = self._hosting.new(session_id)
            else:
                session, by_id = found, True
        elif continue_from is None:
            session = self._hosting.new(self._config.new_id())
        else:
            cp = Checkpoint.coerce(continue_from)
            if session_id is not None and session_id != cp.session_id:
                raise ValueError(
                    f"run(): session_id '{session_id}' is not the checkpoint's "
                    f"session '{cp.session_id}'"
                )
            found = await self._hosting.activate(cp.session_id)
            if found is None:
                session, seed, cp = self._hosting.new(cp.session_id), cp, None
            else:
                session = found
        async with self._hosting.operating(session):
            if cp is not None:
                await session.journal.activate()  # catch up with other hosts
                base_seq = check_continuation(session.journal.folder, cp)
            elif by_id:
                await session.journal.activate()  # catch up with other hosts
                base_seq = continuation_by_id(session.journal.folder)
            self._hosting.use(session)
            trace = resolve(
                traceparent, tracestate, NO_TRACE, self._config.new_traceparent
            )
            out = await self._hosting.guard(
                session,
                self._start_turn(session, message, identity, base_seq, seed, trace),
            )
            return self._hosting.result(session, out)

    async def stream(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> AsyncIterator[Any]:
        """``run``, as ``async for event in agent.stream(message)``.

        Yields what a watcher of this one session is handed, in order: tokens
        (as released under output holding), tool starts and ends, decision
        facts, the pause, the turn's end; then, last, the call's
        ``TurnResult``. A failure of the run is raised from the iterator
        after the events it recorded. Closing the iterator early (leave it
        inside ``contextlib.aclosing``) cancels the turn (``_feed.py``).
        """
        sid = session_id
        if sid is None and continue_from is None:
            sid = self._config.new_id()
        elif sid is None:
            sid = Checkpoint.coerce(continue_from).session_id
        turn = self.turn(
            message,
            continue_from=continue_from,
            identity=identity,
            session_id=sid,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        # Closing this iterator closes the feed's at once, which cancels the turn.
        async with contextlib.aclosing(
            stream_turn(self._listeners, sid, turn)
        ) as items:
            async for item in items:
                yield item

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
                self._cursor.refused()
                raise MessageRefused.of(verdict, "input")
            admitted = verdict.content
        self._cursor.admitted()
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
        cp = self._cursor.continuation()
        return await self.run(
            message, continue_from=cp, traceparent=traceparent, tracestate=tracestate
        )

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
        session = await self._hosting.hosted(session_id)
        async with self._hosting.operating(session):
            await session.journal.activate()  # catch up with other hosts
            f = session.journal.folder
            if f.unfinished:
                self._hosting.use(session)
                return await self._hosting.guard(session, self._loop.drive(session))
            if f.dispatched and f.pending is None:
                self._hosting.use(session)
                try:
                    await self._loop.settle(session)
                finally:
                    await self._hosting.after(session)
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
        ``resume_turn`` returns the ``TurnResult``.
        """
        result = await self._resume(checkpoint, decision, traceparent, tracestate)
        return result.value

    async def resume_turn(
        self,
        checkpoint: Checkpoint | str,
        decision: Any = None,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> TurnResult:
        """``resume``, returning this call's own ``TurnResult``."""
        return await self._resume(checkpoint, decision, traceparent, tracestate)
