"""The governed loop of one session: admit, call the model, dispatch, answer.

Pattern: a driver that always continues from the recorded state: calls of the
         last assistant turn without a tool message are dispatched (through
         the one pipeline, ``IN_AGENT``), then the model is called, until an
         answer or a pause; a run, a resume and a failover share ``drive``.
Role:    runtime layer; ``_run.py``, ``pause/_resume.py``, ``_recovery.py`` hand
         their turns here. Records through the session's journal.

Laws: G11, G18, G25, G33–G35, G39–G43, G51 (steps 1, 11, 12), G52, G59–G66,
G80, G91, G92, R5, R7 (``recover_call``), R20, R23.
Why outstanding calls are re-derived from history, not kept in an iterator:
a paused or crashed run continues on another host from its stream alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from helmlog.events import (
    LlmEnded,
    LlmStarted,
    Message,
    MessageCommitted,
    OutputRejected,
    ToolCallRequest,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnEnded,
)

from ._chain import CallSite, walk_messages
from ._config import AgentConfig
from ._errors import OutputValidationError
from ._journal import Journal
from ._limits import TurnBudget
from ._output import retry_prompt
from ._pipeline import ToolPipeline
from ._session import MessageRefused, Session, outstanding_calls, record_failure
from ._steps import IN_AGENT, Entry, Outcome, Paused, Ran, Refused, Step
from ._tools import Tool, deferred_cancels
from ._trace import resolve
from .pause._pause import AskPause
from .pause._record import record_pause
from .providers import ProviderRequest, Reply
from .providers._base import name_of

_DEFERRED = deferred_cancels()

OUTCOME_UNKNOWN = (
    "The outcome of tool '{name}' (call {id}) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)


class Loop:
    """Runs sessions for one agent configuration."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.pipeline = ToolPipeline(
            config.tools,
            config.tool_links,
            IN_AGENT,
            permissions=config.permissions,
            credentials=config.credentials,
            clock=config.clock,
        )

    # -- the iteration loop ------------------------------------------------

    async def drive(self, s: Session) -> str | AskPause:
        """Continue a session until it answers or pauses (within R23's limits):
        dispatch what is outstanding, call the model, again."""
        cfg = self.config
        j = s.journal
        f = j.folder
        budget = TurnBudget(cfg)
        # ``budget.deferring()``, spelled out: no manager object per turn;
        # the loop in this one coroutine (no second frame per turn).
        token = _DEFERRED.set(budget.deferred)
        try:
            while True:
                # ``dispatch_outstanding``, entered only when a call is: no
                # coroutine for a step that has none (bench/turns.py).
                calls = outstanding_calls(f.history)
                if calls:
                    pause = await self.dispatch_outstanding(s, budget, calls)
                    if pause is not None:
                        return pause
                iteration = f.iteration + 1
                budget.before_model_call(f)
                # A step boundary: a cancellation (``asyncio.wait_for``, a stream
                # closed early) lands here even when every tool is sync and the
                # store never waits; the loop yields when it has run a while.
                if budget.due_yield():
                    await asyncio.sleep(0)
                messages = self.model_started(s, iteration)
                # ``flush``, without a coroutine where nothing in it waits.
                pending = j.flush_now()
                if pending is not None:
                    await pending
                request = ProviderRequest(  # by position: no keywords to match
                    cfg.model,
                    cfg.system,
                    messages,
                    cfg.tool_specs,
                    None if cfg.output is None else cfg.output.spec,
                )
                started = cfg.clock()
                s.in_provider = True
                reply = await cfg.provider.call(
                    request, None if cfg.output_governed else j.token
                )
                s.in_provider = False
                record_reply(
                    j, reply, iteration, cfg.clock() - started, cfg.output_governed
                )
                if reply.tool_calls:
                    continue
                answer = await self.finish(s, reply.content, iteration)
                if answer is not None:
                    return answer
        finally:
            _DEFERRED.reset(token)

    def model_started(self, s: Session, iteration: int) -> tuple[Message, ...]:
        """The window moment, then ``stream.llm_start``: what the model is sent.

        Shared with a steered turn (``_steering.py``), whose framework calls
        the model; the caller flushes.
        """
        cfg = self.config
        j = s.journal
        messages = tuple(j.folder.history)
        if cfg.window is not None:
            plan = cfg.window.plan(messages, iteration=iteration)
            if plan.record is not None:
                j.add(plan.record)
            messages = plan.messages
        j.add(
            LlmStarted(
                iteration=iteration,
                model=cfg.model,
                provider=name_of(cfg.provider),
                output_type="" if cfg.output is None else "json",
                # G41: a governed run's drafts are held, and its record is
                # the same whichever way the provider answers.
                stream=not cfg.output_governed
                and getattr(cfg.provider, "stream", False) is True,
            )
        )
        return messages

    async def finish(self, s: Session, draft: str, iteration: int) -> str | None:
        """Output admission, then commit and release the answer (G39–G43).

        With an ``output_type`` the answer the rules accepted is parsed (G92);
        one that fails is recorded (``output.rejected``) and goes back to the
        model with its error: ``None`` tells the loop to call it again.
        """
        cfg = self.config
        j = s.journal
        answer = draft
        if cfg.message_links:
            verdict = await walk_messages(
                cfg.message_links,
                "output",
                draft,
                history=tuple(j.folder.history),
                identity=self.identity(s),
                iteration=iteration,
            )
            j.file(verdict.rows)
            if verdict.denied:
                raise MessageRefused.of(verdict, "output")
            answer = verdict.content
        if cfg.output is not None and not self.typed(s, answer, iteration):
            return None
        j.add(MessageCommitted(message=Message(role="assistant", content=answer)))
        if cfg.output_governed:
            await j.flush()
            if answer:
                j.token(answer)
        j.add(TurnEnded(turn=j.folder.turn, final_content=answer))
        pending = j.flush_now()
        if pending is not None:
            await pending
        return answer

    def typed(self, s: Session, answer: str, iteration: int) -> bool:
        """Parse an accepted answer to the output type (G92): ``True`` with the
        value kept for the call's ``TurnResult``; ``False`` once the rejection
        and the retry prompt are recorded. The draft stays held: no event
        carries it (G41, G43); the retries spent are the fold's, so a turn
        resumed elsewhere counts on.

        Raises:
            OutputValidationError: the retries (``max_output_retries``) ran out.
        """
        output = self.config.output
        assert output is not None
        value, error = output.check(answer)
        if error is None:
            s.output = value
            return True
        j = s.journal
        attempt = j.folder.output_rejections + 1
        retrying = attempt <= self.config.max_output_retries
        j.add(
            OutputRejected(
                iteration=iteration, attempt=attempt, error=error, retrying=retrying
            )
        )
        if not retrying:
            raise OutputValidationError(
                output_type=output.name, attempts=attempt, error=error
            )
        prompt = retry_prompt(output, error)
        j.add(MessageCommitted(message=Message(role="user", content=prompt)))
        return False

    def identity(self, s: Session) -> Any:
        ident = s.journal.folder.identity
        return ident if ident is not None else {"session_id": s.session_id}

    # -- dispatch ----------------------------------------------------------

    def site(
        self, s: Session, call: ToolCallRequest, tool: Tool, iteration: int
    ) -> CallSite:
        """What every context of this call shares, from the session's record."""
        f = s.journal.folder
        return CallSite(
            call.name,
            tool.source,
            call.id,
            iteration,
            tuple(f.history),
            self.identity(s),
            f.approvals,
        )

    async def dispatch_outstanding(
        self,
        s: Session,
        budget: TurnBudget | None = None,
        calls: list[ToolCallRequest] | None = None,
    ) -> AskPause | None:
        """Dispatch every call of the last assistant turn lacking a tool message
        (``budget`` checked before each call not yet started, R23); ``calls``
        when the caller has just read them (``outstanding_calls``)."""
        f = s.journal.folder
        for call in outstanding_calls(f.history) if calls is None else calls:
            if call.id in f.dispatched:
                pause = await self.recover_call(s, call)
            else:
                if budget is not None:
                    budget.before_tool_call(f)
                pause = await self.dispatch(s, call, f.iteration)
            if pause is not None:
                return pause
        return None

    async def dispatch(
        self, s: Session, call: ToolCallRequest, iteration: int
    ) -> AskPause | None:
        """One proposed call: ``stream.tool_start``, then the pipeline (G51)."""
        s.journal.add(
            ToolStarted(
                tool_name=call.name,
                tool_call_id=call.id,
                iteration=iteration,
                args=call.args,
            )
        )
        tool = self.pipeline.lookup(call.name)
        if isinstance(tool, Refused):
            self.refuse(s, call, tool.text)
            return None
        site = self.site(s, call, tool, iteration)
        outcome = await self.pipeline.run(tool, site, Entry.fresh(call.args), s)
        # ``conclude`` and ``record_outcome``, inlined: one coroutine and one
        # call less per call (bench/turns.py).
        if isinstance(outcome, Paused):
            return await self.paused(s, call, site, outcome)
        if isinstance(outcome, Refused):
            self.refuse(s, call, outcome.text)
        else:
            self.record_result(
                s,
                call,
                outcome.result,
                outcome.error,
                outcome.duration_ms,
                outcome.text,
            )
        return None

    async def conclude(
        self, s: Session, call: ToolCallRequest, site: CallSite, outcome: Outcome
    ) -> AskPause | None:
        """Record a call's outcome: its result, its refusal, or its pause."""
        if isinstance(outcome, Paused):
            return await self.paused(s, call, site, outcome)
        self.record_outcome(s, call, outcome)
        return None

    def record_outcome(
        self, s: Session, call: ToolCallRequest, outcome: Ran | Refused
    ) -> None:
        """What the model reads of a call that ran or was refused (G51, 11–12)."""
        if isinstance(outcome, Refused):
            self.refuse(s, call, outcome.text)
            return
        self.record_result(
            s, call, outcome.result, outcome.error, outcome.duration_ms, outcome.text
        )

    async def paused(
        self, s: Session, call: ToolCallRequest, site: CallSite, outcome: Paused
    ) -> AskPause:
        """Record a call's pause (G59) and hand back its checkpoint."""
        return await record_pause(
            self.config,
            s,
            outcome.kind,
            call,
            site,
            outcome.args,
            outcome.ask,
            link_index=outcome.link_index,
        )

    def record_result(
        self,
        s: Session,
        call: ToolCallRequest,
        result: Any,
        error: bool,
        duration_ms: int,
        content: str,
    ) -> None:
        j = s.journal
        j.add(
            ToolEnded(
                tool_name=call.name,
                tool_call_id=call.id,
                result=result,
                error=error,
                duration_ms=duration_ms,
            )
        )
        j.add(
            MessageCommitted(
                message=Message(
                    role="tool",
                    content=content,
                    tool_call_id=call.id,
                    tool_name=call.name,
                )
            )
        )

    def refuse(self, s: Session, call: ToolCallRequest, text: str) -> None:
        """A call that did not execute: the model reads ``text`` (G51)."""
        self.record_result(s, call, text, False, 0, text)

    async def recover_call(
        self, s: Session, call: ToolCallRequest, given: Tool | None = None
    ) -> AskPause | None:
        """One call dispatched on a host that stopped before its result (R7).

        Only an idempotent tool runs again, entering the pipeline at dispatch
        with the recorded arguments; any other call (or one whose recorded
        arguments no longer validate) is recorded as ``tool.outcome_unknown``.
        ``Agent.recover`` is the session-level operation that gets here; a
        steered turn's re-entered call too, with its framework's tool
        (``given``).
        """
        j = s.journal
        record = j.folder.dispatched[call.id]
        tool = self.config.tools.get(call.name) if given is None else given
        if tool is not None and tool.idempotent:
            site = self.site(s, call, tool, j.folder.iteration)
            entry = Entry.redispatch(record.args, record.attempt + 1)
            outcome = await self.pipeline.run(tool, site, entry, s)
            if not (isinstance(outcome, Refused) and outcome.step is Step.VALIDATE):
                return await self.conclude(s, call, site, outcome)
        text = OUTCOME_UNKNOWN.format(name=call.name, id=call.id)
        traceparent, tracestate = resolve(
            None, None, j.folder.trace, self.config.new_traceparent
        )
        j.add(
            ToolOutcomeUnknown(
                tool_name=call.name,
                tool_call_id=call.id,
                traceparent=traceparent,
                tracestate=tracestate,
            )
        )
        j.add(
            MessageCommitted(
                message=Message(
                    role="tool", content=text, tool_call_id=call.id, tool_name=call.name
                )
            )
        )
        return None

    # -- failure -----------------------------------------------------------

    async def fail(
        self,
        s: Session,
        exc: BaseException,
        *,
        phase: str | None = None,
        middleware: str | None = None,
    ) -> None:
        """Record a run that ends by raising (G66, G91); never raises.

        ``record_failure`` (``_session.py``) holds the rules, R20's included.
        """
        await record_failure(s, exc, phase=phase, middleware=middleware)


def record_reply(
    j: Journal, reply: Reply, iteration: int, duration_ms: int, withheld: bool
) -> None:
    """Record a model's reply: ``stream.llm_end`` (its draft withheld where the
    output is governed, G41), and the assistant's message with its calls when
    it proposed any. One place for both hosts of a turn: the native loop and
    a framework's steered step file the same events (issue 27 item 5)."""
    j.add(
        LlmEnded(
            iteration=iteration,
            content="" if withheld else reply.content,
            content_withheld=withheld,
            tool_call_count=len(reply.tool_calls),
            usage=dict(reply.usage),
            stop_reason=reply.stop_reason,
            duration_ms=max(0, duration_ms),
            model=reply.model or "",
        )
    )
    if reply.tool_calls:
        j.add(
            MessageCommitted(
                message=Message(
                    role="assistant",
                    content=reply.content,
                    tool_calls=reply.tool_calls,
                )
            )
        )
