"""What-if: re-judge a recorded session under another agent's rules.

Pattern: replay against a changed policy (Temporal's replayer, pointed at a
         new posture): inputs, replies and tool results come from the stream
         (``RecordedCalls``); every decision from the new agent's chains,
         gate, validation and window, run by the one pipeline (``IN_AGENT``)
         and the one message walker. Nothing calls a model or a tool.
Role:    runtime layer (pure); ``helmlog.whatif`` verifies streams and hands
         them here.

Laws: issue 13 (the verdicts; the divergence point), G51, G59–G64, G70,
G33/G39, G80/G81, G7/G54, G87, R1 (each decision stands on the fold up to it).
Why the divergence point stops a session: later replies answered a
conversation that did not happen; judging them would be guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helmlog.events import (
    DecisionFiled,
    Event,
    Folder,
    MiddlewareDecision,
    PendingPause,
    UnknownEvent,
    WindowCompacted,
)

from .._chain import CallSite, walk_messages
from .._config import AgentConfig
from .._pipeline import PERMISSION_FAILED, ToolPipeline
from .._recorded import NotRecorded, RecordedCalls
from .._session import find_call
from .._steps import IN_AGENT, Entry, Outcome, Paused, Ran, Refused, Step
from .._tools import Tool
from ..pause._pause import CheckInDecision
from ._record import (
    Admission,
    CallRecord,
    Point,
    WindowVisit,
    raw_message,
    read_points,
    result_trusted,
)
from ._report import Flip, Judgement, SessionWhatIf, Unjudgeable
from ._verdicts import (
    PASSES,
    STEP_NAMES,
    after_word,
    call_fields,
    decider,
    decision_points,
    execution_of,
    flip_of,
    raised_by,
    recorded_final,
    verdict_word,
    window_view,
)

STAND_IN_SECRET = "[what-if: not resolved]"


def _stand_in(_name: str) -> str:
    return STAND_IN_SECRET


def _no_clock() -> int:
    return 0


class WhatIf:
    """Re-judges recorded sessions under one agent configuration.

    Args:
        config: the new agent's (``agent.config``): its tools, chains,
            permission gate and window judge; its provider is never called.
    """

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.calls = RecordedCalls()
        self.pipeline = ToolPipeline(
            self.calls.tools(config.tools),
            config.tool_links,
            IN_AGENT,
            permissions=config.permissions,
            credentials=_stand_in,
            clock=_no_clock,
        )

    async def session(
        self, session_id: str, events: Sequence[Event | UnknownEvent]
    ) -> SessionWhatIf:
        """Re-judge one session's decoded (and verified) stream."""
        points = read_points(events)
        folder = Folder(session_id)
        apply = folder.apply
        at = 0
        judged: list[Judgement] = []
        for n, point in enumerate(points):
            while at < point.index:
                event = events[at]
                if type(event) is not DecisionFiled:
                    # Rows are the record's verdicts, read by ``read_points``;
                    # what a decision stood on is the history, not the ledger.
                    apply(event)
                at += 1
            found = await self._judge(point, folder)
            judged.extend(found)
            if found and found[-1].diverges:
                return SessionWhatIf(
                    session_id=session_id,
                    decisions=tuple(judged),
                    divergence=found[-1],
                    not_rejudged=decision_points(points[n + 1 :]),
                )
        return SessionWhatIf(session_id=session_id, decisions=tuple(judged))

    async def _judge(self, point: Point, f: Folder) -> list[Judgement]:
        if isinstance(point, CallRecord):
            return await self._call(point, f)
        if isinstance(point, WindowVisit):
            return self._window(point, f)
        return await self._admission(point, f)

    def _identity(self, f: Folder) -> Any:
        ident = f.identity
        return ident if ident is not None else {"session_id": f.session_id}

    # -- the message moments ------------------------------------------------

    async def _admission(self, p: Admission, f: Folder) -> list[Judgement]:
        """Input or output admission of the recorded text (G33, G39)."""
        links = self.config.message_links
        if not links and not p.rows:
            return []
        raw = raw_message(p)
        rewrote = any(r.changed and r.outcome == "allow" for r in p.rows)
        if raw is None:
            was = "deny" if p.refused else ("transform" if rewrote else "allow")
            why: Unjudgeable = (
                "redacted"
                if (rewrote or not p.refused) and not p.rejected
                else "not-recorded"
            )
            return [self._unjudged(p, was, why)]
        was = "deny" if p.refused else ("transform" if p.text != raw else "allow")
        rows: list[MiddlewareDecision] = []
        text: str | None = raw
        if links:
            identity = p.identity if p.phase == "input" else self._identity(f)
            verdict = await walk_messages(
                links,
                p.phase,
                raw,
                history=() if p.phase == "input" else tuple(f.history),
                identity=identity
                if identity is not None
                else {"session_id": f.session_id},
                iteration=p.iteration,
            )
            rows = verdict.rows
            text = None if verdict.denied else verdict.content
        now = "deny" if text is None else ("transform" if text != raw else "allow")
        # A refused message is not read by the model: two refusals agree.
        flip = flip_of(was, now, text == p.text)
        return [self._verdict(p, was, now, flip, rows, diverges=flip is not None)]

    def _unjudged(
        self, p: Admission | CallRecord, was: str | None, why: Unjudgeable, **at: Any
    ) -> Judgement:
        moment = at.pop("moment", None) or (
            p.phase if isinstance(p, Admission) else "before-tool"
        )
        return Judgement(
            seq=p.seq,
            turn=p.turn,
            moment=moment,
            status="not-rejudgeable",
            was=was,
            iteration=p.iteration,
            reason=why,
            **call_fields(p),
            **at,
        )

    def _verdict(
        self,
        p: Admission | CallRecord,
        was: str,
        now: str,
        flip: Flip | None,
        rows: Sequence[MiddlewareDecision],
        *,
        diverges: bool,
        moment: str | None = None,
        step: str | None = None,
    ) -> Judgement:
        raised = raised_by(rows) if flip is not None else None
        if raised is not None:
            return self._unjudged(
                p, was, "link-raised", moment=moment, middleware=raised
            )
        tool_name: str | None = None
        call_id: str | None = None
        if isinstance(p, CallRecord):
            tool_name, call_id, at = p.tool_name, p.tool_call_id, "before-tool"
        else:
            at = p.phase
        return Judgement(
            seq=p.seq,
            turn=p.turn,
            moment=moment or at,
            status="flipped" if flip is not None else "unchanged",
            was=was,
            now=now,
            flip=flip,
            tool_name=tool_name,
            tool_call_id=call_id,
            iteration=p.iteration,
            middleware=decider(rows, now) if rows else None,
            step=step,
            diverges=diverges,
        )

    # -- the window ---------------------------------------------------------

    def _window(self, p: WindowVisit, f: Folder) -> list[Judgement]:
        """The new strategy planned over the recorded history (G80, G81)."""
        strategy = self.config.window
        base: dict[str, Any] = {"seq": p.seq, "turn": p.turn, "moment": "window"}
        new: WindowCompacted | None = None
        if strategy is not None:
            try:
                new = strategy.plan(tuple(f.history), iteration=p.iteration).record
            except Exception:  # noqa: BLE001 — a live run fails here; we report it
                return [
                    Judgement(
                        **base,
                        status="not-rejudgeable",
                        was="transform" if p.record else "allow",
                        iteration=p.iteration,
                        middleware=strategy.name,
                        reason="link-raised",
                    )
                ]
        if new is None and p.record is None:
            return []
        was = "transform" if p.record is not None else "allow"
        now = "transform" if new is not None else "allow"
        flip = flip_of(was, now, window_view(p.record) == window_view(new))
        return [
            Judgement(
                **base,
                status="flipped" if flip else "unchanged",
                was=was,
                now=now,
                flip=flip,
                iteration=p.iteration,
                middleware=new.strategy if new is not None else None,
                diverges=flip is not None,
            )
        ]

    # -- a tool call ----------------------------------------------------------

    async def _run(
        self, tool: Tool, site: CallSite, entry: Entry
    ) -> Outcome | NotRecorded:
        try:
            return await self.pipeline.run(tool, site, entry, self.calls)
        except NotRecorded as missing:
            return missing

    async def _resume(
        self, tool: Tool, site: CallSite, paused: Paused, decision: Any
    ) -> Outcome | NotRecorded:
        pending = PendingPause(
            kind=paused.kind,
            tool_name=site.tool_name,
            tool_call_id=site.tool_call_id,
            middleware=paused.ask.middleware,
            question=paused.ask.question,
            detail=None,
            component_id=paused.ask.component_id,
            link_index=paused.link_index,
            args=paused.args,
            args_digest="",
            policy_version="",
            iteration=site.iteration,
            seq=0,
            timestamp=0,
        )
        try:
            return await self.pipeline.resume(tool, site, pending, decision, self.calls)
        except NotRecorded as missing:
            return missing

    async def _call(self, p: CallRecord, f: Folder) -> list[Judgement]:
        """One call through the new pipeline, its pause resumed as recorded."""
        proposal = find_call(f.history, p.tool_call_id)
        rec_final = recorded_final(p)
        if proposal is None:
            return [self._unjudged(p, "allow", "not-recorded")]
        proposed = proposal.args
        was = "ask" if p.asked else verdict_word(rec_final, proposed)
        self.calls.expect(p.tool_call_id, execution_of(p))
        tool = self.pipeline.lookup(proposal.name)
        site: CallSite | None = None
        if isinstance(tool, Refused):
            outcome: Outcome | NotRecorded = tool
        else:
            site = CallSite(
                proposal.name,
                tool.source,
                proposal.id,
                p.iteration,
                tuple(f.history),
                self._identity(f),
                f.approvals,
            )
            outcome = await self._run(tool, site, Entry.fresh(proposed))
        asked_same = False
        if isinstance(outcome, Paused) and outcome.kind != "ask-human":
            assert site is not None and not isinstance(tool, Refused)
            ask = (outcome.kind, outcome.ask.middleware, outcome.ask.question)
            rows = self.calls.rows
            if p.asked != ask:
                flip: Flip = "new-ask" if p.asked is None else "reason-differs"
                return [self._verdict(p, was, "ask", flip, rows, diverges=True)]
            if p.resumed is None:  # both wait on a person; the record ends here
                return [self._verdict(p, "ask", "ask", None, rows, diverges=False)]
            asked_same = True
            r = p.resumed
            decision = CheckInDecision(
                approved=bool(r.approved), by=r.by or "", at=r.timestamp, note=r.note
            )
            outcome = await self._resume(tool, site, outcome, decision)
        if isinstance(outcome, Paused):  # the tool's ask_human, as recorded
            assert site is not None and not isinstance(tool, Refused)
            if not p.human_resumed or p.ended is None:
                waiting = ("pass", self.calls.dispatched_args)
                return [self._before(p, was, rec_final, waiting, proposed, asked_same)]
            outcome = await self._resume(tool, site, outcome, p.ended.result)
        if isinstance(outcome, NotRecorded):
            new_final: tuple[str, Any] = ("pass", outcome.arguments)
        elif isinstance(outcome, Refused):
            new_final = ("deny", outcome.text)
        else:
            new_final = ("pass", self.calls.dispatched_args)
        before = self._before(
            p, was, rec_final, new_final, proposed, asked_same, outcome=outcome
        )
        if before.diverges or before.status == "not-rejudgeable":
            return [before]
        if new_final[0] != "pass":
            return [before]  # refused in both: nothing ran, no result to judge
        after = self._after(p, outcome)
        return [before] if after is None else [before, after]

    def _before(
        self,
        p: CallRecord,
        was: str,
        rec_final: tuple[str, Any] | None,
        new_final: tuple[str, Any],
        proposed: Any,
        asked_same: bool,
        *,
        outcome: Outcome | NotRecorded | None = None,
    ) -> Judgement:
        """The before-tool verdict: what the call came to before it ran."""
        now = verdict_word(new_final, proposed)
        rows = [r for r in self.calls.rows if r.moment == "before-tool"]
        same = rec_final == new_final
        if asked_same:
            was_word = "ask" if same else verdict_word(rec_final, proposed)
            flip = None if same else flip_of(was_word, now, False)
            now = "ask" if same else now
            was = was_word
        elif p.asked and (now in PASSES or rec_final is None):
            flip = "no-longer-asks"
        elif p.asked:
            # Refused now where a person was asked: what they decided is the
            # recorded verdict the refusal replaces.
            flip = flip_of(verdict_word(rec_final, proposed), now, same)
        else:
            flip = flip_of(was, now, same)
        step = None
        if isinstance(outcome, Refused):
            step = STEP_NAMES.get(outcome.step)
            if (
                flip is not None
                and outcome.step is Step.GATE
                and outcome.text == PERMISSION_FAILED.format(name=p.tool_name)
            ):
                return self._unjudged(p, was, "permission-failed", step=step)
        return self._verdict(p, was, now, flip, rows, diverges=not same, step=step)

    def _after(self, p: CallRecord, outcome: Outcome | NotRecorded) -> Judgement | None:
        """The after-tool verdict over the recorded result (G18–G25)."""
        rec_rows = p.after_rows()
        hooks = self.pipeline.has_result_hooks
        if not rec_rows and not hooks:
            return None
        was = after_word(rec_rows)
        at = {"moment": "after-tool"}
        if isinstance(outcome, NotRecorded) or p.ended is None or p.content is None:
            # The recorded chain never saw a result: it decided nothing here.
            return self._unjudged(p, was if rec_rows else None, "not-recorded", **at)
        if not isinstance(outcome, Ran):
            return self._unjudged(p, was, "redacted", **at)
        same = outcome.text == p.content
        # A walk over a placeholder cannot read what the model read, so an
        # equal text needs no check that the recorded result is the real one.
        if not same and not result_trusted(p, p.ended.result):
            return self._unjudged(p, was, "redacted", **at)
        rows = [r for r in self.calls.rows if r.moment == "after-tool"]
        now = "deny" if outcome.denied else after_word(rows)
        flip = flip_of(was, now, same)
        return self._verdict(
            p, was, now, flip, rows, diverges=flip is not None, moment="after-tool"
        )
