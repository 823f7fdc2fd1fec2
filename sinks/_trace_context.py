"""The W3C trace context a recorded event names, read back as an OTel context.

Pattern: pure functions: ``recorded_context`` reads the record's strings
         into an OTel ``Context`` (a remote parent), ``derived_traceparent``
         makes one from the record for a turn recorded without any, and
         ``own_ids`` reads a minted one's ids for the span that takes them.
Role:    sinks layer; ``OtelSink`` parents each turn's and continuation's
         ``invoke_agent`` span on what these give.

Laws: issue 8 item 8, R6 (a replay lands in the same traces).
Why a derived context: a turn recorded before contexts still traces
deterministically (``sha256("helmlog-trace", session id, turn)``). The
runtime's own ``00`` contexts are sliced; anything else goes through OTel's
``TraceContextTextMapPropagator``.
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


def own_ids(traceparent: str) -> tuple[int, int] | None:
    """The trace and parent id of a minted or derived ``traceparent`` (what
    the runtime and ``derived_traceparent`` write), for the span that takes
    them as its own; ``None`` for any other form."""
    if not _PLAIN_TRACEPARENT.fullmatch(traceparent):
        return None
    trace_id, span_id = int(traceparent[3:35], 16), int(traceparent[36:52], 16)
    return (trace_id, span_id) if trace_id and span_id else None
