"""Finished telemetry: spans and log records built once, as the SDK exports them.

Pattern: an OpenTelemetry ``TracerProvider`` and ``LoggerProvider`` whose
         spans are built at their end as ``ReadableSpan`` and records as
         ``ReadableLogRecord``, handed to an ``ExportQueue`` that batches them
         to the SDK's exporters on a thread of its own.
Role:    sinks layer; ``OtelProcess``'s child projects through it.

Laws: R6 (the same spans and records an ``OtelSink`` on the SDK's providers
makes), R16 (an export failure is the exporters' to keep).
Why not the SDK's providers: their live spans run the sampler and validate
attributes two or three times; a recorded event's times and typed attributes
need none of it, and it was most of a turn's telemetry cost. Left out on
purpose: samplers (parent-based always-on), ``on_start``, attribute limits.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import Logger, LoggerProvider, LogRecord
from opentelemetry.context import Context
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util.types import Attributes

MAX_BATCH = 512  # the SDK batch processors' default export batch
MAX_QUEUE = 2048  # and their default queue: past it, what is put is dropped
SCHEDULE_S = 1.0  # at the latest, what is queued is sent this often
_SAMPLED = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_UNSET = Status(StatusCode.UNSET)


class ExportQueue:
    """Finished spans and records, exported in batches on one thread.

    ``put_span``/``put_record`` never block on the network; ``flush`` waits
    until what was put before it was handed to the exporters, ``shutdown``
    flushes, stops the thread and shuts the exporters down. Each queue holds
    at most ``max_queue`` items, as the SDK's batch processors do: while a
    collector is slow or down, what does not fit is dropped and counted
    (``take_dropped``), so a long outage costs no memory.

    Why deques and no lock on ``put``: a deque's ``append`` and ``popleft``
    are each atomic, so the producing thread (the run's, a turn's 8 objects)
    takes no lock and the export thread pops what it sends; the condition is
    only touched to wake the thread at a full batch and to hand ``flush`` its
    answer. ``flush`` waits until the queue is empty and no batch is in
    flight, so a producer that never pauses could hold it up; the thread
    drains a batch far faster than a run fills one.
    """

    def __init__(
        self,
        spans: SpanExporter,
        records: LogRecordExporter,
        *,
        max_batch: int = MAX_BATCH,
        max_queue: int = MAX_QUEUE,
        schedule_s: float = SCHEDULE_S,
    ) -> None:
        self._span_exporter = spans
        self._record_exporter = records
        self._max_batch = max_batch
        self._max_queue = max_queue
        self._dropped = 0  # put while the queue was full (the producer's count)
        self._schedule_s = schedule_s
        self._spans: deque[ReadableSpan] = deque()
        self._records: deque[ReadableLogRecord] = deque()
        self._wake = threading.Condition()
        self._busy = False  # a batch taken and not yet handed over
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, name="helmlog-export", daemon=True
        )
        self._thread.start()

    def put_span(self, span: ReadableSpan) -> None:
        spans = self._spans
        if len(spans) >= self._max_queue:
            self._dropped += 1
            return
        spans.append(span)
        if len(spans) == self._max_batch:
            with self._wake:
                self._wake.notify_all()

    def put_record(self, record: ReadableLogRecord) -> None:
        records = self._records
        if len(records) >= self._max_queue:
            self._dropped += 1
            return
        records.append(record)
        if len(records) == self._max_batch:
            with self._wake:
                self._wake.notify_all()

    def take_dropped(self) -> int:
        """Spans and records dropped (the queue was full) since the last call.

        Call it from the producing thread, which alone counts drops.
        """
        dropped, self._dropped = self._dropped, 0
        return dropped

    def _idle(self) -> bool:
        return not (self._spans or self._records or self._busy)

    def _run(self) -> None:
        while True:
            with self._wake:
                if not (self._spans or self._records or self._stopped):
                    self._wake.wait(self._schedule_s)
                if self._stopped and not (self._spans or self._records):
                    self._wake.notify_all()
                    return
                self._busy = True
                spans = _take(self._spans, self._max_batch)
                records = _take(self._records, self._max_batch)
            # The exporters keep their own failures (OtlpExport's watched
            # exporters, R16); a batch is sent once either way.
            try:
                if spans:
                    self._span_exporter.export(spans)
                if records:
                    self._record_exporter.export(records)
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until what was put so far is exported; ``False`` on a timeout."""
        with self._wake:
            self._wake.notify_all()
            return self._wake.wait_for(
                lambda: self._idle() or not self._thread.is_alive(), timeout_s
            )

    def shutdown(self) -> None:
        """Export what is queued, stop the thread, shut the exporters down."""
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        self._thread.join()
        self._span_exporter.shutdown()
        self._record_exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK is untyped here


def _take(queue: deque[Any], most: int) -> list[Any]:
    """Up to ``most`` items from the left of ``queue``."""
    taken = []
    popleft = queue.popleft
    for _ in range(min(most, len(queue))):
        taken.append(popleft())
    return taken


