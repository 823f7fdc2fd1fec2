"""The governed loop of one session: admit, call the model, dispatch, answer.

Pattern: a driver that always continues from the recorded state: whatever
         calls of the last assistant turn lack a tool message are dispatched,
         then the model is called, until an answer or a pause. A fresh run, a
         resume and a failover activation all enter the same ``drive``.
Role:    runtime layer; ``Agent`` (the face) delegates every run here.
Emits:   through the session's journal: ``agent.turn_start``/``turn_end``,
         ``message.committed``, ``stream.*``, ``decision.filed`` (whose
         ``middleware.decision`` fact listeners get), ``tool.dispatched``,
         ``pause.*``, ``window.compacted``, ``error.fatal``.

Laws: G11 (no links, no walk, no row), G18 (after-tool only for a call that
ran), G25, G33–G35 (input runs first; a refusal reaches no model), G39–G43
(output admission and holding), G51 (the fixed dispatch order), G52
(batches), G53 (unknown tools first), G54 (the permission gate), G55–G57,
G59–G66 (pause, resume, one question per call, no dropped call), G69–G70
(``ask_human``), G80 (window records), G91 (one ``error.fatal``), R5, R7
(a recovery's ``tool.outcome_unknown`` carries the turn's trace context, so
the recovering host's spans join the turn's trace: issue 8 item 8),
R20 (a run that lost a sequence conflict records nothing more, not even its
failure).

Why the loop re-derives outstanding calls from history instead of keeping an
iterator: a paused or crashed run continues on another host from its stream
alone; an iterator would be state that no record holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from typing import Any

from helmlog.events import (
    CheckpointError,
    FatalError,
    LedgerAppendError,
    LlmEnded,
    LlmStarted,
    Message,
    MessageCommitted,
    MessageDeniedError,
    PausedCall,
    PauseRequested,
    ProviderError,
    StoreError,
    ToolCallRequest,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnEnded,
    digest,
    pause_content_digest,
    sign_checkpoint,
)

from ._chain import (
    CallSite,
    MessageVerdict,
    walk_messages,
    walk_tool_calls,
    walk_tool_results,
)
from ._config import AgentConfig
from ._context import ToolCallContext, clone
from ._journal import Journal
from ._pause import AskHumanSignal, AskPause, MiddlewareAsk
from ._tools import (
    Tool,
    call_execute,
    invalid_arguments_text,
    render_result,
    unknown_tool_text,
    with_credentials,
)
from ._trace import resolve
from ._verbs import Allow, Deny
from .providers import ProviderRequest

log = logging.getLogger("helmlog")

NOT_RUN = (
    "Tool '{name}' (call {id}) was not run: the run stopped before it was dispatched."
)
OUTCOME_UNKNOWN = (
    "The outcome of tool '{name}' (call {id}) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)
PERMISSION_FAILED = (
    "[permission denied: Tool '{name}' could not be authorized. This will not change "
    "during this run — do not call it again. Continue without it, or say what you are "
    "unable to do.]"
)
TWO_GATES = (
    "Tool '{tool}' was not executed and cannot be retried this turn: it declares its "
    "own check-in consent gate, which trips for these arguments, and middleware "
    "'{asker}' already asked a person about this call. Ask through one gate, not two."
)


class MessageRefused(Exception):
    """Internal: a message chain refused; carries the error to raise."""

    def __init__(self, error: MessageDeniedError) -> None:
        super().__init__(error.reason)
        self.error = error

    @classmethod
    def of(cls, verdict: MessageVerdict, phase: str) -> MessageRefused:
        """The refusal a denied message walk stands for (G37)."""
        return cls(
            MessageDeniedError(
                reason=verdict.reason or "",
                phase=phase,
                middleware=verdict.middleware or "",
            )
        )


@dataclasses.dataclass(slots=True)
class Session:
    """One hosted session: its journal (a cache of its stream) and its lock.

    ``users`` counts the operations in flight (holding or awaiting the lock);
    ``last_used`` is the agent clock's reading when the last operation
    ended (or the session was admitted). A session with users is never
    dropped from the cache (R21).
    """

    journal: Journal
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    in_provider: bool = False
    users: int = 0
    last_used: int = 0

    @property
    def session_id(self) -> str:
        return self.journal.session_id

    @property
    def busy(self) -> bool:
        """Whether an operation is in flight on this session."""
        return self.users > 0 or self.lock.locked()


def outstanding_calls(history: list[Message]) -> list[ToolCallRequest]:
    """Calls of the last assistant turn that have no tool message yet."""
    for index in range(len(history) - 1, -1, -1):
        msg = history[index]
        if msg.role == "assistant":
            if not msg.tool_calls:
                return []
            answered = {
                m.tool_call_id for m in history[index + 1 :] if m.role == "tool"
            }
            return [c for c in msg.tool_calls if c.id not in answered]
        if msg.role == "user":
            return []
    return []


def find_call(history: list[Message], tool_call_id: str) -> ToolCallRequest | None:
    """The proposed call with this id in the last assistant turn that made it."""
    for msg in reversed(history):
        if msg.role == "assistant":
            for call in msg.tool_calls:
                if call.id == tool_call_id:
                    return call
    return None


class Loop:
    """Runs sessions for one agent configuration."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    # -- the iteration loop ------------------------------------------------

    async def drive(self, s: Session) -> str | AskPause:
        """Continue a session until it answers or pauses."""
        cfg = self.config
        j = s.journal
        f = j.folder
        while True:
            pause = await self.dispatch_outstanding(s)
            if pause is not None:
                return pause
            iteration = f.iteration + 1
            messages = tuple(f.history)
            if cfg.window is not None:
                plan = cfg.window.plan(messages, iteration=iteration)
                if plan.record is not None:
                    j.add(plan.record)
                messages = plan.messages
            j.add(LlmStarted(iteration=iteration, model=cfg.model))
            await j.flush()
            request = ProviderRequest(
                model=cfg.model,
                system=cfg.system,
                messages=messages,
                tools=cfg.tool_specs,
            )
            started = cfg.clock()
            s.in_provider = True
            reply = await cfg.provider.call(
                request, None if cfg.output_governed else j.token
            )
            s.in_provider = False
            j.add(
                LlmEnded(
                    iteration=iteration,
                    content="" if cfg.output_governed else reply.content,
                    content_withheld=cfg.output_governed,
                    tool_call_count=len(reply.tool_calls),
                    usage=dict(reply.usage),
                    stop_reason=reply.stop_reason,
                    duration_ms=max(0, cfg.clock() - started),
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
                continue
            return await self.finish(s, reply.content, iteration)

    async def finish(self, s: Session, draft: str, iteration: int) -> str:
        """Output admission, then commit and release the answer (G39–G43)."""
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
        j.add(MessageCommitted(message=Message(role="assistant", content=answer)))
        if cfg.output_governed:
            await j.flush()
            if answer:
                j.token(answer)
        j.add(TurnEnded(turn=j.folder.turn, final_content=answer))
        await j.flush()
        return answer

    def identity(self, s: Session) -> Any:
        ident = s.journal.folder.identity
        return ident if ident is not None else {"session_id": s.session_id}

    # -- dispatch ----------------------------------------------------------

    async def dispatch_outstanding(self, s: Session) -> AskPause | None:
        """Dispatch every call of the last assistant turn lacking a tool message."""
        f = s.journal.folder
        for call in outstanding_calls(f.history):
            if call.id in f.dispatched:
                pause = await self.recover(s, call)
            else:
                pause = await self.dispatch(s, call, f.iteration)
            if pause is not None:
                return pause
        return None

    async def dispatch(
        self, s: Session, call: ToolCallRequest, iteration: int
    ) -> AskPause | None:
        """One call through the fixed pipeline (G51)."""
        cfg = self.config
        j = s.journal
        j.add(
            ToolStarted(
                tool_name=call.name,
                tool_call_id=call.id,
                iteration=iteration,
                args=call.args,
            )
        )
        tool = cfg.tools.get(call.name)
        if tool is None:
            return self.refuse(s, call, unknown_tool_text(call.name, cfg.tools))
        site = CallSite(
            call.name,
            tool.source,
            call.id,
            iteration,
            tuple(j.folder.history),
            self.identity(s),
        )
        if cfg.permissions is not None:
            refusal = await self.gate(site, call)
            if refusal is not None:
                return self.refuse(s, call, refusal)
        args = call.args
        if cfg.has_call_hooks:
            verdict = await walk_tool_calls(cfg.tool_links, site, args)
            j.file(verdict.rows)
            if verdict.kind == "deny":
                return self.refuse(s, call, verdict.reason or "")
            if verdict.kind == "ask":
                assert verdict.ask is not None
                return await self.pause(
                    s,
                    "ask",
                    call,
                    site,
                    verdict.args,
                    MiddlewareAsk(
                        verdict.ask.question,
                        clone(verdict.ask.detail),  # G8: the hook keeps its own
                        verdict.middleware,
                        verdict.ask.component_id,
                    ),
                    link_index=verdict.link_index,
                )
            args = verdict.args
        return await self.validate_and_run(s, call, tool, site, args, asked_by=None)

    async def gate(self, site: CallSite, call: ToolCallRequest) -> str | None:
        """The permission gate (G54): ``None`` to pass, else what the model reads."""
        checker = self.config.permissions
        assert checker is not None
        ctx = ToolCallContext(
            site.tool_name,
            site.tool_source,
            site.tool_call_id,
            site.iteration,
            clone(call.args),
            site.history,
            site.identity,
        )
        try:
            out = checker(ctx)
            if inspect.isawaitable(out):
                out = await out
        except Exception:
            log.warning(
                "permission checker failed for tool %s", call.name, exc_info=True
            )
            return PERMISSION_FAILED.format(name=call.name)
        if isinstance(out, Allow):
            return None
        if isinstance(out, Deny):
            return f"[permission denied: {out.reason}]"
        return PERMISSION_FAILED.format(name=call.name)

    async def validate_and_run(
        self,
        s: Session,
        call: ToolCallRequest,
        tool: Tool,
        site: CallSite,
        args: Any,
        *,
        asked_by: str | None,
    ) -> AskPause | None:
        """Validation → check-in → credentials → execute → after-tool (G51)."""
        kwargs, issues = tool.validate(args)
        if kwargs is None:
            return self.refuse(s, call, invalid_arguments_text(tool.name, issues))
        if tool.check_in is not None and self.check_in_trips(tool, kwargs):
            if asked_by is not None:
                return self.refuse(
                    s, call, TWO_GATES.format(tool=tool.name, asker=asked_by)
                )
            return await self.pause(
                s,
                "check-in",
                call,
                site,
                args,
                MiddlewareAsk(
                    f"Approve a call to '{tool.name}'?", clone(args), None, None
                ),
            )
        return await self.run_tool(s, call, tool, site, args, kwargs)

    @staticmethod
    def check_in_trips(tool: Tool, kwargs: dict[str, Any]) -> bool:
        if tool.check_in is True:
            return True
        assert callable(tool.check_in)
        try:
            return bool(tool.check_in(clone(kwargs)))
        except Exception:  # noqa: BLE001 — G56: a raising predicate trips
            # A person decides; failing open would skip the consent gate.
            return True

    async def run_tool(
        self,
        s: Session,
        call: ToolCallRequest,
        tool: Tool,
        site: CallSite,
        args: Any,
        kwargs: dict[str, Any],
        *,
        attempt: int = 1,
    ) -> AskPause | None:
        """Credentials, the dispatch record, ``execute``, then the result (G57, R7)."""
        cfg = self.config
        j = s.journal
        resolved, refusal = with_credentials(tool, kwargs, cfg.credentials)
        if resolved is None:
            return self.refuse(s, call, refusal or "")
        j.add(
            ToolDispatched(
                tool_name=tool.name, tool_call_id=call.id, args=args, attempt=attempt
            )
        )
        await j.flush()
        started = cfg.clock()
        error = False
        try:
            result = await call_execute(tool, resolved, call.id)
        except AskHumanSignal as signal:
            return await self.pause(
                s,
                "ask-human",
                call,
                site,
                args,
                MiddlewareAsk(signal.question, signal.detail, None, None),
            )
        except Exception as exc:  # noqa: BLE001 — G18: a raise is the tool's result
            result, error = str(exc) or type(exc).__name__, True
        await self.complete(
            s,
            call,
            site,
            args,
            result,
            error=error,
            duration_ms=max(0, cfg.clock() - started),
        )
        return None

    async def complete(
        self,
        s: Session,
        call: ToolCallRequest,
        site: CallSite,
        args: Any,
        result: Any,
        *,
        error: bool,
        duration_ms: int = 0,
    ) -> None:
        """After-tool walk over a result, then record what the model reads."""
        cfg = self.config
        verdict_text: str
        if cfg.has_result_hooks:
            verdict = await walk_tool_results(
                cfg.tool_links, site, args, result, error=error
            )
            s.journal.file(verdict.rows)
            if verdict.denied:
                verdict_text = verdict.reason or ""
            else:
                verdict_text = render_result(verdict.result)
        else:
            verdict_text = render_result(result)
        self.record_result(s, call, result, error, duration_ms, verdict_text)

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

    def refuse(self, s: Session, call: ToolCallRequest, text: str) -> AskPause | None:
        """A call that did not execute: the model reads ``text`` (G51).

        Returns ``None`` (the call is resolved; nothing waits on a person), so
        a pipeline step can end with ``return self.refuse(...)``.
        """
        self.record_result(s, call, text, False, 0, text)
        return None

    async def pause(
        self,
        s: Session,
        kind: str,
        call: ToolCallRequest,
        site: CallSite,
        args: Any,
        ask: MiddlewareAsk,
        *,
        link_index: int = -1,
    ) -> AskPause:
        """Record the pause and hand back its checkpoint (G59).

        The stream stores the pause's content digest (history, the paused
        call, its asking link), never its MAC: with a chain key the
        checkpoint handed back gets its MAC over the bindings and that digest
        here (``sign_checkpoint``), so it is not derivable from the stream
        (R9), and a store that lacks the session verifies it whole.
        """
        cfg = self.config
        j = s.journal
        f = j.folder
        args_digest = digest(args)
        content = pause_content_digest(
            history=tuple(f.history),
            original_input=f.original_input,
            tool_name=call.name,
            call=PausedCall(
                kind=kind,
                args=args,
                middleware=ask.middleware,
                link_index=link_index,
                iteration=site.iteration,
                question=ask.question,
                component_id=ask.component_id,
                turn=f.turn,
                identity=f.identity,
            ),
        )
        j.add(
            PauseRequested(
                kind=kind,
                tool_name=call.name,
                tool_call_id=call.id,
                middleware=ask.middleware,
                link_index=link_index,
                question=ask.question,
                detail=ask.detail,
                component_id=ask.component_id,
                args=args,
                args_digest=args_digest,
                policy_version=cfg.policy_version,
                iteration=site.iteration,
                content_digest=content,
            )
        )
        await j.flush()
        checkpoint = sign_checkpoint(
            j.folder.pause_checkpoint, j.folder.pending, cfg.store.chain_key
        )
        if checkpoint is None:  # pragma: no cover - the fold of a pause.request sets it
            raise CheckpointError("tampered", "the recorded pause folded to nothing")
        return AskPause(
            kind=kind,
            ask=ask,
            tool_name=call.name,
            tool_call_id=call.id,
            checkpoint=checkpoint,
        )

    async def recover(self, s: Session, call: ToolCallRequest) -> AskPause | None:
        """A call dispatched on a host that stopped before its result (R7)."""
        j = s.journal
        record = j.folder.dispatched[call.id]
        tool = self.config.tools.get(call.name)
        if tool is not None and tool.idempotent:
            site = CallSite(
                call.name,
                tool.source,
                call.id,
                j.folder.iteration,
                tuple(j.folder.history),
                self.identity(s),
            )
            kwargs, _issues = tool.validate(record.args)
            if kwargs is not None:
                return await self.run_tool(
                    s, call, tool, site, record.args, kwargs, attempt=record.attempt + 1
                )
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

    async def settle(self, s: Session) -> None:
        """Record the outcome of calls a failed turn left dispatched (R7).

        The turn ended with ``error.fatal`` while these calls ran, so nothing
        reads their results and nothing is run again: each is recorded as
        ``tool.outcome_unknown``, which lets the session continue (R20).
        """
        j = s.journal
        for record in list(j.folder.dispatched.values()):
            traceparent, tracestate = resolve(
                None, None, j.folder.trace, self.config.new_traceparent
            )
            j.add(
                ToolOutcomeUnknown(
                    tool_name=record.tool_name,
                    tool_call_id=record.tool_call_id,
                    traceparent=traceparent,
                    tracestate=tracestate,
                )
            )
        await j.flush()

    # -- failure -----------------------------------------------------------

    async def fail(
        self,
        s: Session,
        exc: BaseException,
        *,
        phase: str | None = None,
        middleware: str | None = None,
    ) -> None:
        """Record a run that ends by raising: missing tool messages, one
        ``error.fatal`` (G66, G91). Never raises; a store that refuses is logged.

        A run fenced by a sequence conflict records nothing (R20): the stream
        belongs to the writer that won, and an ``error.fatal`` after its batch
        would make its next append conflict after its tool ran.
        """
        if s.journal.fenced:
            s.in_provider = False
            return
        if isinstance(exc, MessageRefused):
            code, retryable = "ERR_MESSAGE_DENIED", False
        elif isinstance(exc, LedgerAppendError):
            code, retryable = "ERR_LEDGER_APPEND", True
        elif s.in_provider or isinstance(exc, ProviderError):
            code = "ERR_PROVIDER"
            retryable = exc.retryable if isinstance(exc, ProviderError) else True
        else:
            code, retryable = "ERR_INTERNAL", False
        s.in_provider = False
        j = s.journal
        try:
            if j.broken:
                # The cache holds events the store never accepted: record the
                # failure on the stream as the store holds it (G91, R1) —
                # unless another writer moved it meanwhile (R20): then the
                # stream is theirs, and this run appends nothing more.
                fresh = await j.reopened()
                if not j.still_ours(fresh):
                    return
                j = fresh
            for call in outstanding_calls(j.folder.history):
                if call.id in j.folder.dispatched:
                    continue
                j.add(
                    MessageCommitted(
                        message=Message(
                            role="tool",
                            content=NOT_RUN.format(name=call.name, id=call.id),
                            tool_call_id=call.id,
                            tool_name=call.name,
                        )
                    )
                )
            j.add(
                FatalError(
                    code=code, phase=phase, middleware=middleware, retryable=retryable
                )
            )
            await j.flush()
        except StoreError:
            log.warning(
                "could not record error.fatal for session %s",
                s.session_id,
                exc_info=True,
            )
