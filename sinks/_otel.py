"""OpenTelemetry sink: GenAI spans per turn, model call and tool call; facts as logs.

Pattern: a projection of the record onto OTel's GenAI semantic conventions
         (v1.41, ``docs/design.md``), fed live as a (deferred) watcher or
         through ``replay``; one typed dispatch table keyed by event class.
Role:    sinks layer; ``.watch(OtelSink(...))``, ``otlp_sink()``,
         ``helmlog replay --otlp``.

Laws: R4 (idempotent by ``(session_id, seq)``), R6, R16 (no values unless
``values=True``), issue 8 item 8 (spans parented on the recorded context),
issue 26 item 6 (one root per trace, refusals are errors, every record traced).

Why deferred by default: the SDK is pure CPU; queued, it overlaps the run's
store and model waits (``bench/sinks.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, LogRecord, get_logger_provider
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from helmlog.events import (
    DecisionFiled,
    FatalError,
    LlmEnded,
    LlmStarted,
    MiddlewareDecisionEvent,
    PauseRequested,
    PauseResumed,
    SessionImported,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)

from ._ids import primed_ids
from ._once import SeenOnce
from ._open_turn import OpenTurn
from ._trace_context import derived_traceparent, own_ids, recorded_context

_NS = 1_000_000  # event timestamps are milliseconds; OTel wants nanoseconds

DEFAULT_AGENT_NAME = "helmlog"
# ``gen_ai.provider.name`` is required on every GenAI span; a stream recorded
# before providers were named (or a continuation seen before its first model
# call, on a host that missed the turn's start) has none to give.
UNKNOWN_PROVIDER = "unknown"
# ``error.type`` of a tool call that did not run as asked (low cardinality,
# as the conventions ask; the rule's reason is the status description).
DENIED = "denied"  # a rule refused it before it ran (before-tool)
RESULT_DENIED = "result_denied"  # it ran; a rule refused its result
DECLINED = "declined"  # a person declined the ask that paused it
TOOL_ERROR = "tool_error"  # the tool raised
_REFUSED_AT = {"before-tool": DENIED, "after-tool": RESULT_DENIED}
_ROOT = Context()  # an empty context: a span started in it is a root

# Providers report usage under their own names; the record keeps
# ``input_tokens``/``output_tokens`` (runtime/providers), older or third-party
# providers may have written the chat-completions names.
_INPUT_KEYS = ("input_tokens", "prompt_tokens")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens")
# Each optional decision field and its attribute name, joined once.
_OPTIONAL_FACT_FIELDS = tuple(
    (name, "helmlog." + name)
    for name in ("phase", "tool_name", "tool_call_id", "why", "component_id")
)

_CLIENT = trace.SpanKind.CLIENT
_INTERNAL = trace.SpanKind.INTERNAL


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
        deferred: as a watcher, be delivered off the run's path (G84: in
            order, while the run waits on its store or model; ``agent.idle()``
            waits for it). ``False`` projects each event inside the run.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        values: bool = False,
        agent_name: str = DEFAULT_AGENT_NAME,
        *,
        deferred: bool = True,
    ) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("helmlog")
        self._logger = (logger_provider or get_logger_provider()).get_logger("helmlog")
        self.values = values
        self.agent_name = agent_name
        self.deferred = deferred
        self.readonly = True  # it only reads what it is handed: no copies (G84)
        self._turn_name = f"invoke_agent {agent_name}"
        self._once = SeenOnce()
        self._open: dict[str, OpenTurn] = {}
        # The ids a minted trace's root takes (``None``: a tracer that cannot
        # be told, whose turns keep their recorded parent, as before).
        self._ids = primed_ids(self._tracer)
        # Facts filed before their turn opens (the input walk precedes
        # ``agent.turn_start``): held until it does, or until the run ends.
        self._waiting: dict[str, list[tuple[Any, Any]]] = {}
        # The provider this sink last saw named: a refused input opens no
        # turn, and ``error.fatal`` names none (G91 pins its fields); a sink
        # watches one agent, so that is its best knowledge (semconv).
        self._last_provider = ""

    def on_event(self, event: Any) -> None:
        """Project one event; a repeat of a recorded one does nothing (R4)."""
        handler = _HANDLERS.get(type(event))
        if handler is None or not self._once.first(event):
            return
        handler(self, event)

    def release(self) -> None:
        """Emit the facts held for a turn that never opened, untraced (a
        stream cut after an input walk; ``OtlpFactsSink`` after each fact),
        and end the spans of served calls still open, at their last event."""
        waiting, self._waiting = self._waiting, {}
        for facts in waiting.values():
            for ev, row in facts:
                self._emit(ev, row, None)
        for held in self._open.values():
            if held.served:
                held.settle()

    def on_recorded(self, session_id: str, events: list[Any]) -> None:
        """Project one append's events as stored (``OtelProcess``'s child):
        a filed row as the fact it stands for (R4, ``fact_of``) without
        building the fact; a repeat does nothing (R4), checked per append."""
        handlers = _RECORDED_HANDLERS
        for event in self._once.fresh(session_id, events):
            handler = handlers.get(type(event))
            if handler is not None:
                handler(self, event)

    # -- turns -----------------------------------------------------------------

    def _turn_attributes(
        self, ev: Any, extra: dict[str, Any], provider: str
    ) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider or UNKNOWN_PROVIDER,
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.conversation.id": ev.session_id,
            "helmlog.session_id": ev.session_id,
            "helmlog.replayed": bool(ev.replayed),
            **extra,
        }

    def _start(self, held: OpenTurn, start: int, attributes: dict[str, Any]) -> None:
        context = held.parent
        if held.root is not None and self._ids is not None:
            # The recorded context names this span: it takes those ids, a root.
            self._ids.prime(*held.root)
            held.root = None
            context = _ROOT
        span = self._tracer.start_span(
            self._turn_name,
            context=context,
            start_time=start,
            attributes=attributes,
        )
        held.span = span
        held.span_context = trace.set_span_in_context(span)

    def _held(self, session_id: str) -> OpenTurn:
        """The session's open turn, its due continuation span opened."""
        held = self._open.get(session_id)
        if held is None:  # a turn this sink never saw open: spans go unparented
            held = self._open[session_id] = OpenTurn(None, None)
        elif held.due is not None:
            start, attributes = held.due
            held.due = None
            self._start(held, start, attributes)
        return held

    def _turn_started(self, ev: TurnStarted) -> None:
        stale = self._open.get(ev.session_id)
        if stale is not None:  # a turn the record never saw end
            stale.close(ev.timestamp * _NS)
        traceparent = ev.traceparent or derived_traceparent(
            ev.session_id, f"turn {ev.turn}"
        )
        if ev.provider:
            self._last_provider = ev.provider
        held = OpenTurn(
            recorded_context(traceparent, ev.tracestate), ev.turn, ev.provider
        )
        if ev.trace_minted or not ev.traceparent:
            held.root = own_ids(traceparent)
        self._open[ev.session_id] = held
        attributes = self._turn_attributes(ev, {"helmlog.turn": ev.turn}, ev.provider)
        waiting = self._waiting.pop(ev.session_id, None)
        start = ev.timestamp * _NS
        if waiting:  # the input walk belongs to the turn it opened
            start = min(start, waiting[0][0].timestamp * _NS)
        self._start(held, start, attributes)
        if waiting:
            for fact, row in waiting:
                self._emit(fact, row, held.span_context)

    def _imported(self, ev: SessionImported) -> None:
        """A session seeded from a checkpoint: when the runtime minted its
        context, the continuation that follows is the trace's root."""
        if not (ev.trace_minted and ev.traceparent):
            return
        held = OpenTurn(recorded_context(ev.traceparent, ev.tracestate), None)
        held.root = own_ids(ev.traceparent)
        self._open[ev.session_id] = held

    def _continued(
        self, ev: PauseResumed | ToolOutcomeUnknown, flag: str
    ) -> OpenTurn | None:
        """The continuation of a turn whose span is not open here, or ``None``
        when it is (the work goes on in it)."""
        held = self._open.get(ev.session_id)
        if held is not None and (held.span is not None or held.due is not None):
            return None
        if held is not None and held.turnless() and not ev.traceparent:
            return None  # a served call's pause (no turn, no context): no turn
        turn = held.turn if held is not None else None
        provider = getattr(ev, "provider", "") or (held.provider if held else "")
        root: tuple[int, int] | None = None
        if ev.traceparent:
            parent = recorded_context(ev.traceparent, ev.tracestate)
            if held is not None and held.root is not None:
                # An imported session's minted context: this span is its root.
                root = own_ids(ev.traceparent)
                root = root if root == held.root else None
        elif held is not None and held.parent is not None:
            parent = held.parent  # an older stream: the turn's, as seen here
        else:  # nothing recorded, nothing seen: derived from the record
            place = f"seq {ev.seq if ev.seq is not None else -1}"
            traceparent = derived_traceparent(ev.session_id, place)
            parent = recorded_context(traceparent)
            root = own_ids(traceparent)
        held = self._open[ev.session_id] = OpenTurn(parent, turn, provider)
        held.root = root
        extra: dict[str, Any] = {flag: True}
        if turn is not None:
            extra["helmlog.turn"] = turn
        held.due = (ev.timestamp * _NS, self._turn_attributes(ev, extra, provider))
        return held

    def _pause_resumed(self, ev: PauseResumed) -> None:
        if self._continued(ev, "helmlog.resumed") is not None:
            self._held(ev.session_id)  # a resume always leads to work: open it
        if ev.approved is False:  # the call's span ended at the pause
            held = self._held(ev.session_id)
            held.refused[ev.tool_call_id] = (DECLINED, "", "a person declined")

    def _outcome_unknown(self, ev: ToolOutcomeUnknown) -> None:
        self._continued(ev, "helmlog.recovered")

    def _turn_ended(self, ev: TurnEnded) -> None:
        held = self._open.pop(ev.session_id, None)
        if held is None:
            return
        if held.span is not None and self.values:
            held.span.set_attribute("helmlog.final_content", ev.final_content)
        held.close(ev.timestamp * _NS)

    def _fatal(self, ev: FatalError) -> None:
        held = self._open.pop(ev.session_id, None)
        if held is not None:
            held.close(ev.timestamp * _NS, error=ev.code)
        waiting = self._waiting.pop(ev.session_id, None)
        if waiting:
            # A refused input opened no turn: its walk is an invoke_agent of
            # its own that ended in the error, the root of a derived trace.
            first = waiting[0][0]
            seq = first.seq if first.seq is not None else -1
            traceparent = derived_traceparent(ev.session_id, f"seq {seq}")
            refused = OpenTurn(recorded_context(traceparent), None)
            refused.root = own_ids(traceparent)
            self._start(
                refused,
                first.timestamp * _NS,
                self._turn_attributes(ev, {}, self._last_provider),
            )
            for fact, row in waiting:
                self._emit(fact, row, refused.span_context)
            refused.close(ev.timestamp * _NS, error=ev.code)

    def _pause_requested(self, ev: PauseRequested) -> None:
        held = self._open.get(ev.session_id)
        if held is None:
            return
        if held.span is not None:
            held.span.add_event(
                "helmlog.pause",
                {"kind": ev.kind, "tool_call_id": ev.tool_call_id},
                timestamp=ev.timestamp * _NS,
            )
        # A paused turn's span ends at the pause; the work after the resume
        # is a continuation, parented on what ``pause.resume`` records.
        held.close(ev.timestamp * _NS)

    # -- model calls -------------------------------------------------------------

    def _llm_started(self, ev: LlmStarted) -> None:
        held = self._held(ev.session_id)
        if held.chat is not None:  # a call the record never saw return
            held.chat.end(end_time=ev.timestamp * _NS)
        provider = ev.provider or held.provider
        if held.model != ev.model or held.provider != provider:
            self._name_turn(held, provider, ev.model, ev.output_type)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider or UNKNOWN_PROVIDER,
            "gen_ai.request.model": ev.model,
            "gen_ai.conversation.id": ev.session_id,
            "helmlog.iteration": ev.iteration,
        }
        if ev.output_type:  # conditionally required: the request named one
            attributes["gen_ai.output.type"] = ev.output_type
        if ev.stream:  # conditionally required: iff the request streamed
            attributes["gen_ai.request.stream"] = True
        held.chat = self._tracer.start_span(
            f"chat {ev.model}",
            context=held.span_context,
            kind=_CLIENT,
            start_time=ev.timestamp * _NS,
            attributes=attributes,
        )

    @staticmethod
    def _name_turn(held: OpenTurn, provider: str, model: str, output_type: str) -> None:
        """The turn's span learns its model and output type (and a provider
        it lacked) from its first model call: ``turn_start`` names neither
        model nor output type, and older streams no provider."""
        attributes: dict[str, Any] = {}
        if provider and provider != held.provider:
            held.provider = provider
            attributes["gen_ai.provider.name"] = provider
        if model and not held.model:
            held.model = model
            attributes["gen_ai.request.model"] = model
            if output_type:
                attributes["gen_ai.output.type"] = output_type
        if attributes and held.span is not None:
            held.span.set_attributes(attributes)

    def _llm_ended(self, ev: LlmEnded) -> None:
        held = self._open.get(ev.session_id)
        if held is None or held.chat is None:
            return
        span, held.chat = held.chat, None
        usage = ev.usage
        attributes: dict[str, Any] = {"helmlog.tool_call_count": ev.tool_call_count}
        if usage:
            tokens_in = _usage(usage, _INPUT_KEYS)
            if tokens_in is not None:
                attributes["gen_ai.usage.input_tokens"] = tokens_in
            tokens_out = _usage(usage, _OUTPUT_KEYS)
            if tokens_out is not None:
                attributes["gen_ai.usage.output_tokens"] = tokens_out
        if ev.stop_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (ev.stop_reason,)
        if ev.model:  # the model that answered; older streams lack it
            attributes["gen_ai.response.model"] = ev.model
        if self.values and not ev.content_withheld:
            attributes["helmlog.content"] = ev.content
        span.set_attributes(attributes)
        span.end(end_time=ev.timestamp * _NS)

    # -- tools -----------------------------------------------------------------

    def _tool_started(self, ev: ToolStarted) -> None:
        held = self._held(ev.session_id)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": held.provider or UNKNOWN_PROVIDER,
            "gen_ai.tool.name": ev.tool_name,
            "gen_ai.tool.call.id": ev.tool_call_id,
            "helmlog.iteration": ev.iteration,
        }
        if self.values:
            attributes["gen_ai.tool.call.arguments"] = _text(ev.args)
        held.tools[ev.tool_call_id] = self._tracer.start_span(
            f"execute_tool {ev.tool_name}",
            context=held.span_context,
            kind=_INTERNAL,
            start_time=ev.timestamp * _NS,
            attributes=attributes,
        )

    def _tool_dispatched(self, ev: ToolDispatched) -> None:
        held = self._held(ev.session_id)
        if held.turnless():  # a served call: its span may have opened
            self._served_call(held, ev, ev.tool_call_id, ev.tool_name)
            return
        if ev.tool_call_id in held.tools:
            return  # its span opened at ``stream.tool_start``
        # A call resumed (or re-run) here whose start another host saw: its
        # span covers the dispatch to the result.
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": held.provider or UNKNOWN_PROVIDER,
            "gen_ai.tool.name": ev.tool_name,
            "gen_ai.tool.call.id": ev.tool_call_id,
            "helmlog.attempt": ev.attempt,
        }
        if self.values:
            attributes["gen_ai.tool.call.arguments"] = _text(ev.args)
        held.tools[ev.tool_call_id] = self._tool_span(
            held, ev.tool_name, ev.timestamp, attributes
        )

    def _tool_span(
        self, held: OpenTurn, name: str, at: int, attributes: dict[str, Any]
    ) -> Span:
        return self._tracer.start_span(
            f"execute_tool {name}",
            context=held.span_context,
            kind=_INTERNAL,
            start_time=at * _NS,
            attributes=attributes,
        )

    def _tool_ended(self, ev: ToolEnded) -> None:
        held = self._open.get(ev.session_id)
        if held is None:
            return
        span = held.tools.pop(ev.tool_call_id, None)
        held.served.pop(ev.tool_call_id, None)
        refused = held.refused.pop(ev.tool_call_id, None) if held.refused else None
        if span is None:
            if refused is None or refused[0] != DECLINED:
                return
            # A declined call's span ended at its pause: the refusal it ends
            # in gets a span of its own, at the answer.
            span = self._tool_span(
                held,
                ev.tool_name,
                ev.timestamp,
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.provider.name": held.provider or UNKNOWN_PROVIDER,
                    "gen_ai.tool.name": ev.tool_name,
                    "gen_ai.tool.call.id": ev.tool_call_id,
                },
            )
        held.tool_contexts.pop(ev.tool_call_id, None)
        if self.values:
            span.set_attribute("gen_ai.tool.call.result", _text(ev.result))
        if refused is not None:
            _refuse(span, refused)
        elif ev.error:
            span.set_attributes({"error.type": TOOL_ERROR})
            span.set_status(Status(StatusCode.ERROR, "the tool raised"))
        span.end(end_time=ev.timestamp * _NS)

    # -- facts -------------------------------------------------------------------

    def _filed(self, ev: DecisionFiled) -> None:
        self._decision(ev, ev.row)

    def _decision(self, ev: Any, row: Any = None) -> None:
        """One log record for a decision: ``ev`` gives the envelope (session,
        seq, time), ``row`` the decision's fields: the fact itself when
        ``None``, else the filed row the fact projects (the same names,
        ``fact_for``)."""
        if row is None:
            row = ev
        attributes: dict[str, Any] = {
            "helmlog.session_id": ev.session_id,
            "helmlog.seq": ev.seq if ev.seq is not None else -1,
            "helmlog.middleware": row.middleware,
            "helmlog.moment": row.moment,
            "helmlog.at": row.at,
            "helmlog.iteration": row.iteration,
            "helmlog.outcome": row.outcome,
            "helmlog.changed": row.changed,
            "helmlog.replayed": bool(ev.replayed),
        }
        for name, key in _OPTIONAL_FACT_FIELDS:
            value = getattr(row, name)
            if value is not None:
                attributes[key] = value
        # G93: the honesty fields, names and origins only (never a value).
        if row.changed_keys is not None:
            attributes["helmlog.changed_keys"] = list(row.changed_keys)
        if row.from_:
            for arg, origin in row.from_.items():
                attributes["helmlog.from." + arg] = origin
        context: Context | None = None
        held = self._open.get(ev.session_id)
        if row.moment == "input" and (
            held is None or (held.span is None and held.due is None)
        ):  # filed before the turn it opens
            self._waiting.setdefault(ev.session_id, []).append((ev, attributes))
            return
        if held is not None and held.due is not None:
            held = self._held(ev.session_id)
        if row.tool_call_id is not None and (held is None or held.turnless()):
            if held is None:
                held = self._open[ev.session_id] = OpenTurn(None, None)
            call_id = row.tool_call_id
            context = self._served_call(held, ev, call_id, row.tool_name)
            if row.outcome == "deny" and row.moment in _REFUSED_AT:
                span = held.tools.get(call_id)
                _refuse(span, (_REFUSED_AT[row.moment], row.middleware, row.why or ""))
                if span is not None and row.moment == "before-tool":
                    del held.tools[call_id]  # it will not run: its span ends
                    held.served.pop(call_id, None)
                    span.end(end_time=ev.timestamp * _NS)
            self._emit(ev, attributes, context)
            return
        if held is not None:
            call_id = row.tool_call_id
            tool = held.tools.get(call_id) if call_id else None
            if tool is None or call_id is None:
                context = held.span_context
            else:
                assert call_id is not None
                if row.outcome == "deny" and row.moment in _REFUSED_AT:
                    held.refused[call_id] = (
                        _REFUSED_AT[row.moment],
                        row.middleware,
                        row.why or "",
                    )
                context = held.tool_contexts.get(call_id)
                if context is None:
                    context = trace.set_span_in_context(tool)
                    held.tool_contexts[call_id] = context
        self._emit(ev, attributes, context)

    def _served_call(
        self, held: OpenTurn, ev: Any, call_id: str, name: str | None
    ) -> Context:
        """The context of a call in a session no turn opened (``mcp_serve``
        records rows and a dispatch per call): an ``execute_tool`` span of
        its own, the root of a trace derived from the record, opened at the
        call's first event and ended, at its last, when another call of the
        session begins (or at ``release``)."""
        at = ev.timestamp * _NS
        context = held.tool_contexts.get(call_id)
        span = held.tools.get(call_id) if context is None else None
        if span is not None:  # opened at ``stream.tool_start`` (a mid-turn attach)
            context = held.tool_contexts[call_id] = trace.set_span_in_context(span)
        if context is None:  # the first event of this call
            held.settle(keep=call_id)
            place = f"call {call_id} seq {ev.seq if ev.seq is not None else -1}"
            traceparent = derived_traceparent(ev.session_id, place)
            ids = own_ids(traceparent)
            if ids is not None and self._ids is not None:
                self._ids.prime(*ids)
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name or "",
                "gen_ai.tool.call.id": call_id,
            }
            if held.provider:
                attributes["gen_ai.provider.name"] = held.provider
            span = self._tracer.start_span(
                f"execute_tool {name or ''}".rstrip(),
                context=_ROOT,
                kind=_INTERNAL,
                start_time=at,
                attributes=attributes,
            )
            held.tools[call_id] = span
            context = held.tool_contexts[call_id] = trace.set_span_in_context(span)
        if call_id in held.tools:
            held.served[call_id] = at
        return context

    def _emit(
        self, ev: Any, attributes: dict[str, Any], context: Context | None
    ) -> None:
        # A built record skips the SDK's keyword path (its exception
        # handling and a copy of the attributes): a quarter of an emit.
        self._logger.emit(
            LogRecord(
                timestamp=ev.timestamp * _NS,
                context=context,
                event_name="helmlog.middleware.decision",
                body=f"{attributes['helmlog.middleware']} "
                f"{attributes['helmlog.outcome']} at {attributes['helmlog.moment']}",
                attributes=attributes,
            )
        )


