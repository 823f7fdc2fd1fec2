"""The agent and its builder: what library users hold.

Pattern: two facades. ``Agent`` holds the parts that do its jobs, each owning
         its state: the loop (``_loop.py``), the "last run" cursor
         (``_cursor.py``), the session cache and operation guard
         (``_hosting.py``), the run, resume and recovery paths (``_run.py``,
         ``pause/_resume.py``, ``_recovery.py``) and the listeners (``_watchers.py``).
         ``AgentBuilder`` holds the checked parts of ``_builder.py``.
Role:    runtime layer; ``helmlog.Agent`` and ``helmlog.AgentBuilder``.

Laws: G33–G38, G59–G70 (run, resume, decisions), G82–G84 (listeners), G84
(``run_sync`` waits for watchers), R1/G86 (``last_snapshot``), R7
(``recover``), R9, R21/R6 (residency), issue 12 (``turn``, ``stream``).
Why both here: ``Agent.create`` returns a builder and ``build()`` makes an agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Self

from helmlog.events import Checkpoint, SessionState

from ._builder import Options, Rules, Toolset, freeze
from ._config import AgentConfig
from ._cursor import LastRun
from ._errors import AgentBuildError
from ._feed import stream_turn
from ._hosting import Hosting
from ._loop import Loop
from ._recovery import Recovery
from ._run import Run
from ._tools import Tool
from ._watchers import Listeners
from ._window import WindowStrategy
from .pause._pause import AskPause, TurnResult
from .pause._resume import Resume
from .providers import Provider


class AgentBuilder:
    """Collects an agent's parts; ``build()`` freezes them into an ``Agent``."""

    def __init__(self, provider: Provider, model: str, **options: Any) -> None:
        self._options = Options(provider, model, **options)
        self._system = ""
        self._toolset = Toolset()
        self._rules = Rules()
        self._watchers: list[Any] = []

    def system(self, prompt: str) -> Self:
        """Set the system prompt."""
        if not isinstance(prompt, str):
            raise AgentBuildError("system() takes a str")
        self._system = prompt
        return self

    def tool(self, *tools: Tool) -> Self:
        """Register tools, in order; a name may be registered once."""
        self._toolset.add(tools)
        return self

    tools = tool

    def permissions(self, checker: Callable[[Any], Any]) -> Self:
        """Install the permission gate (G54): ``checker(call) -> Allow | Deny``."""
        self._rules.set_permissions(checker)
        return self

    def tool_middleware(self, *links: Any) -> Self:
        """Append tool links in order, after checking every one (G10)."""
        self._rules.add_tool_links(links)
        return self

    def message_middleware(self, *links: Any) -> Self:
        """Append message links in order, after checking every one (G10)."""
        self._rules.add_message_links(links)
        return self

    def window(self, strategy: WindowStrategy) -> Self:
        """Set the window strategy (G79)."""
        self._rules.set_window(strategy)
        return self

    def act(self, **keys: Any) -> Self:
        """Declare the whole wheel in one place (G72–G77)."""
        self._rules.act(keys)
        return self

    def watch(self, *watchers: Any) -> Self:
        """Attach watchers at ``build()`` (G82); zero is allowed."""
        self._watchers.extend(watchers)
        return self

    def freeze(self) -> tuple[AgentConfig, Listeners]:
        """The frozen configuration and the watchers attached at build (G82)."""
        listeners = Listeners()
        for w in listeners.check_watchers(self._watchers):
            listeners.attach(w)
        return freeze(
            self._options, self._system, self._toolset, self._rules
        ), listeners

    def build(self) -> Agent:
        """Freeze the configuration into an agent."""
        return Agent(*self.freeze())


class Agent:
    """A governed agent. Build one with ``Agent.create(provider=..., model=...)``."""

    def __init__(self, config: AgentConfig, listeners: Listeners) -> None:
        self._config = config
        self._listeners = listeners
        self._loop = Loop(config)
        self._cursor = LastRun()
        self._hosting = Hosting(config, listeners, self._loop, self._cursor)
        # The resident sessions, least recently used first (R21).
        self._sessions = self._hosting.sessions
        self._run = Run(config, self._loop, self._hosting, self._cursor)
        self._resume = Resume(config, self._loop, self._hosting)
        self._recovery = Recovery(config, self._loop, self._hosting)

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
        ``output_type`` and ``max_output_retries`` (default 2): typed output,
        ``TurnResult.output`` (G92, docs/guide.md "Typed output").
        ``signer``: signs each turn's and pause's head (a
        ``helmlog_evidence.SigningKey``, a key file, a function returning
        one, or a ``HeadSigner``; default ``$HELMLOG_SIGNING_KEY``, else
        none), docs/evidence.md.
        """
        return AgentBuilder(provider, model, **options)

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
        result = await self._run(
            message, continue_from, identity, session_id, traceparent, tracestate
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
        return await self._run(
            message, continue_from, identity, session_id, traceparent, tracestate
        )

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
        sid = self._run.session_id(continue_from, session_id)
        turn = self._run(message, continue_from, identity, sid, traceparent, tracestate)
        # Closing this iterator closes the feed's at once, which cancels the turn.
        async with contextlib.aclosing(
            stream_turn(self._listeners, sid, turn)
        ) as items:
            async for item in items:
                yield item

    async def follow_up(
        self,
        message: str,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Continue the last conversation: ``run(m, continue_from=checkpoint())``."""
        cp = self._cursor.conversation.continuation()
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
        return await self._recovery(session_id)

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
        return self._cursor.conversation.checkpoint

    def last_snapshot(self) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        return self._cursor.snapshot(self._hosting.resident.get, self._config)

    @property
    def session_id(self) -> str | None:
        """The id of the last run's session."""
        return self._cursor.conversation.session_id

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
