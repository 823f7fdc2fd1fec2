"""What an ``OtelSink`` holds for one session between a turn's events.

Pattern: one ``__slots__`` object per session with an open turn: the turn's
         parent context, its ``invoke_agent`` span and the context it sets,
         a continuation span still due, and the open model call and tool
         spans; ``close`` ends all of it at one recorded time.
Role:    sinks layer; ``OtelSink`` (``sinks/_otel.py``) keeps one per session
         in a dict, made at ``agent.turn_start`` (or at a continuation) and
         dropped at the turn's end, pause or fatal error.
Emits:   nothing itself; ``close`` ends the spans the sink started.

Laws: R6 (spans end at the recorded time of what ended them, so a replay ends
them where a watched run did), issue 8 item 8 (``parent`` is the recorded
trace context the turn's spans go under).

Why one slot object per session: a host holds many sessions, and the sink
looks this up once per event; one dict entry holding slots costs less, and
drops at once, compared with one dict per kind of open span.

Why a continuation span can be due rather than open: a recovery that only
settles calls (``tool.outcome_unknown`` and nothing after it) has no work to
put under a span, so the span is opened by the first event that goes under
it, and a closed turn with one still due emits nothing.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode


class OpenTurn:
    """The open spans of one session's turn, and the context they go under."""

    __slots__ = (
        "chat",
        "due",
        "parent",
        "span",
        "span_context",
        "tool_contexts",
        "tools",
        "turn",
    )

    def __init__(self, parent: Context | None, turn: int | None) -> None:
        self.parent = parent  # the recorded context the turn's spans go under
        self.turn = turn
        self.span: Span | None = None  # the open invoke_agent span
        self.span_context: Context | None = None  # the context it sets
        # A continuation span to open when something goes under it: its start
        # and attributes (a recovery that only settles calls opens none).
        self.due: tuple[int, dict[str, Any]] | None = None
        self.chat: Span | None = None
        self.tools: dict[str, Span] = {}
        self.tool_contexts: dict[str, Context] = {}  # built once per open tool span

    def close(self, end: int, *, error: str | None = None) -> None:
        """End what is open of the turn: its model call, its tools, its span."""
        if self.chat is not None:
            self.chat.end(end_time=end)
            self.chat = None
        if self.tools:
            for tool in self.tools.values():
                tool.end(end_time=end)
            self.tools = {}
            self.tool_contexts = {}
        self.due = None
        span = self.span
        if span is None:
            return
        self.span = None
        self.span_context = None
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