# Invariant: one handler per event class the sink projects; an event of any
# other class (a token, an unknown type, a row) passes through untouched.
_HANDLERS: dict[type[Any], Callable[[OtelSink, Any], None]] = {
    TurnStarted: OtelSink._turn_started,
    TurnEnded: OtelSink._turn_ended,
    FatalError: OtelSink._fatal,
    PauseRequested: OtelSink._pause_requested,
    PauseResumed: OtelSink._pause_resumed,
    ToolOutcomeUnknown: OtelSink._outcome_unknown,
    LlmStarted: OtelSink._llm_started,
    LlmEnded: OtelSink._llm_ended,
    ToolStarted: OtelSink._tool_started,
    ToolDispatched: OtelSink._tool_dispatched,
    ToolEnded: OtelSink._tool_ended,
    MiddlewareDecisionEvent: OtelSink._decision,
    SessionImported: OtelSink._imported,
}
# What ``on_recorded`` projects: the same, and a filed row as its fact.
_RECORDED_HANDLERS: dict[type[Any], Callable[[OtelSink, Any], None]] = {
    **_HANDLERS,
    DecisionFiled: OtelSink._filed,
}


def _refuse(span: Span | None, refused: tuple[str, str, str]) -> None:
    """Mark ``span`` as a call a rule refused (``error.type``, the rule, why)."""
    if span is None:
        return
    error_type, middleware, why = refused
    attributes: dict[str, Any] = {"error.type": error_type}
    if middleware:
        attributes["helmlog.refused_by"] = middleware
    span.set_attributes(attributes)
    span.set_status(Status(StatusCode.ERROR, why))
