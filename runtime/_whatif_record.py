"""What a recorded session decided, point by point: the what-if's reading.

Pattern: one forward pass over a decoded stream that cuts it into decision
         points — a turn's input admission, each window visit, each tool
         call (its rows, pause, resume, dispatch, result and tool message),
         a turn's output admission — each with the stream position a fold
         must reach to stand where the live session stood.
Role:    runtime layer; ``_whatif.py`` re-judges each point under a new
         agent's rules. Pure: no clock, no I/O.
Emits:   nothing.

Laws: G33/G35 (input rows come before ``agent.turn_start``; a refused input
ends with ``error.fatal`` and starts no turn), G39/G43 (output rows follow
the last ``stream.llm_end`` of a turn; a refused draft ends with
``error.fatal``), G51 (a call's record runs from ``stream.tool_start`` to its
tool message), G59/G62/G64 (pause, resume, resume-side row), G69–G70
(``ask_human``: dispatched, paused, answered), G80 (a window record sits
right before its ``stream.llm_start``), R7 (``tool.outcome_unknown``), R9
(``session.imported`` opens a paused call recorded on another stream), R10
(unknown events are skipped), R20 (call ids are the turn's: a call is open
from its start to its tool message).

What the record cannot give back: a value the redaction policy replaced
(G87), an input or a draft a rule refused before any rewrite kept it (G35,
G43), a result never recorded (R7). ``raw_*`` return ``None`` for those, and
the what-if reports the decision as not re-judgeable rather than guessing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from helmlog.events import (
    DecisionFiled,
    Event,
    FatalError,
    LlmEnded,
    LlmStarted,
    MessageCommitted,
    MessageDeniedError,
    MiddlewareDecision,
    PauseRequested,
    PauseResumed,
    SessionImported,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnStarted,
    UnknownEvent,
    WindowCompacted,
)

from ._tools import render_result

_DENIED = MessageDeniedError.code


@dataclasses.dataclass(slots=True)
class Admission:
    """A message admission (``phase`` input or output) as recorded.

    ``text`` is what was let through (the committed message), ``None`` when
    the chain refused it.
    """

    index: int
    seq: int
    turn: int
    phase: str
    iteration: int = 0
    rows: list[MiddlewareDecision] = dataclasses.field(default_factory=list)
    text: str | None = None
    refused: bool = False
    identity: Any = None


@dataclasses.dataclass(slots=True)
class WindowVisit:
    """One iteration boundary: the window's record, ``None`` if it did not engage."""

    index: int
    seq: int
    turn: int
    iteration: int
    record: WindowCompacted | None


@dataclasses.dataclass(slots=True)
class CallRecord:
    """Everything the stream holds of one proposed call."""

    index: int
    seq: int
    turn: int
    tool_call_id: str
    tool_name: str
    iteration: int
    rows: list[MiddlewareDecision] = dataclasses.field(default_factory=list)
    # (kind, middleware, question) of an ask or check-in pause.
    asked: tuple[str, str | None, str] | None = None
    resumed: PauseResumed | None = None
    human: PauseRequested | None = None
    human_resumed: bool = False
    dispatched: ToolDispatched | None = None
    ended: ToolEnded | None = None
    unknown: bool = False
    content: str | None = None
    imported: bool = False

    def before_rows(self) -> list[MiddlewareDecision]:
        return [r for r in self.rows if r.moment == "before-tool"]

    def after_rows(self) -> list[MiddlewareDecision]:
        return [r for r in self.rows if r.moment == "after-tool"]


Point = Admission | WindowVisit | CallRecord


