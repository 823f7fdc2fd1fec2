"""Span ids a sink names itself: the root ``invoke_agent`` of a minted trace.

Pattern: a decorator of the tracer's own ``IdGenerator``: ``prime`` hands it
         the next trace and span id, which the next span started on this
         thread takes; otherwise it asks the generator it wraps.
Role:    sinks layer; ``OtelSink`` primes it before it starts the span of a
         turn whose context the runtime minted (or derived from the record).

Laws: issue 26 item 6 (one root per trace), R6 (a replay names the same ids).
Why prime ids: a minted ``traceparent``'s parent id names the turn's own span,
which no caller emits; the span that takes those ids is the trace's root, and
the work after a pause, parented on the recorded context, is its child. The
OTel API has no per-span id, so the tracer's generator (``id_generator``, an
attribute of the SDK's tracer and of ``FinishedTracer``) is wrapped once.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.trace.id_generator import IdGenerator


class PrimedIds(IdGenerator):
    """The wrapped generator's ids, unless ``prime`` named the next ones.

    Primed ids are per thread: two sinks sharing one tracer (the SDK caches a
    tracer per scope) on two threads never take each other's.
    """

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner
        self._next = threading.local()

    def prime(self, trace_id: int, span_id: int) -> None:
        """The next root span started on this thread takes these ids."""
        self._next.trace_id = trace_id
        self._next.span_id = span_id

    def generate_trace_id(self) -> int:
        trace_id: int = getattr(self._next, "trace_id", 0)
        if trace_id:
            self._next.trace_id = 0
            return trace_id
        return self.inner.generate_trace_id()

    def generate_span_id(self) -> int:
        span_id: int = getattr(self._next, "span_id", 0)
        if span_id:
            self._next.span_id = 0
            return span_id
        return self.inner.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return self.inner.is_trace_id_random()


def primed_ids(tracer: Any) -> PrimedIds | None:
    """The tracer's generator, wrapped once for priming; ``None`` for a
    tracer with no ``id_generator`` (its turns keep their recorded parent)."""
    inner = getattr(tracer, "id_generator", None)
    if isinstance(inner, PrimedIds):
        return inner
    if not isinstance(inner, IdGenerator):
        return None
    ids = PrimedIds(inner)
    tracer.id_generator = ids
    return ids
