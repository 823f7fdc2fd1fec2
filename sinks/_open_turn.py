"""What an ``OtelSink`` holds for one session between a turn's events.

Pattern: one ``__slots__`` object per session with an open turn: its parent
         context, its ``invoke_agent`` span, a continuation span still due,
         the open model call and tool spans; ``close`` ends them at one time
         (``settle``, a served session's calls, which record no end).
Role:    sinks layer; ``OtelSink`` keeps one per session, made at
         ``agent.turn_start`` (or a continuation), dropped at the turn's end.

Laws: R6 (spans end at recorded times), issue 8 item 8 (``parent``), issue
26 item 6 (``root``, ``refused``, ``served``).
Why one slot object: looked up once per event, dropped at once. A
continuation span may be due rather than open: a recovery that only settles
calls has nothing to put under it.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

# A served session's ended calls whose contexts are kept (a late fact of one
# goes under its span); past this many, the oldest go.
_KEPT_CONTEXTS = 256


class OpenTurn:
    """The open spans of one session's turn, and the context they go under."""

    __slots__ = (
        "chat",
        "due",
        "model",
        "parent",
        "provider",
        "refused",
        "root",
        "served",
        "span",
        "span_context",
        "tool_contexts",
        "tools",
        "turn",
    )

    def __init__(
        self, parent: Context | None, turn: int | None, provider: str = ""
    ) -> None:
        self.parent = parent  # the recorded context the turn's spans go under
        self.turn = turn
        # The ids the turn's span takes as its own, a root, when the runtime
        # minted its context (or the sink derived it): no one else emits it.
        self.root: tuple[int, int] | None = None
        self.provider = provider  # gen_ai.provider.name, as last recorded
        self.model = ""  # gen_ai.request.model, once a model call names it
        self.span: Span | None = None  # the open invoke_agent span
        self.span_context: Context | None = None  # the context it sets
        # A continuation span to open when something goes under it: its start
        # and attributes (a recovery that only settles calls opens none).
        self.due: tuple[int, dict[str, Any]] | None = None
        self.chat: Span | None = None
        self.tools: dict[str, Span] = {}
        self.tool_contexts: dict[str, Context] = {}  # built once per open tool span
        # Calls a rule refused: ``error.type``, the rule, its reason (a fact).
        self.refused: dict[str, tuple[str, str, str]] = {}
        # A session with no turn (``mcp_serve``'s): each open call's span
        # and when its last event was (ns); it ends at that time, later.
        self.served: dict[str, int] = {}

    def turnless(self) -> bool:
        """Whether this is a session no turn opened (a served one)."""
        return (
            self.turn is None
            and self.parent is None
            and self.span is None
            and self.due is None
        )

    def settle(self, keep: str | None = None) -> None:
        """End the served calls' spans but ``keep``'s, each at its last event
        (a served call records no end of its own: ``mcp_serve`` files rows
        and a dispatch). Their contexts stay, for a late fact of theirs."""
        for call_id, last in list(self.served.items()):
            if call_id == keep:
                continue
            del self.served[call_id]
            span = self.tools.pop(call_id, None)
            if span is not None:
                span.end(end_time=last)
        while len(self.tool_contexts) > _KEPT_CONTEXTS:
            del self.tool_contexts[next(iter(self.tool_contexts))]

    def close(self, end: int, *, error: str | None = None) -> None:
        """End what is open of the turn: its model call, its tools, its span;
        with ``error`` (the fatal error's code) each of them ended in it."""
        if self.chat is not None:
            _end(self.chat, end, error)
            self.chat = None
        if self.tools:
            for tool in self.tools.values():
                _end(tool, end, error)
            self.tools = {}
            self.tool_contexts = {}
            self.refused = {}
        self.due = None
        span = self.span
        if span is None:
            return
        self.span = None
        self.span_context = None
        _end(span, end, error)


def _end(span: Span, end: int, error: str | None) -> None:
    if error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR))  # the code says it all
    span.end(end_time=end)
