"""The resume path: answer a pause, then hand the call back to the pipeline.

Pattern: check everything, then hand over: the checkpoint's bindings
         (``_bindings.py``) and the decision's type (``check_decision``) are
         checked before anything is appended; then ``pause.resumed`` is
         recorded, the paused call re-enters the one pipeline
         (``ToolPipeline.resume``) and the loop drives the turn on.
Role:    runtime layer; ``Agent.resume`` delegates here; a steered turn
         (``_steering.py``) answers its pauses by the same ``answer``, and
         stops at the call's outcome (the framework calls the model).

Laws: G59–G70 (pause, resume, decisions), R9 (checked, single-use; a pause
checkpoint the store lacks is imported, ``session.imported``), R25
(``session-deleted``), R20 (a lost conflict is ``replayed``), issue 8 item 8.
Why check here and hand over: what a resume may append is decided here;
what the call does next is the pipeline's, the same steps a fresh call takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    Folder,
    PauseResumed,
    PendingPause,
    SessionImported,
    ToolCallRequest,
    shape,
)

from .._chain import CallSite
from .._config import AgentConfig
from .._errors import DecisionRequiredError
from .._hosting import Hosting
from .._loop import Loop
from .._session import Session
from .._steps import Paused, Ran, Refused
from .._tools import Tool
from .._trace import Trace, given, resolve
from ..providers._base import name_of
from ._bindings import check_pause, importable, paused_call
from ._pause import AskPause, CheckInDecision, TurnResult

T = TypeVar("T")


class Resume:
    """Resumes the pauses of one agent's sessions."""

    __slots__ = ("_config", "_hosting", "_loop")

    def __init__(self, config: AgentConfig, loop: Loop, hosting: Hosting) -> None:
        self._config = config
        self._loop = loop
        self._hosting = hosting

    async def __call__(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        traceparent: str | None,
        tracestate: str | None,
    ) -> TurnResult:
        """Answer the pause ``checkpoint`` names and continue the run."""
        return await self.answer(
            checkpoint, decision, traceparent, tracestate, self._drive_on
        )

    async def answer(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        traceparent: str | None,
        tracestate: str | None,
        then: Then[T],
        tool: Tool | None = None,
    ) -> T:
        """Check the pause and the decision, then hand over to ``then``.

        ``then`` runs under the session's lock once nothing is left to
        refuse: ``_drive_on`` (the run goes on to the model) or a steered
        turn's (``_steering.py``: the call's outcome, the framework calls the
        model). ``tool`` is the tool a steered turn runs (default: the
        agent's registered tool of the pause's name).
        """
        cp = Checkpoint.coerce(checkpoint)
        caller = given(traceparent, tracestate)
        found = await activate_checkpointed(self._hosting, self._config, cp.session_id)
        imported: SessionImported | None = None
        if found is None:
            # R9: a pause checkpoint of a session this store lacks is imported.
            traceparent, tracestate = caller or (self._config.new_traceparent(), "")
            imported = msgspec.structs.replace(
                importable(cp),
                traceparent=traceparent,
                tracestate=tracestate,
                trace_minted=caller is None,
            )
            session = self._hosting.new(cp.session_id)
        else:
            session = found
        try:
            return await self._resume_in(
                session, cp, decision, imported, caller, then, tool
            )
        finally:
            if imported is not None and session.journal.folder.last_seq == 0:
                # Refused before anything was appended: no session to keep.
                self._hosting.discard(session)

    async def _resume_in(
        self,
        session: Session,
        cp: Checkpoint,
        decision: Any,
        imported: SessionImported | None,
        caller: Trace | None,
        then: Then[T],
        tool: Tool | None,
    ) -> T:
        hosting = self._hosting
        async with hosting.operating(session):
            if imported is None:
                await session.journal.activate()  # catch up with other hosts
                f = session.journal.folder
            else:
                # Check the import as resume checks any pause, on the stream
                # it would seed, before anything is appended.
                f = Folder(cp.session_id)
                f.apply(imported)
            pending = check_pause(self._config, f, cp)
            call, tool = paused_call(self._config, f, pending, tool)
            check_decision(pending, decision)
            if imported is not None:
                # The pause as recorded (stamped) is the one resumed.
                session.journal.add(imported)
                pending = session.journal.folder.pending or pending
            hosting.use(session)
            trace = caller or resolve(
                None, None, session.journal.folder.trace, self._config.new_traceparent
            )
            return await then(
                Resumed(session, pending, call, tool, decision, trace, cp.seq)
            )

    async def _drive_on(self, r: Resumed) -> TurnResult:
        """Agent.resume's ``then``: the call, then the loop to the next answer."""
        out = await self._hosting.guard(r.session, self._continue(r), resumed=r.seq)
        return self._hosting.result(r.session, out)

    async def _continue(self, r: Resumed) -> str | AskPause:
        """Record ``pause.resumed``; the pipeline and then the loop go on."""
        out = await self.call(r)
        if isinstance(out, AskPause):
            return out
        return await self._loop.drive(r.session)

    async def call(self, r: Resumed) -> Ran | Refused | AskPause:
        """Record ``pause.resumed``; the paused call goes on through the
        pipeline, and its outcome (or its next pause) is recorded."""
        loop = self._loop
        s, p, call, tool, decision, trace = (
            r.session,
            r.pending,
            r.call,
            r.tool,
            r.decision,
            r.trace,
        )
        j = s.journal
        checkin = decision if isinstance(decision, CheckInDecision) else None
        if checkin is None and p.kind != "ask-human":
            # check_decision refused this already; a gate never falls through
            # to a result.
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
                paused_duration_ms=max(0, self._config.clock() - p.timestamp),
                component_id=p.component_id,
                traceparent=trace[0],
                tracestate=trace[1],
                provider=name_of(self._config.provider),
            )
        )
        site = CallSite(
            p.tool_name,
            tool.source,
            p.tool_call_id,
            p.iteration,
            tuple(j.folder.history),
            loop.identity(s),
            j.folder.approvals,
        )
        outcome = await loop.pipeline.resume(tool, site, p, decision, s)
        if isinstance(outcome, Paused):
            return await loop.paused(s, call, site, outcome)
        loop.record_outcome(s, call, outcome)
        return outcome


