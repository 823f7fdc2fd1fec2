"""The agent: run, continue, resume, recover; what library users hold.

Pattern: a facade whose doors delegate, each to the module that does the job:
         the run path (``_run.py``), the resume path (``_resume.py``, checked
         by ``_bindings.py``), recovery (``_recovery.py``), the session cache
         and operation guard (``_hosting.py``) and the loop (``_loop.py``); the
         doors over what an agent holds are its base's (``_agent_state.py``).
Role:    runtime layer; ``helmlog.Agent`` is this, and ``helmlog.AgentBuilder``
         (the builder's doors, ``_builder.py``, plus ``build()``).
Emits:   through the loop; ``agent.on``/``attach`` subscribe listeners.

Laws: G33–G38 and G59–G70 (admission, continued turns, pause and resume,
decisions, the errors: ``_run.py``, ``_resume.py``, ``_bindings.py``), G84
(``run_sync`` waits for watchers), R7 (``recover``, ``_recovery.py``), R9,
R14, R19, R20, R23 and issue 8 item 8 (checkpoints, verified streams, one
writer, a turn's limits, trace context: the run and resume paths), issue 12
(``turn``/``resume_turn`` return the call's own ``TurnResult``; ``stream``
yields the session's events, ``_feed.py``).

Why the bodies live elsewhere and the docstrings here: users read
``help(Agent.run)``; each job is then a module a newcomer reads whole.

Why ``build()`` is here and not in ``_builder.py``: ``Agent.create`` returns
a builder, so this module imports the builder's; the builder constructing
the agent would close an import circle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from helmlog.events import Checkpoint

from ._agent_state import AgentState
from ._builder import AgentParts
from ._config import AgentConfig
from ._feed import stream_turn
from ._pause import AskPause, TurnResult
from ._recovery import Recovery
from ._resume import Resume
from ._run import Run
from ._watchers import Listeners
from .providers import Provider


class AgentBuilder(AgentParts):
    """Collects an agent's parts; ``build()`` freezes them into an ``Agent``."""

    def build(self) -> Agent:
        """Freeze the configuration into an agent."""
        return Agent(*self.freeze())


class Agent(AgentState):
    """A governed agent. Build one with ``Agent.create(provider=..., model=...)``."""

    def __init__(self, config: AgentConfig, listeners: Listeners) -> None:
        super().__init__(config, listeners)
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
