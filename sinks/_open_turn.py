"""What an ``OtelSink`` holds for one session between a turn's events.

Pattern: one ``__slots__`` object per session with an open turn: its parent
         context, its ``invoke_agent`` span, a continuation span still due,
         the open model call and tool spans; ``close`` ends them at one time.
Role:    sinks layer; ``OtelSink`` keeps one per session, made at
         ``agent.turn_start`` (or a continuation), dropped at the turn's end.

Laws: R6 (spans end at recorded times), issue 8 item 8 (``parent``).
Why one slot object: looked up once per event, dropped at once. A
continuation span may be due rather than open: a recovery that only settles
calls has nothing to put under it.
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