def read_points(events: Sequence[Event | UnknownEvent]) -> list[Point]:
    """Cut a decoded stream into its decision points, in stream order."""
    points: list[Point] = []
    turn = 0
    admission: Admission | None = None  # an input or output admission open
    call: CallRecord | None = None
    window: tuple[int, WindowCompacted] | None = None
    for index, ev in enumerate(events):
        seq = ev.seq or 0
        kind = type(ev)
        if kind is DecisionFiled:
            row = ev.row  # type: ignore[union-attr]
            if row.at == "message":
                if admission is None and row.moment == "input":
                    admission = Admission(index, seq, turn + 1, "input")
                    points.append(admission)
                if admission is not None:
                    admission.rows.append(row)
            elif call is not None and row.tool_call_id == call.tool_call_id:
                call.rows.append(row)
        elif kind is TurnStarted:
            turn = ev.turn  # type: ignore[union-attr]
            if admission is None:
                admission = Admission(index, seq, turn, "input")
                points.append(admission)
            admission.turn = turn
            admission.identity = ev.identity  # type: ignore[union-attr]
        elif kind is MessageCommitted:
            msg = ev.message  # type: ignore[union-attr]
            if msg.role == "tool":
                if call is not None and msg.tool_call_id == call.tool_call_id:
                    call.content = msg.content
                    call = None
            elif admission is not None and (
                (admission.phase == "input" and msg.role == "user")
                or (
                    admission.phase == "output"
                    and msg.role == "assistant"
                    and not msg.tool_calls
                )
            ):
                admission.text = msg.content
                admission = None
        elif kind is FatalError:
            if admission is not None:
                if ev.code == _DENIED and ev.phase == admission.phase:  # type: ignore[union-attr]
                    admission.refused = True
                else:
                    points.remove(admission)  # a failure, not an admission
                admission = None
        elif kind is WindowCompacted:
            window = (index, ev)  # type: ignore[assignment]
        elif kind is LlmStarted:
            it = ev.iteration  # type: ignore[union-attr]
            at, record = window if window is not None else (index, None)
            points.append(WindowVisit(at, events[at].seq or 0, turn, it, record))
            window = None
        elif kind is LlmEnded:
            if ev.tool_call_count == 0:  # type: ignore[union-attr]
                it = ev.iteration  # type: ignore[union-attr]
                admission = Admission(index + 1, seq, turn, "output", iteration=it)
                points.append(admission)
        elif kind is ToolStarted:
            call = CallRecord(
                index,
                seq,
                turn,
                ev.tool_call_id,  # type: ignore[union-attr]
                ev.tool_name,  # type: ignore[union-attr]
                ev.iteration,  # type: ignore[union-attr]
            )
            points.append(call)
        elif kind is SessionImported:
            call = _imported(ev, index, seq)  # type: ignore[arg-type]
            if call is not None:
                turn = call.turn
                points.append(call)
        elif call is not None:
            _attach(call, ev)
    if admission is not None and admission.text is None and not admission.refused:
        points.remove(admission)  # the stream ends before it was decided
    return points


def _imported(ev: SessionImported, index: int, seq: int) -> CallRecord | None:
    """R9: a pause recorded on another stream, continued on this one."""
    paused = ev.call
    if paused is None or ev.kind != "pause":
        return None
    record = CallRecord(
        index + 1,
        seq,
        paused.turn,
        ev.tool_call_id,
        ev.tool_name,
        paused.iteration,
        imported=True,
    )
    if paused.kind in ("ask", "check-in"):
        record.asked = (paused.kind, paused.middleware, paused.question)
    return record


def _attach(call: CallRecord, ev: Event | UnknownEvent) -> None:
    """File one event of the open call into its record."""
    if getattr(ev, "tool_call_id", None) != call.tool_call_id:
        return
    if isinstance(ev, PauseRequested):
        if ev.kind == "ask-human":
            call.human = ev
        else:
            call.asked = (ev.kind, ev.middleware, ev.question)
    elif isinstance(ev, PauseResumed):
        if ev.kind == "ask-human":
            call.human_resumed = True
        else:
            call.resumed = ev
    elif isinstance(ev, ToolDispatched):
        call.dispatched = ev
    elif isinstance(ev, ToolEnded):
        call.ended = ev
    elif isinstance(ev, ToolOutcomeUnknown):
        call.unknown = True


# -- what the record gives back ----------------------------------------------


def _changed(rows: list[MiddlewareDecision]) -> list[MiddlewareDecision]:
    return [r for r in rows if r.changed and r.outcome == "allow"]


def raw_message(point: Admission) -> str | None:
    """The text the chain was given: a rewrite's ``before``, else what passed.

    ``None`` when the record does not hold it: refused before any rewrite
    kept it (G35, G43), or redacted (a rewrite whose ``after`` is not what
    was committed).
    """
    rewrites = _changed(point.rows)
    if not rewrites:
        return None if point.refused else point.text
    first, last = rewrites[0].before, rewrites[-1].after
    if not isinstance(first, str) or _placeholders(rewrites):
        return None
    if not point.refused and last != point.text:
        return None  # the rows hold the placeholder, not the values (G87)
    return first


def _placeholders(rewrites: list[MiddlewareDecision]) -> bool:
    """A rewrite whose ``before``, ``after`` and ``why`` are one value: each was
    replaced by the same placeholder (G87), since a rule that rewrote a value
    said why in other words than the value itself."""
    return any(r.before == r.after == r.why for r in rewrites)


def result_trusted(call: CallRecord, result: Any) -> bool:
    """Whether the recorded result is the real one, checked against what the
    model read (the tool message, which redaction never touches, G87)."""
    rows = call.after_rows()
    denied = [r for r in rows if r.outcome == "deny"]
    rewrites = _changed(rows)
    if _placeholders(rewrites):
        return False
    if denied:
        return denied[-1].why == call.content and (
            rewrites[0].before == result if rewrites else denied[-1].before == result
        )
    if rewrites:
        return (
            rewrites[0].before == result
            and render_result(rewrites[-1].after) == call.content
        )
    return render_result(result) == call.content