class FinishedSpan(trace.Span):
    """A span that is data until it ends, then one ``ReadableSpan`` queued."""

    __slots__ = (
        "_attributes",
        "_context",
        "_ended",
        "_events",
        "_kind",
        "_name",
        "_parent",
        "_start",
        "_status",
        "_tracer",
    )

    def __init__(
        self,
        tracer: FinishedTracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        start: int | None,
        attributes: Attributes,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._start = start
        self._attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self._events: list[Event] = []
        self._status = _UNSET  # immutable: set_status replaces it
        self._ended = False

    def get_span_context(self) -> SpanContext:
        return self._context

    def set_attributes(self, attributes: dict[str, Any]) -> None:  # type: ignore[override]
        self._attributes.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self._attributes[key] = value

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        self._events.append(Event(name, attributes, timestamp))

    def update_name(self, name: str) -> None:
        self._name = name

    def is_recording(self) -> bool:
        return not self._ended

    def set_status(
        self, status: Status | StatusCode, description: str | None = None
    ) -> None:
        if isinstance(status, StatusCode):
            status = Status(status, description)
        # As the SDK: OK is final, and UNSET never overrides a status.
        if self._status.status_code is not StatusCode.OK and (
            status.status_code is not StatusCode.UNSET
        ):
            self._status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.add_event(
            "exception",
            {
                "exception.type": type(exception).__name__,
                "exception.message": str(exception),
                "exception.escaped": escaped,
                **(attributes or {}),
            },
            timestamp,
        )

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        tracer = self._tracer
        tracer.queue.put_span(
            ReadableSpan(
                name=self._name,
                context=self._context,
                parent=self._parent,
                resource=tracer.resource,
                attributes=self._attributes,
                events=tuple(self._events),
                kind=self._kind,
                status=self._status,
                start_time=self._start,
                end_time=end_time,
                instrumentation_scope=tracer.scope,
            )
        )


class FinishedTracer(trace.Tracer):
    """Starts ``FinishedSpan``s: ids and sampling as the SDK's default tracer."""

    def __init__(
        self, queue: ExportQueue, resource: Resource, scope: InstrumentationScope
    ) -> None:
        self.queue = queue
        self.resource = resource
        self.scope = scope
        self.id_generator: IdGenerator = RandomIdGenerator()  # ``_ids.py`` primes it

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.id_generator.generate_trace_id()
            flags, state = _SAMPLED, None
        else:
            trace_id = parent.trace_id
            flags, state = parent.trace_flags, parent.trace_state
            if not flags.sampled:  # ParentBased: an unsampled parent records nothing
                return NonRecordingSpan(
                    SpanContext(
                        trace_id,
                        self.id_generator.generate_span_id(),
                        is_remote=False,
                        trace_flags=TraceFlags(TraceFlags.DEFAULT),
                        trace_state=state,
                    )
                )
            flags = TraceFlags(
                TraceFlags.SAMPLED | (flags & TraceFlags.RANDOM_TRACE_ID)
            )
        span_context = SpanContext(
            trace_id,
            self.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=state,
        )
        return FinishedSpan(
            self, name, span_context, parent, kind, start_time, attributes
        )

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(span, end_on_exit=end_on_exit) as current:
            yield current


class FinishedLogger(Logger):
    """Queues each record as the ``ReadableLogRecord`` the SDK would export."""

    def __init__(
        self, queue: ExportQueue, resource: Resource, scope: InstrumentationScope
    ) -> None:
        super().__init__(scope.name, scope.version, scope.schema_url)
        self._queue = queue
        self._resource = resource
        self._scope = scope

    def emit(self, record: LogRecord | None = None, **fields: Any) -> None:
        if record is None:
            record = LogRecord(**fields)
        self._queue.put_record(
            ReadableLogRecord(
                log_record=record,
                resource=self._resource,
                instrumentation_scope=self._scope,
            )
        )

    def enabled(self, **_: Any) -> bool:
        return True


class FinishedTelemetry(trace.TracerProvider, LoggerProvider):
    """Tracer and logger provider over one ``ExportQueue`` (pass it as both of
    an ``OtelSink``'s providers); ``flush``/``shutdown`` as the queue's."""

    def __init__(
        self,
        spans: SpanExporter,
        records: LogRecordExporter,
        *,
        resource: Resource | None = None,
    ) -> None:
        self.queue = ExportQueue(spans, records)
        self.resource = resource if resource is not None else Resource.create()

    def _scope(
        self, name: str, version: str | None, schema_url: str | None
    ) -> InstrumentationScope:
        return InstrumentationScope(name, version, schema_url)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> FinishedTracer:
        scope = self._scope(
            instrumenting_module_name, instrumenting_library_version, schema_url
        )
        return FinishedTracer(self.queue, self.resource, scope)

    def get_logger(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> FinishedLogger:
        return FinishedLogger(
            self.queue, self.resource, self._scope(name, version, schema_url)
        )

    def flush(self, timeout_s: float | None = None) -> bool:
        return self.queue.flush(timeout_s)

    def shutdown(self) -> None:
        self.queue.shutdown()
