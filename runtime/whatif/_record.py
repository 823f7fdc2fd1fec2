"""What a recorded session decided, point by point: the what-if's reading.

Pattern: one forward pass over a decoded stream that cuts it into decision
         points (input admission, each window visit, each tool call from
         start to tool message, output admission), each with the stream
         position a fold must reach to stand where the live session stood.
Role:    runtime layer; ``_whatif.py`` re-judges each point. Pure: no I/O.

Laws: G33/G35, G39/G43, G92 (admission rows and refusals), G51, G59–G64,
G69–G70 (a call's record, pause and resume), G80 (window records), R7, R9,
R10 (unknown events skipped), R20.
Why ``raw_*`` may return ``None``: a value redaction replaced (G87), a text a
rule refused before any rewrite, a result never recorded (R7) cannot be given
back; the what-if reports such a decision as not re-judgeable, never guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from helmlog.events import (
    DecisionFiled,
    Event,
    FatalError,
    LlmEnded,
    LlmStarted,
    MessageCommitted,
    MiddlewareDecision,
    OutputRejected,
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

from .._errors import MessageDeniedError
from .._tools import render_result

_DENIED = MessageDeniedError.code


@dataclasses.dataclass(slots=True)
class Admission:
    """A message admission (``phase`` input or output) as recorded.

    ``text`` is what was let through (the committed message), ``None`` when
    the chain refused it or the output type rejected it (``rejected``).
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
    rejected: bool = False


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
    reader = _Reader(events)
    handlers = _HANDLERS
    for index, ev in enumerate(events):
        handler = handlers.get(type(ev))
        if handler is not None:
            handler(reader, index, ev)
        elif reader.call is not None:
            reader.attach(ev)
    reader.close()
    return reader.points


class _Reader:
    """The pass's state: the points so far and what is open."""

    __slots__ = ("admission", "call", "events", "points", "turn", "window")

    def __init__(self, events: Sequence[Event | UnknownEvent]) -> None:
        self.events = events
        self.points: list[Point] = []
        self.turn = 0
        self.admission: Admission | None = None  # an input or output, open
        self.call: CallRecord | None = None
        self.window: tuple[int, WindowCompacted] | None = None

    def close(self) -> None:
        a = self.admission
        if a is not None and a.text is None and not a.refused:
            self.points.remove(a)  # the stream ends before it was decided

    def filed(self, index: int, ev: DecisionFiled) -> None:
        row = ev.row
        if row.at == "message":
            if self.admission is None and row.moment == "input":
                self.admission = Admission(index, ev.seq or 0, self.turn + 1, "input")
                self.points.append(self.admission)
            if self.admission is not None:
                self.admission.rows.append(row)
        elif self.call is not None and row.tool_call_id == self.call.tool_call_id:
            self.call.rows.append(row)

    def turn_started(self, index: int, ev: TurnStarted) -> None:
        self.turn = ev.turn
        a = self.admission
        if a is None:
            a = self.admission = Admission(index, ev.seq or 0, ev.turn, "input")
            self.points.append(a)
        a.turn = ev.turn
        a.identity = ev.identity

    def committed(self, index: int, ev: MessageCommitted) -> None:
        msg = ev.message
        a = self.admission
        if msg.role == "tool":
            call = self.call
            if call is not None and msg.tool_call_id == call.tool_call_id:
                call.content = msg.content
                self.call = None
        elif a is not None and (
            (a.phase == "input" and msg.role == "user")
            or (a.phase == "output" and msg.role == "assistant" and not msg.tool_calls)
        ):
            a.text = msg.content
            self.admission = None

    def fatal(self, index: int, ev: FatalError) -> None:
        a = self.admission
        if a is not None:
            if ev.code == _DENIED and ev.phase == a.phase:
                a.refused = True
            else:
                self.points.remove(a)  # a failure, not an admission
            self.admission = None

    def output_rejected(self, index: int, ev: OutputRejected) -> None:
        if self.admission is not None:
            self.admission.rejected = True  # its draft is not in the record
            self.admission = None

    def window_compacted(self, index: int, ev: WindowCompacted) -> None:
        self.window = (index, ev)

    def llm_started(self, index: int, ev: LlmStarted) -> None:
        at, record = self.window if self.window is not None else (index, None)
        seq = self.events[at].seq or 0
        self.points.append(WindowVisit(at, seq, self.turn, ev.iteration, record))
        self.window = None

    def llm_ended(self, index: int, ev: LlmEnded) -> None:
        if ev.tool_call_count == 0:
            a = Admission(index + 1, ev.seq or 0, self.turn, "output", ev.iteration)
            self.admission = a
            self.points.append(a)

    def tool_started(self, index: int, ev: ToolStarted) -> None:
        self.call = CallRecord(
            index, ev.seq or 0, self.turn, ev.tool_call_id, ev.tool_name, ev.iteration
        )
        self.points.append(self.call)

    def imported(self, index: int, ev: SessionImported) -> None:
        self.call = _imported(ev, index, ev.seq or 0)
        if self.call is not None:
            self.turn = self.call.turn
            self.points.append(self.call)

    def attach(self, ev: Event | UnknownEvent) -> None:
        """File one event of the open call into its record."""
        call = self.call
        assert call is not None
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


# One table for every reader, as the fold keeps one (``_fold.py``).
_HANDLERS: dict[type[Any], Callable[[_Reader, int, Any], None]] = {
    DecisionFiled: _Reader.filed,
    TurnStarted: _Reader.turn_started,
    MessageCommitted: _Reader.committed,
    FatalError: _Reader.fatal,
    OutputRejected: _Reader.output_rejected,
    WindowCompacted: _Reader.window_compacted,
    LlmStarted: _Reader.llm_started,
    LlmEnded: _Reader.llm_ended,
    ToolStarted: _Reader.tool_started,
    SessionImported: _Reader.imported,
}


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
    said why in other words than the value itself; or a masking link's row,
    whose ``before`` the record never held (``masked``, issue 28 item 7)."""
    return any(r.masked or r.before == r.after == r.why for r in rewrites)


def result_trusted(call: CallRecord, result: Any) -> bool:
    """Whether the recorded result is the real one, checked against what the
    model read (the tool message, which redaction never touches, G87)."""
    rows = call.after_rows()
    denied = [r for r in rows if r.outcome == "deny"]
    rewrites = _changed(rows)
    if _placeholders(rewrites):
        return False
    if any(r.masked for r in denied):
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
