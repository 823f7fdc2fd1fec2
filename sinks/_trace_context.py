"""The W3C trace context a recorded event names, read back as an OTel context.

Pattern: two pure functions over the record's ``traceparent``/``tracestate``
         strings: ``recorded_context`` reads one into an OTel ``Context`` (a
         remote, non-recording parent), ``derived_traceparent`` makes one
         from the record for a turn recorded without any.
Role:    sinks layer; ``OtelSink`` (``sinks/_otel.py``) parents each turn's
         ``invoke_agent`` span, and each continuation's, on what these give.
Emits:   nothing.

Laws: issue 8 item 8 (trace context travels in the events: a turn's spans go
under the context its ``agent.turn_start`` recorded, a continuation's under
the one ``pause.resume`` or ``tool.outcome_unknown`` recorded), R6 (a
replayed run lands in the same traces as a watched one).

Why streams without trace context still trace deterministically: a turn
recorded before contexts were (its ``traceparent`` empty) gets one derived
from the record, ``sha256("helmlog-trace", session id, turn)`` (a
continuation with nothing to continue: its own seq instead of the turn), so
each replay of it yields the same trace ids, one trace per turn.

Why the runtime's own contexts skip the propagator: what the runtime mints
(version ``00``, no ``tracestate``) is read by slicing the string, once per
turn; anything else — a caller's context with vendor state, a later version
— goes through OTel's ``TraceContextTextMapPropagator``, which knows the
rules.
"""

from __future__ import annotations

import hashlib
import re

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import (
    TraceContextTextMapPropagator,
)

_PROPAGATOR = TraceContextTextMapPropagator()
_PLAIN_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def recorded_context(traceparent: str, tracestate: str = "") -> Context:
    """The OTel context a recorded W3C trace context stands for."""
    if not tracestate and _PLAIN_TRACEPARENT.fullmatch(traceparent):
        # What the runtime mints (version 00, no state), read without the
        # propagator's general parse: once per turn.
        trace_id, span_id = int(traceparent[3:35], 16), int(traceparent[36:52], 16)
        if trace_id and span_id:
            return trace.set_span_in_context(
                NonRecordingSpan(
                    SpanContext(
                        trace_id,
                        span_id,
                        is_remote=True,
                        trace_flags=TraceFlags(int(traceparent[53:55], 16)),
                    )
                )
            )
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier)


def derived_traceparent(session_id: str, place: str) -> str:
    """The ``traceparent`` of a turn recorded without one: derived from the
    record, so every replay of it lands in the same trace."""
    digest = hashlib.sha256(f"helmlog-trace\0{session_id}\0{place}".encode())
    raw = digest.hexdigest()
    return f"00-{raw[:32]}-{raw[32:48]}-01"
