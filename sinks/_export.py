"""Export a record to OTLP/HTTP or any sink, failing loudly: what a caller checks.

Pattern: providers wired to OTLP/HTTP exporters that are watched (the first
         failed batch is kept and ends the export), and a strict replay that
         stops at a sink's first failure and raises it, typed.
Role:    sinks layer; ``OtlpExport`` for live watching (``.watch(x.sink)``,
         configured from the standard ``OTEL_EXPORTER_OTLP_*`` variables) and
         for ``helmlog replay/demo --otlp``; ``export`` for ``--jsonl``/``--otlp``.
Emits:   through its sinks only; raises ``ExportError``.

Laws: R16 (a sink never drives the run it watches: ``OtlpExport`` only keeps
its failure, it raises where a caller asked, at ``flush``/``close``), R6
(``export`` delivers what ``replay`` does, marked replayed).

Why a failed batch ends the export: the OTLP client retries each batch up to
its timeout, so a collector that is down costs one timeout per batch; with
per-span batches an unreachable endpoint held ``helmlog replay`` for minutes
and then exited 0. Once one batch failed, the rest fail at once, and the
caller learns of it.

Why the base URL and the signal URL are both accepted: collectors document
``http://host:4318`` and exporters want ``http://host:4318/v1/traces``;
``otlp_endpoints`` maps either (or ``/v1/logs``) to both signal paths.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from helmlog.events import Event, HelmlogError, StoredEvent, UnknownEvent

from ._direct import FinishedTelemetry
from ._otel import DEFAULT_AGENT_NAME, OtelSink
from ._replay import replay

DEFAULT_TIMEOUT_S = 5.0
_SIGNAL_PATHS = ("/v1/traces", "/v1/logs")
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http"


class ExportError(HelmlogError):
    """An export did not reach its target (a collector, a file); retrying may help.

    Attributes:
        target: where the export was going (a URL or a path).
        reason: one line saying what failed.
    """

    code = "ERR_EXPORT"
    retryable = True

    def __init__(self, *, target: str, reason: str) -> None:
        self.target = target
        self.reason = reason
        super().__init__(f"export to {target} failed: {reason}")


def otlp_endpoints(url: str) -> tuple[str, str]:
    """The traces and logs URLs for a collector's base URL or either signal URL."""
    base = url.strip().rstrip("/")
    for path in _SIGNAL_PATHS:
        if base.endswith(path):
            base = base[: -len(path)]
            break
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"an OTLP/HTTP endpoint is an http(s) URL, not {url!r}")
    return f"{base}{_SIGNAL_PATHS[0]}", f"{base}{_SIGNAL_PATHS[1]}"