@dataclasses.dataclass(frozen=True, slots=True)
class Resumed:
    """A pause checked and ready to answer: what a resume's ``then`` gets.

    ``seq`` is the pause's (``Hosting.guard``'s ``resumed``: a lost conflict
    over it is the checkpoint's replay, R9).
    """

    session: Session
    pending: PendingPause
    call: ToolCallRequest
    tool: Tool
    decision: Any
    trace: Trace
    seq: int


Then = Callable[[Resumed], Awaitable[T]]


async def activate_checkpointed(
    hosting: Hosting, config: AgentConfig, session_id: str
) -> Session | None:
    """The checkpoint's session, activated; ``None`` when the store never held it.

    Only then may a checkpoint seed it (R9, R14).

    Raises:
        CheckpointError: ``"session-deleted"`` when the store remembers the
            session and no longer holds it (R25): a checkpoint of a deleted
            session is never imported as a new one.
    """
    found = await hosting.activate(session_id)
    if found is not None or not await config.store.remembers(session_id):
        return found
    # A concurrent import may have created it since the first look.
    found = await hosting.activate(session_id)
    if found is None:
        raise CheckpointError(
            "session-deleted",
            f"session deleted: the store {config.store.url} held session "
            f"'{session_id}' and no longer has it; a checkpoint of a deleted "
            "session is never imported as a new one (R25)",
        )
    return found


def check_decision(p: PendingPause, decision: Any) -> None:
    """A gate (``ask``, ``check-in``) takes a ``CheckInDecision``; ``ask_human``
    any answer but ``None`` (G59–G70); else ``DecisionRequiredError``."""
    if p.kind in ("ask", "check-in"):
        if not isinstance(decision, CheckInDecision):
            raise DecisionRequiredError(
                gate=p.kind,
                middleware=p.middleware,
                tool_name=p.tool_name,
                received="nothing" if decision is None else shape(decision),
            )
    elif decision is None:
        raise DecisionRequiredError(
            gate="ask-human",
            middleware=None,
            tool_name=p.tool_name,
            received="nothing",
        )
