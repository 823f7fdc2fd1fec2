"""Steering: a helmlog agent's sessions, driven by a loop another framework runs.

Pattern: the native loop taken apart at its moments: a ``SteeredTurn`` is
         opened by ``Run``'s own admission, each model call and tool call is
         one operation under the session's lock and ``Hosting.guard``, a
         call goes through the one pipeline (``IN_AGENT``) and a pause is
         answered by ``Resume``'s own checks, stopping at the call's outcome.
Role:    runtime layer, exported by ``helmlog.runtime.lowlevel``; the
         integrations (LangChain, the OpenAI Agents SDK, Pydantic AI) build
         on it, through ``helmlog.integrations.Governance``.

Laws: issue 27 items 1–5 (one record: the native loop's rows and events),
G33–G43, G51, G59–G66, G91, R1, R7, R9, R19, R20, R21, R23.
Why every step catches up with the stream and is re-entrant per call id: a
framework re-runs a node after an interrupt, re-enters after an approval,
and a person may decide from another process; the record says what
happened, so a step already recorded is read back, never appended twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, NoReturn

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    DecisionFiled,
    EventStore,
    Folder,
    MemoryEventStore,
    Message,
    PauseResumed,
    SessionImported,
    ToolCallRequest,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnStarted,
    shape,
)
from helmlog.events.lowlevel import sign_checkpoint

from ._agent import Agent
from ._chain import CallSite
from ._errors import SteeringError
from ._journal import Journal
from ._limits import TurnBudget
from ._loop import record_reply
from ._session import Session, find_call, outstanding_calls
from ._steps import Admitted, Entry, Paused, Ran, Refused, Step
from ._tools import Tool
from ._trace import NO_TRACE, given, resolve
from .pause._pause import AskPause, MiddlewareAsk, pause_kind
from .pause._resume import Resumed
from .providers import Reply

Outcome = Ran | Refused | AskPause
"""What the model must read of a call: its result, its refusal, or its pause."""


class Steering:
    """Drive an agent's sessions from another framework's loop.

    ``Steering(agent)`` shares the agent's configuration, loop, sessions and
    locks (``Agent.run`` and a steered turn on one session take turns); the
    agent's provider is never called (``framework_model(name)`` names it).

    Raises:
        TypeError: ``agent`` is not an ``Agent``.
        SteeringError: ``"unsupported"``, the agent has an ``output_type``
            (the framework parses its own output).
    """

    __slots__ = ("_agent", "_config", "_hosting", "_loop", "_resume", "_run")

    def __init__(self, agent: Agent) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"Steering() takes a built Agent, got {shape(agent)}")
        if agent.config.output is not None:
            raise SteeringError(
                reason="unsupported",
                session_id="",
                detail="an agent with an output_type cannot be steered: the "
                "framework parses its own output",
            )
        self._agent = agent
        self._config = agent.config
        self._loop = agent._loop
        self._hosting = agent._hosting
        self._run = agent._run
        self._resume = agent._resume

    @property
    def agent(self) -> Agent:
        """The agent whose sessions this steers."""
        return self._agent

    def on_store(self, store: EventStore) -> Steering:
        """The same agent (configuration, rules, tools, watchers) recording
        into ``store``: what a second process that decides this agent's asks
        builds on the store it opened (``helmlog approve --agent ...``)."""
        if store is self._config.store:
            return self
        if not isinstance(store, EventStore):
            raise TypeError(f"on_store() takes an EventStore, got {shape(store)}")
        config = dataclasses.replace(self._config, store=store)
        return Steering(Agent(config, self._agent._listeners))

    async def open_turn(
        self,
        message: str,
        *,
        session_id: str | None = None,
        identity: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> SteeredTurn:
        """Admit ``message`` and open a turn, as ``Agent.run`` does (G33–G38).

        The input walk's rows are filed, then ``agent.turn_start`` and the
        user's message. ``session_id`` names a stored session (its next
        turn) or a new one; ``None`` mints one.

        Raises:
            TypeError: ``message`` is not a str, ``identity`` not a mapping.
            MessageDeniedError: the input chain refused the message (recorded
                as the native loop records it).
            SteeringError: ``"turn-open"``, the session's last turn is open.
            NoConversationError: ``pending-question``, it waits on a person.
            RecoveryRequiredError: calls of its last turn have no result.
        """
        if not isinstance(message, str):
            raise TypeError(
                f"open_turn() takes the message as a str, got {shape(message)}"
            )
        if identity is not None and not isinstance(identity, Mapping):
            raise TypeError(
                f"open_turn(identity=...) takes a mapping, got {shape(identity)}"
            )
        run, hosting = self._run, self._hosting
        session, _, _, by_id = await run.session(message, None, session_id)
        async with hosting.operating(session):
            base_seq = await run.caught_up(session, None, by_id)
            if by_id and session.journal.folder.unfinished:
                raise SteeringError(
                    reason="turn-open",
                    session_id=session.session_id,
                    detail="its last turn is still open: re-attach to it with "
                    "steering.turn(session_id), or finish it first",
                )
            hosting.use(session)
            trace = resolve(
                traceparent, tracestate, NO_TRACE, self._config.new_traceparent
            )
            minted = given(traceparent, tracestate) is None
            admitted = await hosting.guard(
                session,
                self._opened(session, message, identity, base_seq, trace, minted),
            )
        return SteeredTurn(self, session.session_id, admitted)

    async def _opened(
        self,
        s: Session,
        message: str,
        identity: Mapping[str, Any] | None,
        base_seq: int,
        trace: tuple[str, str],
        minted: bool,
    ) -> str:
        admitted = await self._run.admit(
            s, message, identity, base_seq, None, trace, minted
        )
        pending = s.journal.flush_now()
        if pending is not None:
            await pending
        return admitted

    async def turn(self, session_id: str) -> SteeredTurn:
        """Re-attach to a session's open turn, activated from its stream
        (after an interrupt, a framework's state round trip, a restart).

        Raises:
            SteeringError: ``"no-open-turn"``, the store holds no such session
                or its last turn ended.
        """
        if not isinstance(session_id, str) or not session_id:
            raise TypeError(f"turn() takes a session id, got {shape(session_id)}")
        handle = SteeredTurn(self, session_id, "")
        async with handle.operating() as s:
            handle.admitted = s.journal.folder.original_input or ""
        return handle

    async def resume_tool(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        tool: Tool | None = None,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> Outcome:
        """Answer a paused call and run it on, as ``Agent.resume`` does — and
        stop at the call's outcome: the framework makes the next model call.

        ``Resume``'s checks come first (R9's bindings, G61's decision type),
        then ``pause.resume``, the asker's row, the walk on from the next
        link, ``tool`` (default: the agent's registered tool of the pause's
        name) and its result, recorded. Re-entrant: a pause already resolved
        (here or by a person in another process) returns the recorded
        outcome, or the call's next pause; nothing is appended again.

        Raises:
            CheckpointError: the checkpoint is refused (R9), before anything
                is appended.
            DecisionRequiredError: ``decision`` is not a ``CheckInDecision``
                for an ask or a check-in (G61), or ``None`` for ``ask_human``.
        """
        if tool is not None and not isinstance(tool, Tool):
            raise TypeError(f"resume_tool() takes a Tool, got {shape(tool)}")
        cp = Checkpoint.coerce(checkpoint)
        try:
            return await self._resume.answer(
                cp, decision, traceparent, tracestate, self._answered, tool
            )
        except CheckpointError as exc:
            if exc.reason != "replayed" or cp.tool_call_id is None:
                raise
        handle = SteeredTurn(self, cp.session_id, "")
        async with handle.operating(open_turn=False) as s:
            return await handle.settled(s, cp.tool_call_id, tool)

    async def _answered(self, r: Resumed) -> Outcome:
        """``Resume.answer``'s ``then`` for a steered turn: the call only."""
        return await self._hosting.guard(r.session, self._call(r), resumed=r.seq)

    async def _call(self, r: Resumed) -> Outcome:
        out = await self._resume.call(r)
        pending = r.session.journal.flush_now()
        if pending is not None:
            await pending
        return out


@dataclasses.dataclass(slots=True)
class SteeredTurn:
    """One session's open turn, as a framework drives it (``Steering``).

    Each method is one operation on the session: it catches up with the
    stream, runs under the session's lock and ``Hosting.guard`` (a raise is
    recorded once as ``error.fatal``, G91), and flushes what it recorded.

    Attributes:
        session_id: the session's id.
        admitted: the user's message as the input chain left it.
    """

    steering: Steering
    session_id: str
    admitted: str
    # The fold the last operation left (read only when the session is no
    # longer resident): a reference, not a copy made at every step.
    _folder: Folder | None = None

    @property
    def history(self) -> tuple[Message, ...]:
        """The committed messages (the fold's), as of the last operation."""
        session = self.steering._hosting.resident.get(self.session_id)
        if session is not None and not session.journal.broken:
            return tuple(session.journal.folder.history)
        return () if self._folder is None else tuple(self._folder.history)

    # -- the session, one operation at a time ------------------------------

    @contextlib.asynccontextmanager
    async def operating(self, *, open_turn: bool = True) -> AsyncIterator[Session]:
        """The session, caught up with its stream, under its lock.

        Raises:
            SteeringError: ``"no-open-turn"``, the store holds no such
                session, or (with ``open_turn``) its last turn is not open.
        """
        session = await self._enter(open_turn)
        try:
            yield session
        finally:
            self._leave(session)

    async def _enter(self, open_turn: bool = True) -> Session:
        """``operating``'s start (each step pairs it with ``_leave`` itself:
        one step, one lock, one catch-up, no context-manager layers)."""
        hosting = self.steering._hosting
        # A resident session is the one ``activate`` returns: no coroutine
        # for the hot path, where it always is (issue 27's figure).
        session = hosting.resident.get(self.session_id)
        if session is None:
            session = await hosting.activate(self.session_id)
        if session is None:
            raise SteeringError(
                reason="no-open-turn",
                session_id=self.session_id,
                detail="the store holds no such session: open a turn with "
                "steering.open_turn(message, session_id=...)",
            )
        await hosting.hold(session)
        try:
            j = session.journal
            if not _still_head(j):
                await j.activate()
            f = j.folder
            if open_turn and not (f.in_turn and not f.failed):
                raise SteeringError(
                    reason="no-open-turn",
                    session_id=self.session_id,
                    detail="it has no open turn (it ended, or failed): open "
                    "one with steering.open_turn(message, session_id=...)",
                )
            hosting.use(session)
        except BaseException:
            self._leave(session)
            raise
        return session

    def _leave(self, session: Session) -> None:
        """``operating``'s end: the fold kept for ``history``, the lock freed."""
        self._folder = session.journal.folder
        self.steering._hosting.unhold(session)

    # ``Hosting.guard`` taken apart for the hot steps (issue 27's figure): a
    # step runs its body inline, hands a raise to ``guard`` (recorded once,
    # G91, re-raised) and settles as ``guard`` does (``Hosting.settled``); no
    # coroutine for the guard and none for the body on the path where nothing
    # raises.

    async def _failed(self, s: Session, exc: BaseException) -> NoReturn:
        """``Hosting.guard``'s raise path for a step's body that raised ``exc``."""
        await self.steering._hosting.guard(s, _raising(exc))
        raise AssertionError("unreachable: guard re-raises")  # pragma: no cover

    # -- the model ----------------------------------------------------------

    async def model_request(self) -> tuple[Message, ...]:
        """The window moment, then ``stream.llm_start``: the messages the
        model should see (the window's plan, or the history unchanged).

        Raises:
            SteeringError: calls of the last reply have no recorded outcome
                (``"unknown-call"``), or a call waits on a person.
            TurnLimitError: the turn reached ``max_model_calls`` (recorded).
        """
        s = await self._enter()
        try:
            self._nothing_outstanding(s, "model_request")
            j = s.journal
            try:
                f = j.folder
                TurnBudget(self.steering._config).before_model_call(f)
                messages = self.steering._loop.model_started(s, f.iteration + 1)
                if (pending := j.flush_now()) is not None:
                    await pending
            except BaseException as exc:  # noqa: BLE001 - guard records it, re-raises (G91)
                await self._failed(s, exc)
            if (settling := self.steering._hosting.settled(s)) is not None:
                await settling
            return messages
        finally:
            self._leave(s)

    async def model_reply(
        self,
        content: str,
        tool_calls: Sequence[ToolCallRequest] = (),
        *,
        usage: Mapping[str, int] | None = None,
        model: str = "",
        stop_reason: str | None = None,
        duration_ms: int = 0,
    ) -> None:
        """Record the model's reply: ``stream.llm_end``, and the assistant's
        message with its calls when it proposed any (G41: a governed output's
        draft is withheld from the record, as the native loop withholds it).

        Raises:
            TypeError: ``content`` is not a str, a call not a ``ToolCallRequest``.
        """
        reply = Reply(content, tool_calls, usage, stop_reason, model or None)
        if not isinstance(duration_ms, int):
            raise TypeError(
                f"model_reply(duration_ms=...) takes an int, got {shape(duration_ms)}"
            )
        s = await self._enter()
        try:
            j = s.journal
            try:
                withheld = self.steering._config.output_governed
                record_reply(j, reply, j.folder.iteration, duration_ms, withheld)
                if (pending := j.flush_now()) is not None:
                    await pending
            except BaseException as exc:  # noqa: BLE001 - guard records it, re-raises (G91)
                await self._failed(s, exc)
            if (settling := self.steering._hosting.settled(s)) is not None:
                await settling
        finally:
            self._leave(s)

    # -- tool calls ---------------------------------------------------------

    async def call_tool(self, call: ToolCallRequest, tool: Tool | None) -> Outcome:
        """The one pipeline (``IN_AGENT``) around ``tool``: ``stream.tool_start``,
        the gate, the before-tool walk, validation, check-in, dispatch,
        ``execute`` (the framework's own tool call), the after-tool walk; the
        result, refusal or pause recorded as the native loop records it.

        ``tool`` ``None``: the agent's registered tool of the call's name, or
        the unknown tool's refusal (G53). Re-entrant per call id: a call the
        record already holds appends nothing; its recorded outcome (or its
        pending pause) is returned. A call dispatched without a result (its
        process stopped) is recovered as R7 says: an idempotent tool runs
        again, any other is recorded as ``tool.outcome_unknown``.

        Raises:
            SteeringError: the call is not one the model proposed in this
                turn (``"unknown-call"``), or another call waits on a person.
        """
        tool = self._checked(call, tool)
        s = await self._enter()
        try:
            proposed, answered = self._proposed(s.journal.folder, call)
            known = await self._known(s, proposed, tool, answered)
            if known is not None:
                return known
            try:
                outcome = await self._call(s, proposed, tool)
            except BaseException as exc:  # noqa: BLE001 - guard records it, re-raises (G91)
                await self._failed(s, exc)
            if (settling := self.steering._hosting.settled(s)) is not None:
                await settling
            return outcome
        finally:
            self._leave(s)

    async def _call(
        self, s: Session, call: ToolCallRequest, tool: Tool | None
    ) -> Outcome:
        loop = self.steering._loop
        j = s.journal
        f = j.folder
        TurnBudget(self.steering._config).before_tool_call(f)
        j.add(
            ToolStarted(
                tool_name=call.name,
                tool_call_id=call.id,
                iteration=f.iteration,
                args=call.args,
            )
        )
        found = loop.pipeline.lookup(call.name) if tool is None else tool
        if isinstance(found, Refused):
            loop.refuse(s, call, found.text)
            pending = j.flush_now()
            if pending is not None:
                await pending
            return found
        site = loop.site(s, call, found, f.iteration)
        outcome = await loop.pipeline.run(found, site, Entry.fresh(call.args), s)
        return await self._concluded(s, call, site, outcome)

    async def before_tool(
        self, call: ToolCallRequest, tool: Tool | None
    ) -> Admitted | Outcome:
        """``call_tool``'s steps up to and including dispatch, for a framework
        that runs the tool itself between two hooks: ``Admitted(args)`` (the
        arguments the tool must run with; ``tool.dispatched`` is recorded),
        a ``Refused``, or an ``AskPause``. ``after_tool`` records the rest;
        the rows equal ``call_tool``'s. Re-entrant as ``call_tool`` is: a
        call with a recorded outcome returns it (a ``Ran``: do not run it).
        """
        tool = self._checked(call, tool)
        s = await self._enter()
        try:
            proposed, answered = self._proposed(s.journal.folder, call)
            known = await self._known(s, proposed, tool, answered)
            if known is not None:
                return known
            try:
                admitted = await self._admit(s, proposed, tool)
            except BaseException as exc:  # noqa: BLE001 - guard records it, re-raises (G91)
                await self._failed(s, exc)
            if (settling := self.steering._hosting.settled(s)) is not None:
                await settling
            return admitted
        finally:
            self._leave(s)

    async def _admit(
        self, s: Session, call: ToolCallRequest, tool: Tool | None
    ) -> Admitted | Outcome:
        loop = self.steering._loop
        j = s.journal
        f = j.folder
        TurnBudget(self.steering._config).before_tool_call(f)
        j.add(
            ToolStarted(
                tool_name=call.name,
                tool_call_id=call.id,
                iteration=f.iteration,
                args=call.args,
            )
        )
        found = loop.pipeline.lookup(call.name) if tool is None else tool
        if isinstance(found, Refused):
            loop.refuse(s, call, found.text)
            pending = j.flush_now()
            if pending is not None:
                await pending
            return found
        site = loop.site(s, call, found, f.iteration)
        admitted = await loop.pipeline.admit(found, site, Entry.fresh(call.args), s)
        if isinstance(admitted, Admitted):
            # ``tool.dispatched`` is flushed; the credentials stay here (G57).
            return Admitted(admitted.args)
        return await self._concluded(s, call, site, admitted)

    async def after_tool(
        self,
        call: ToolCallRequest,
        tool: Tool | None,
        result: Any,
        *,
        error: bool = False,
        duration_ms: int = 0,
    ) -> Ran | Refused:
        """The after-tool walk over the result of a call ``before_tool``
        admitted, and the result recorded (``stream.tool_end``, the tool's
        message). Re-entrant: a call already recorded returns its outcome.

        Raises:
            SteeringError: ``"not-admitted"``, ``before_tool`` did not admit
                this call (it was refused, or it waits on a person).
        """
        tool = self._checked(call, tool)
        if not isinstance(error, bool):
            raise TypeError(f"after_tool(error=...) takes a bool, got {shape(error)}")
        s = await self._enter()
        try:
            f = s.journal.folder
            proposed, answered = self._proposed(f, call)
            if call.id not in f.dispatched:
                known = await self._known(s, call, tool, answered)
                if known is not None and not isinstance(known, AskPause):
                    return known
                raise SteeringError(
                    reason="not-admitted",
                    session_id=self.session_id,
                    tool_call_id=call.id,
                    detail=f"call '{call.id}' was not admitted: before_tool "
                    "first, then the tool, then after_tool",
                )
            try:
                ran = await self._after(s, proposed, tool, result, error, duration_ms)
            except BaseException as exc:  # noqa: BLE001 - guard records it, re-raises (G91)
                await self._failed(s, exc)
            if (settling := self.steering._hosting.settled(s)) is not None:
                await settling
            return ran
        finally:
            self._leave(s)

    async def _after(
        self,
        s: Session,
        call: ToolCallRequest,
        tool: Tool | None,
        result: Any,
        error: bool,
        duration_ms: int,
    ) -> Ran:
        loop = self.steering._loop
        f = s.journal.folder
        found = loop.pipeline.lookup(call.name) if tool is None else tool
        assert not isinstance(found, Refused)  # it was admitted, so it was found
        args = f.dispatched[call.id].args
        site = loop.site(s, call, found, f.iteration)
        ran = await loop.pipeline.after(
            site, args, result, error, max(0, duration_ms), s
        )
        loop.record_outcome(s, call, ran)
        pending = s.journal.flush_now()
        if pending is not None:
            await pending
        return ran

    async def resume_tool(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        tool: Tool | None = None,
    ) -> Outcome:
        """``Steering.resume_tool`` for a pause of this turn's session."""
        cp = Checkpoint.coerce(checkpoint)
        if cp.session_id != self.session_id:
            raise CheckpointError(
                "tampered",
                f"the checkpoint is of session '{cp.session_id}', not of "
                f"'{self.session_id}'",
            )
        return await self.steering.resume_tool(cp, decision, tool)

    # -- the answer -----------------------------------------------------------

    async def finish(self, draft: str) -> str:
        """The output walk, the assistant's answer committed, ``agent.turn_end``.

        Raises:
            TypeError: ``draft`` is not a str.
            MessageDeniedError: the output chain refused it (recorded).
            SteeringError: a call has no recorded outcome, or waits on a person.
        """
        if not isinstance(draft, str):
            raise TypeError(f"finish() takes the answer as a str, got {shape(draft)}")
        s = await self._enter()
        try:
            self._nothing_outstanding(s, "finish")
            return await self.steering._hosting.guard(s, self._finish(s, draft))
        finally:
            self._leave(s)

    async def _finish(self, s: Session, draft: str) -> str:
        answer = await self.steering._loop.finish(s, draft, s.journal.folder.iteration)
        assert answer is not None  # no output_type: Steering refused one
        return answer

    async def fail(self, exc: BaseException) -> None:
        """Record the turn's failure as the native loop does (``error.fatal``,
        G66, G91): the framework's run raised. A turn no longer open records
        nothing more (it already ended, or failed)."""
        if not isinstance(exc, BaseException):
            raise TypeError(f"fail() takes the exception, got {shape(exc)}")
        hosting = self.steering._hosting
        async with self.operating(open_turn=False) as s:
            f = s.journal.folder
            if not f.in_turn or f.failed:
                return
            await self.steering._loop.fail(s, exc)
            await hosting.after(s)

    # -- what the record already holds of a call ------------------------------

    def _checked(self, call: Any, tool: Any) -> Tool | None:
        if not isinstance(call, ToolCallRequest):
            raise TypeError(f"takes a ToolCallRequest, got {shape(call)}")
        if tool is None:
            return None
        if not isinstance(tool, Tool):
            raise TypeError(f"takes a helmlog Tool (or None), got {shape(tool)}")
        if tool.name != call.name:
            raise SteeringError(
                reason="unknown-call",
                session_id=self.session_id,
                tool_call_id=call.id,
                detail=f"call '{call.id}' is to '{call.name}', not to the "
                f"tool given, '{tool.name}'",
            )
        return tool

    def _proposed(
        self, f: Folder, call: ToolCallRequest
    ) -> tuple[ToolCallRequest, bool]:
        """The call as the model's reply recorded it (its arguments are the
        record's, whatever the framework re-parsed), and whether the turn's
        history answers it after that reply (one scan: ``find_call`` and
        ``_answered`` in one, on every step's hot path)."""
        call_id = call.id
        answered = False
        proposed: ToolCallRequest | None = None
        for msg in reversed(f.history):
            if msg.role == "tool":
                if msg.tool_call_id == call_id:
                    answered = True
            elif msg.role == "assistant":
                for c in msg.tool_calls:
                    if c.id == call_id:
                        proposed = c
                        break
                if proposed is not None:
                    break
        if proposed is None or proposed.name != call.name:
            raise SteeringError(
                reason="unknown-call",
                session_id=self.session_id,
                tool_call_id=call_id,
                detail=f"call '{call_id}' to '{call.name}' is not one the model "
                "proposed in this turn: record the reply with model_reply first",
            )
        return proposed, answered

    def _nothing_outstanding(self, s: Session, step: str) -> None:
        f = s.journal.folder
        if f.pending is not None:
            raise SteeringError(
                reason="pending-question",
                session_id=self.session_id,
                tool_call_id=f.pending.tool_call_id,
                detail=f"call '{f.pending.tool_call_id}' waits on a person: "
                "resume it (resume_tool) before " + step,
            )
        calls = outstanding_calls(f.history)
        if calls:
            listed = ", ".join(c.id for c in calls)
            raise SteeringError(
                reason="unknown-call",
                session_id=self.session_id,
                tool_call_id=calls[0].id,
                detail=f"calls {listed} of the last reply have no recorded "
                f"outcome: run them through call_tool before {step}",
            )

    async def _known(
        self, s: Session, call: ToolCallRequest, tool: Tool | None, answered: bool
    ) -> Outcome | None:
        """What the record already holds of ``call`` (as proposed), else
        ``None`` (fresh); ``answered``: the history holds its tool message.

        Raises:
            SteeringError: another call waits on a person.
        """
        f = s.journal.folder
        pending = f.pending
        if pending is not None and pending.tool_call_id == call.id:
            return self._pause_of(s, pending.tool_call_id)
        if answered:
            return await self._recorded(s, call.id)
        if pending is not None:
            raise SteeringError(
                reason="pending-question",
                session_id=self.session_id,
                tool_call_id=pending.tool_call_id,
                detail=f"call '{pending.tool_call_id}' waits on a person: "
                f"resume it before call '{call.id}'",
            )
        if call.id in f.dispatched:
            # R7: dispatched, no result recorded: never silently run again.
            return await self.steering._hosting.guard(s, self._recover(s, call, tool))
        return None

    async def settled(self, s: Session, call_id: str, tool: Tool | None) -> Outcome:
        """The outcome of a call whose pause was resolved elsewhere."""
        f = s.journal.folder
        pending = f.pending
        if pending is not None and pending.tool_call_id == call_id:
            return self._pause_of(s, call_id)
        if _answered(f, call_id):
            return await self._recorded(s, call_id)
        call = find_call(f.history, call_id)
        if call is not None and call_id in f.dispatched:
            return await self.steering._hosting.guard(s, self._recover(s, call, tool))
        raise CheckpointError(
            "replayed", f"the pause of call {call_id} was already resolved"
        )

    async def _recover(
        self, s: Session, call: ToolCallRequest, tool: Tool | None
    ) -> Outcome:
        proposed = find_call(s.journal.folder.history, call.id) or call
        pause = await self.steering._loop.recover_call(s, proposed, tool)
        pending = s.journal.flush_now()
        if pending is not None:
            await pending
        if pause is not None:
            return pause
        return await self._recorded(s, call.id)

    async def _concluded(
        self,
        s: Session,
        call: ToolCallRequest,
        site: CallSite,
        outcome: Ran | Refused | Paused,
    ) -> Outcome:
        loop = self.steering._loop
        if isinstance(outcome, Paused):
            return await loop.paused(s, call, site, outcome)
        loop.record_outcome(s, call, outcome)
        pending = s.journal.flush_now()
        if pending is not None:
            await pending
        return outcome

    def _pause_of(self, s: Session, call_id: str) -> AskPause:
        """The pending pause of ``call_id`` as ``call_tool`` returned it."""
        f = s.journal.folder
        p = f.pending
        assert p is not None and p.tool_call_id == call_id
        checkpoint = sign_checkpoint(
            f.pause_checkpoint, p, self.steering._config.store.chain_key
        )
        if checkpoint is None:  # pragma: no cover - a pending pause has one
            raise CheckpointError("tampered", "the recorded pause folded to nothing")
        return AskPause(
            kind=pause_kind(p.kind),
            ask=MiddlewareAsk(p.question, p.detail, p.middleware, p.component_id),
            tool_name=p.tool_name,
            tool_call_id=p.tool_call_id,
            checkpoint=checkpoint,
        )

    async def _recorded(self, s: Session, call_id: str) -> Ran | Refused:
        """The recorded outcome of a call this turn answered, read back from
        the stream (values as stored: under a redaction policy, redacted)."""
        f = s.journal.folder
        text = next(
            m.content
            for m in reversed(f.history)
            if m.role == "tool" and m.tool_call_id == call_id
        )
        store = self.steering._config.store
        events = [r.decode() for r in await store.read(self.session_id, 0)]
        ended: ToolEnded | None = None
        dispatched = unknown = after_denied = False
        step = Step.GATE
        for ev in reversed(events):
            if isinstance(ev, TurnStarted | SessionImported):
                break
            if isinstance(ev, ToolEnded) and ev.tool_call_id == call_id:
                ended = ended or ev
            elif isinstance(ev, ToolDispatched) and ev.tool_call_id == call_id:
                dispatched = True
            elif isinstance(ev, ToolOutcomeUnknown) and ev.tool_call_id == call_id:
                unknown = True
            elif isinstance(ev, PauseResumed) and ev.tool_call_id == call_id:
                if ev.approved is False:
                    step = Step.CHECK_IN if ev.kind == "check-in" else Step.BEFORE_TOOL
            elif isinstance(ev, DecisionFiled) and ev.row.tool_call_id == call_id:
                if ev.row.outcome == "deny" and ev.row.moment == "before-tool":
                    step = Step.BEFORE_TOOL
                elif ev.row.outcome == "deny" and ev.row.moment == "after-tool":
                    after_denied = True
        if unknown:
            return Ran(None, True, text)
        if dispatched and ended is not None:
            return Ran(ended.result, ended.error, text, after_denied, ended.duration_ms)
        if ended is not None and ended.error:
            return Ran(ended.result, True, text)
        return Refused(step, text)


def _still_head(j: Journal) -> bool:
    """Whether ``j`` is caught up with its stream before a step without a
    read (else ``j.activate()`` reads, verifies and folds what other writers
    appended since this process's last step).

    On the memory store the read is skipped when nothing was appended since:
    its head is the stream's last record itself (every writer of it is in
    this process), so an unchanged ``(seq, hash)`` is an O(1) "still the
    head", asked without a coroutine (``head_now``). Any other store reads: a
    head there may be its own cached guess (the Redis appender's is), blind
    to the process that decided an ask, and an exact head costs the same
    round trip as the read.
    """
    store = j.store
    return bool(
        type(store) is MemoryEventStore
        and j.flushed_seq
        and not j.broken
        and not j.pending_count
        and store.head_now(j.session_id) == (j.flushed_seq, j.last_hash)
    )


async def _raising(exc: BaseException) -> NoReturn:
    """A body for ``Hosting.guard`` that raises what a step's inline body
    raised, so ``guard`` records it as it records any body's raise."""
    raise exc


def _answered(f: Folder, call_id: str) -> bool:
    """Whether the turn's history holds the tool message of ``call_id``
    after the reply that proposed it."""
    for msg in reversed(f.history):
        if msg.role == "tool" and msg.tool_call_id == call_id:
            return True
        if msg.role == "assistant" and any(c.id == call_id for c in msg.tool_calls):
            return False
    return False