class _Failures(logging.Handler):
    """Keeps the OTLP client's last error line, the reason a batch failed, and
    the cause of its last retry (the client logs that as a warning)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None
        self.cause: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.last = record.getMessage()
        elif str(record.msg).startswith("Transient error") and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            self.cause = str(args[0])

    def reason(self) -> str:
        said = self.last or "the collector did not accept it"
        return f"{said} (last retry: {self.cause})" if self.cause else said


class _Outcome:
    """The first failed batch of one export, shared by its two exporters."""

    def __init__(self, failures: _Failures) -> None:
        self._lock = threading.Lock()
        self._failures = failures
        self.failure: str | None = None

    def failed(self, signal: str, error: BaseException | None = None) -> None:
        with self._lock:
            if self.failure is None:
                cause = (
                    f"{type(error).__name__}: {error}"
                    if error is not None
                    else self._failures.reason()
                )
                self.failure = f"{signal}: {cause}"


class _WatchedSpans(SpanExporter):
    def __init__(self, inner: SpanExporter, outcome: _Outcome) -> None:
        self._inner = inner
        self._outcome = outcome

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._outcome.failure is not None:
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # noqa: BLE001 — kept; flush/close raise it
            self._outcome.failed("spans", exc)
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._outcome.failed("spans")
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _WatchedLogs(LogRecordExporter):
    def __init__(self, inner: LogRecordExporter, outcome: _Outcome) -> None:
        self._inner = inner
        self._outcome = outcome

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        if self._outcome.failure is not None:
            return LogRecordExportResult.FAILURE
        try:
            result = self._inner.export(batch)
        except Exception as exc:  # noqa: BLE001 — kept; flush/close raise it
            self._outcome.failed("logs", exc)
            return LogRecordExportResult.FAILURE
        if result is not LogRecordExportResult.SUCCESS:
            self._outcome.failed("logs")
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK is untyped here

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class OtlpExport:
    """An ``OtelSink`` exporting to an OTLP/HTTP collector, in batches.

    Args:
        endpoint: the collector's base URL or a signal URL (``.../v1/traces``);
            ``None`` reads the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
            ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._LOGS_ENDPOINT``
            variables (default ``http://localhost:4318``), as do headers,
            compression and certificates always.
        timeout: seconds one batch may take, retries included; ``None`` reads
            ``OTEL_EXPORTER_OTLP_TIMEOUT``, else 5 s.
        values: passed to the sink (R16: off by default).
        agent_name: ``gen_ai.agent.name`` of the turn spans.
        service_name: the resource's ``service.name`` unless
            ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one.
        direct: build spans and records as finished export data on a
            ``FinishedTelemetry`` (``sinks/_direct.py``): the same export as
            the SDK's live providers and batch processors (``False``), at
            about half the CPU.

    Attach ``export.sink`` as a watcher, or replay into it; ``flush()`` and
    ``close()`` raise ``ExportError`` once a batch has failed. A failed export
    never reaches the run being watched.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float | None = None,
        values: bool = False,
        agent_name: str = DEFAULT_AGENT_NAME,
        service_name: str = "helmlog",
        direct: bool = True,
    ) -> None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (
            OTLPLogExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        traces: str | None = None
        logs: str | None = None
        if endpoint is not None:
            traces, logs = otlp_endpoints(endpoint)
        self.target = endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
        if timeout is None and not _env_timeout():
            timeout = DEFAULT_TIMEOUT_S
        self._failures = _Failures()
        logging.getLogger(_EXPORTER_LOGGER).addHandler(self._failures)
        self._outcome = _Outcome(self._failures)
        resource = Resource.create()  # the OTEL_* resource variables, defaults
        if str(resource.attributes.get("service.name", "")).startswith("unknown"):
            resource = resource.merge(Resource({"service.name": service_name}))
        span_exporter = _WatchedSpans(
            OTLPSpanExporter(endpoint=traces, timeout=timeout), self._outcome
        )
        log_exporter = _WatchedLogs(
            OTLPLogExporter(endpoint=logs, timeout=timeout), self._outcome
        )
        self._direct: FinishedTelemetry | None = None
        if direct:
            self._direct = FinishedTelemetry(
                span_exporter, log_exporter, resource=resource
            )
            self.tracer_provider: Any = self._direct
            self.logger_provider: Any = self._direct
        else:
            self.tracer_provider = TracerProvider(resource=resource)
            self.tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
            self.logger_provider = LoggerProvider(resource=resource)
            self.logger_provider.add_log_record_processor(
                BatchLogRecordProcessor(log_exporter)
            )
        self.sink = OtelSink(
            self.tracer_provider,
            self.logger_provider,
            values=values,
            agent_name=agent_name,
        )
        self._closed = False

    @property
    def failure(self) -> str | None:
        """What the first failed batch said, or ``None`` while all succeed."""
        return self._outcome.failure

    def _raise_if_failed(self) -> None:
        if self._outcome.failure is not None:
            raise ExportError(target=self.target, reason=self._outcome.failure)

    def flush(self) -> None:
        """Send what is queued; raise ``ExportError`` if any batch failed."""
        if self._direct is not None:
            self._direct.flush()
        else:
            self.tracer_provider.force_flush()
            self.logger_provider.force_flush()
        self._raise_if_failed()

    def close(self) -> None:
        """Send what is queued and stop; raise ``ExportError`` if any batch failed."""
        if not self._closed:
            self._closed = True
            try:
                if self._direct is not None:
                    self._direct.shutdown()
                else:
                    self.tracer_provider.shutdown()
                    self.logger_provider.shutdown()
            finally:
                logging.getLogger(_EXPORTER_LOGGER).removeHandler(self._failures)
        self._raise_if_failed()

    def __enter__(self) -> OtlpExport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _env_timeout() -> bool:
    import os

    return any(
        os.environ.get(name)
        for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
    )


class _FirstFailure:
    """Delivers to a sink until it raises; keeps that error and stops."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.error: Exception | None = None

    async def on_event(self, event: Any) -> None:
        if self.error is not None:
            return
        try:
            out = self.sink.on_event(event)
            if inspect.isawaitable(out):
                await out
        except Exception as exc:  # noqa: BLE001 — kept; ``export`` raises it
            self.error = exc


async def export(
    events: Iterable[StoredEvent | Event | UnknownEvent],
    sink: Any,
    *,
    target: str,
    redact: Any = None,
) -> int:
    """Replay ``events`` into ``sink``, strictly: its first failure stops the
    delivery and is raised as ``ExportError`` naming ``target``.

    Unlike ``replay``, which logs a failing sink and goes on (a watcher must
    not stop the others), an export exists only to reach its target, so its
    caller must learn that it did not. Returns the events delivered.
    """
    guarded = _FirstFailure(sink)
    count = await replay(events, guarded, redact=redact)
    if guarded.error is not None:
        error = guarded.error
        raise ExportError(
            target=target, reason=f"{type(error).__name__}: {error}"
        ) from error
    return count
