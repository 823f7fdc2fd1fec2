"""OpenTelemetry sink: spans per turn and per tool call, a log record per fact.

Pattern: a projection of the record onto OTel's data model, fed live as a
         watcher or after the fact through ``replay``.
Role:    sinks layer; ``.watch(OtelSink(...))`` or ``helmlog replay --otlp``.
Emits:   spans ``invoke_agent`` (one per turn) and ``execute_tool <tool_name>``
         (one per tool call, a child of its turn), and one log record named
         ``helmlog.middleware.decision`` per decision fact.

Laws: R16 (no argument, result or content attribute unless ``values=True``),
R4 (idempotent by ``(session_id, seq)``), R6 (a replayed run yields the same
spans as a watched one, timed by the recorded timestamps).

Why spans are timed from event timestamps, not from when the sink sees them:
replaying last week's session must produce last week's spans.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, get_logger_provider
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from ._once import SeenOnce

_NS = 1_000_000  # event timestamps are milliseconds; OTel wants nanoseconds


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class OtelSink:
    """Turn a session's events into OTel spans and decision log records.

    Args:
        tracer_provider: where spans go (the global provider when ``None``).
        logger_provider: where decision records go (the global one when ``None``).
        values: also attach arguments, results and content (off by default:
            the facts channel never carries values unless configured to).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        values: bool = False,
    ) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("helmlog")
        self._logger = (logger_provider or get_logger_provider()).get_logger("helmlog")
        self.values = values
        self._once = SeenOnce()
        self._turns: dict[str, Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    def on_event(self, event: Any) -> None:
        if not self._once.first(event):
            return
        handler = getattr(self, "_on_" + event.type.replace(".", "_"), None)
        if handler is not None:
            handler(event)

    # -- turns -----------------------------------------------------------------

    def _on_agent_turn_start(self, ev: Any) -> None:
        span = self._tracer.start_span(
            "invoke_agent",
            start_time=ev.timestamp * _NS,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "helmlog.session_id": ev.session_id,
                "helmlog.turn": ev.turn,
                "helmlog.replayed": bool(ev.replayed),
            },
        )
        self._turns[ev.session_id] = span

    def _end_turn(self, ev: Any, *, error: str | None = None) -> None:
        span = self._turns.pop(ev.session_id, None)
        if span is None:
            return
        for key in [k for k in self._tools if k[0] == ev.session_id]:
            self._tools.pop(key).end(end_time=ev.timestamp * _NS)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=ev.timestamp * _NS)

    def _on_agent_turn_end(self, ev: Any) -> None:
        span = self._turns.get(ev.session_id)
        if span is not None and self.values:
            span.set_attribute("helmlog.final_content", ev.final_content)
        self._end_turn(ev)

    def _on_error_fatal(self, ev: Any) -> None:
        self._end_turn(ev, error=ev.code)

    def _on_pause_request(self, ev: Any) -> None:
        span = self._turns.get(ev.session_id)
        if span is not None:
            span.add_event(
                "helmlog.pause",
                {"kind": ev.kind, "tool_call_id": ev.tool_call_id},
                timestamp=ev.timestamp * _NS,
            )
        # A paused turn's span ends at the pause; the resume opens no new turn,
        # so tool spans after it are parented to a fresh span for the session.
        self._end_turn(ev)

    def _on_pause_resume(self, ev: Any) -> None:
        if ev.session_id not in self._turns:
            self._turns[ev.session_id] = self._tracer.start_span(
                "invoke_agent",
                start_time=ev.timestamp * _NS,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "helmlog.session_id": ev.session_id,
                    "helmlog.resumed": True,
                },
            )

    # -- tools -----------------------------------------------------------------

    def _on_stream_tool_start(self, ev: Any) -> None:
        parent = self._turns.get(ev.session_id)
        context = trace.set_span_in_context(parent) if parent is not None else None
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
            context=context,
            start_time=ev.timestamp * _NS,
            attributes=attributes,
        )
        self._tools[(ev.session_id, ev.tool_call_id)] = span

    def _on_stream_tool_end(self, ev: Any) -> None:
        span = self._tools.pop((ev.session_id, ev.tool_call_id), None)
        if span is None:
            return
        if self.values:
            span.set_attribute("gen_ai.tool.call.result", _text(ev.result))
        if ev.error:
            span.set_status(Status(StatusCode.ERROR, "the tool raised"))
        span.end(end_time=ev.timestamp * _NS)

    # -- facts -------------------------------------------------------------------

    def _on_middleware_decision(self, ev: Any) -> None:
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
