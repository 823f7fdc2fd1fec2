"""OpenTelemetry sink: GenAI spans per turn, model call and tool call; facts as logs.

Pattern: a projection of the record onto OTel's data model, following the
         OpenTelemetry semantic conventions for generative AI, fed live as a
         watcher or after the fact through ``replay``; one typed dispatch
         table keyed by event class (as ``events/_fold.py`` keeps).
Role:    sinks layer; ``.watch(OtelSink(...))``, ``otlp_sink()`` or
         ``helmlog replay --otlp``.
Emits:   spans ``invoke_agent {agent}`` (one per turn, ``gen_ai.agent.name``),
         its children ``chat {model}`` (one per model call: request model,
         token usage, finish reasons) and ``execute_tool {name}`` (one per tool
         call: tool name and call id), and one log record named
         ``helmlog.middleware.decision`` per decision fact.

Laws: R16 (no argument, result or content attribute unless ``values=True``),
R4 (idempotent by ``(session_id, seq)``), R6 (a replayed run yields the same
spans as a watched one, timed by the recorded timestamps).

Why spans are timed from event timestamps, not from when the sink sees them:
replaying last week's session must produce last week's spans.

Why the model name is remembered from ``stream.llm_start``: the record keeps
the requested model there and the usage on ``stream.llm_end``; one ``chat``
span carries both, so the sink holds the open call per session between them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, get_logger_provider
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from helmlog.events import (
    FatalError,
    LlmEnded,
    LlmStarted,
    MiddlewareDecisionEvent,
    PauseRequested,
    PauseResumed,
    ToolEnded,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)

from ._once import SeenOnce

_NS = 1_000_000  # event timestamps are milliseconds; OTel wants nanoseconds

DEFAULT_AGENT_NAME = "helmlog"

# Providers report usage under their own names; the record keeps
# ``input_tokens``/``output_tokens`` (runtime/providers), older or third-party
# providers may have written the chat-completions names.
_INPUT_KEYS = ("input_tokens", "prompt_tokens")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _usage(usage: dict[str, int], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if key in usage:
            return int(usage[key])
    return None


class OtelSink:
    """Turn a session's events into GenAI spans and decision log records.

    Args:
        tracer_provider: where spans go (the global provider when ``None``).
        logger_provider: where decision records go (the global one when ``None``).
        values: also attach arguments, results and content (off by default:
            the facts channel never carries values unless configured to).
        agent_name: ``gen_ai.agent.name`` of the turns' ``invoke_agent`` spans.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        values: bool = False,
        agent_name: str = DEFAULT_AGENT_NAME,
    ) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("helmlog")
        self._logger = (logger_provider or get_logger_provider()).get_logger("helmlog")
        self.values = values
        self.agent_name = agent_name
        self._once = SeenOnce()
        self._turns: dict[str, Span] = {}
        self._chats: dict[str, Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    def on_event(self, event: Any) -> None:
        """Project one event; a repeat of a recorded one does nothing (R4)."""
        handler = _HANDLERS.get(type(event))
        if handler is None or not self._once.first(event):
            return
        handler(self, event)

    # -- turns -----------------------------------------------------------------

    def _open_turn(self, ev: Any, attributes: dict[str, Any]) -> None:
        self._turns[ev.session_id] = self._tracer.start_span(
            f"invoke_agent {self.agent_name}",
            start_time=ev.timestamp * _NS,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.conversation.id": ev.session_id,
                "helmlog.session_id": ev.session_id,
                "helmlog.replayed": bool(ev.replayed),
                **attributes,
            },
        )

    def _child(self, session_id: str) -> Any:
        parent = self._turns.get(session_id)
        return trace.set_span_in_context(parent) if parent is not None else None

    def _turn_started(self, ev: TurnStarted) -> None:
        self._open_turn(ev, {"helmlog.turn": ev.turn})

    def _end_turn(self, ev: Any, *, error: str | None = None) -> None:
        end = ev.timestamp * _NS
        chat = self._chats.pop(ev.session_id, None)
        if chat is not None:
            chat.end(end_time=end)
        for key in [k for k in self._tools if k[0] == ev.session_id]:
            self._tools.pop(key).end(end_time=end)
        span = self._turns.pop(ev.session_id, None)
        if span is None:
            return
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)

    def _turn_ended(self, ev: TurnEnded) -> None:
        span = self._turns.get(ev.session_id)
        if span is not None and self.values:
            span.set_attribute("helmlog.final_content", ev.final_content)
        self._end_turn(ev)

    def _fatal(self, ev: FatalError) -> None:
        self._end_turn(ev, error=ev.code)

    def _pause_requested(self, ev: PauseRequested) -> None:
        span = self._turns.get(ev.session_id)
        if span is not None:
            span.add_event(
                "helmlog.pause",
                {"kind": ev.kind, "tool_call_id": ev.tool_call_id},
                timestamp=ev.timestamp * _NS,
            )
        # A paused turn's span ends at the pause; the resume opens no new turn,
        # so spans after it are parented to a fresh span for the session.
        self._end_turn(ev)

    def _pause_resumed(self, ev: PauseResumed) -> None:
        if ev.session_id not in self._turns:
            self._open_turn(ev, {"helmlog.resumed": True})

    # -- model calls -------------------------------------------------------------

    def _llm_started(self, ev: LlmStarted) -> None:
        stale = self._chats.pop(ev.session_id, None)
        if stale is not None:  # a call the record never saw return
            stale.end(end_time=ev.timestamp * _NS)
        self._chats[ev.session_id] = self._tracer.start_span(
            f"chat {ev.model}",
            context=self._child(ev.session_id),
            kind=trace.SpanKind.CLIENT,
            start_time=ev.timestamp * _NS,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": ev.model,
                "gen_ai.conversation.id": ev.session_id,
                "helmlog.iteration": ev.iteration,
            },
        )

    def _llm_ended(self, ev: LlmEnded) -> None:
        span = self._chats.pop(ev.session_id, None)
        if span is None:
            return
        tokens_in = _usage(ev.usage, _INPUT_KEYS)
        tokens_out = _usage(ev.usage, _OUTPUT_KEYS)
        if tokens_in is not None:
            span.set_attribute("gen_ai.usage.input_tokens", tokens_in)
        if tokens_out is not None:
            span.set_attribute("gen_ai.usage.output_tokens", tokens_out)
        if ev.stop_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [ev.stop_reason])
        span.set_attribute("helmlog.tool_call_count", ev.tool_call_count)
        if self.values and not ev.content_withheld:
            span.set_attribute("helmlog.content", ev.content)
        span.end(end_time=ev.timestamp * _NS)

    # -- tools -----------------------------------------------------------------

    def _tool_started(self, ev: ToolStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": ev.tool_name,
            "gen_ai.tool.call.id": ev.tool_call_id,
            "helmlog.iteration": ev.iteration,
        }
        if self.values:
            attributes["gen_ai.tool.call.arguments"] = _text(ev.args)
        span = self._tracer.start_span(
            f"execute_tool {ev.tool_name}",
            context=self._child(ev.session_id),
            kind=trace.SpanKind.INTERNAL,
            start_time=ev.timestamp * _NS,
            attributes=attributes,
        )
        self._tools[(ev.session_id, ev.tool_call_id)] = span

    def _tool_ended(self, ev: ToolEnded) -> None:
        span = self._tools.pop((ev.session_id, ev.tool_call_id), None)
        if span is None:
            return
        if self.values:
            span.set_attribute("gen_ai.tool.call.result", _text(ev.result))
        if ev.error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, "the tool raised"))
        span.end(end_time=ev.timestamp * _NS)

    # -- facts -------------------------------------------------------------------

    def _decision(self, ev: MiddlewareDecisionEvent) -> None:
        attributes: dict[str, Any] = {
            "helmlog.session_id": ev.session_id,
            "helmlog.seq": ev.seq if ev.seq is not None else -1,
            "helmlog.middleware": ev.middleware,
            "helmlog.moment": ev.moment,
            "helmlog.at": ev.at,
            "helmlog.iteration": ev.iteration,
            "helmlog.outcome": ev.outcome,
            "helmlog.changed": ev.changed,
            "helmlog.replayed": bool(ev.replayed),
        }
        for name in ("phase", "tool_name", "tool_call_id", "why", "component_id"):
            value = getattr(ev, name)
            if value is not None:
                attributes[f"helmlog.{name}"] = value
        parent = self._tools.get(
            (ev.session_id, ev.tool_call_id or "")
        ) or self._turns.get(ev.session_id)
        self._logger.emit(
            timestamp=ev.timestamp * _NS,
            context=trace.set_span_in_context(parent) if parent is not None else None,
            event_name="helmlog.middleware.decision",
            body=f"{ev.middleware} {ev.outcome} at {ev.moment}",
            attributes=attributes,
        )


# Invariant: one handler per event class the sink projects; an event of any
# other class (a token, an unknown type, a row) passes through untouched.
_HANDLERS: dict[type[Any], Callable[[OtelSink, Any], None]] = {
    TurnStarted: OtelSink._turn_started,
    TurnEnded: OtelSink._turn_ended,
    FatalError: OtelSink._fatal,
    PauseRequested: OtelSink._pause_requested,
    PauseResumed: OtelSink._pause_resumed,
    LlmStarted: OtelSink._llm_started,
    LlmEnded: OtelSink._llm_ended,
    ToolStarted: OtelSink._tool_started,
    ToolEnded: OtelSink._tool_ended,
    MiddlewareDecisionEvent: OtelSink._decision,
}
