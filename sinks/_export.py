"""Export a record to OTLP/HTTP or any sink, failing loudly: what a caller checks.

Pattern: providers wired to watched OTLP/HTTP exporters, and a strict replay
         that stops at a sink's first failure and raises it, typed.
Role:    sinks layer; ``OtlpExport`` for live watching and ``helmlog
         replay/demo --otlp``; ``export`` for ``--jsonl``/``--otlp``.

Laws: R6 (``export`` delivers what ``replay`` does), R16 (a live export keeps
its failure and raises it at ``flush``/``close``).
Why a failed batch ends a replay's export: each batch would wait out its
timeout, holding ``helmlog replay`` for minutes before exiting 0. A live
export goes on: a collector restarts, and a host watches for weeks.
``otlp_endpoints`` accepts the base URL or a signal URL.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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
# A live export's pause after a failed batch: doubling while it keeps failing.
_BACKOFF_FIRST_S, _BACKOFF_MOST_S = 1.0, 30.0
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
    """What failed in one export, shared by its two exporters.

    Strict (replay, ``export``): the first failed batch ends the export, and
    every later batch fails at once. Live (watching a run): a failed batch is
    dropped and counted, later ones are dropped untried for a backoff (1 s,
    doubling to ``_BACKOFF_MOST_S`` while the collector stays down, reset by
    a success), and ``take`` hands the caller what failed since it last
    asked: a collector that comes back is exported to again.
    """

    def __init__(self, failures: _Failures, *, live: bool = False) -> None:
        self._lock = threading.Lock()
        self._failures = failures
        self.live = live
        self.failure: str | None = None
        self.lost = 0  # spans and records not exported (live)
        self._backoff_s = 0.0
        self._retry_at = 0.0

    def export(
        self,
        signal: str,
        send: Callable[[Sequence[Any]], Any],
        batch: Sequence[Any],
        success: Any,
    ) -> bool:
        """Send one batch of ``signal`` unless it goes untried; whether it was
        exported. A raise or a refusal is kept (``flush``/``close`` raise it)."""
        if self._skip(len(batch)):
            return False
        try:
            result = send(batch)
        except Exception as exc:  # noqa: BLE001 — kept; flush/close raise it
            self.failed(signal, len(batch), exc)
            return False
        if result is not success:
            self.failed(signal, len(batch))
            return False
        if self.live and self._backoff_s:
            with self._lock:
                self._backoff_s = 0.0
        return True

    def _skip(self, items: int) -> bool:
        """Whether a batch of ``items`` goes untried (and is counted lost)."""
        if self.failure is None and not self._backoff_s:
            return False
        if not self.live:
            return self.failure is not None
        with self._lock:
            if time.monotonic() < self._retry_at:
                self.lost += items
                return True
        return False

    def failed(
        self, signal: str, items: int, error: BaseException | None = None
    ) -> None:
        with self._lock:
            if self.failure is None:
                cause = (
                    f"{type(error).__name__}: {error}"
                    if error is not None
                    else self._failures.reason()
                )
                self.failure = f"{signal}: {cause}"
            if self.live:
                self.lost += items
                self._backoff_s = min(
                    max(2 * self._backoff_s, _BACKOFF_FIRST_S), _BACKOFF_MOST_S
                )
                self._retry_at = time.monotonic() + self._backoff_s

    def take(self) -> tuple[str | None, int]:
        """``(failure, lost)``; live, both start again from here."""
        with self._lock:
            taken = self.failure, self.lost
            if self.live:
                self.failure, self.lost = None, 0
            return taken


class _WatchedSpans(SpanExporter):
    def __init__(self, inner: SpanExporter, outcome: _Outcome) -> None:
        self._inner = inner
        self._outcome = outcome

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        exported = self._outcome.export(
            "spans", self._inner.export, spans, SpanExportResult.SUCCESS
        )
        return SpanExportResult.SUCCESS if exported else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _WatchedLogs(LogRecordExporter):
    def __init__(self, inner: LogRecordExporter, outcome: _Outcome) -> None:
        self._inner = inner
        self._outcome = outcome

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        exported = self._outcome.export(
            "logs", self._inner.export, batch, LogRecordExportResult.SUCCESS
        )
        return (
            LogRecordExportResult.SUCCESS if exported else LogRecordExportResult.FAILURE
        )

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
        live: keep exporting after a failed batch, for watching a run (what
            ``OtelProcess`` does): a failed batch is dropped, later ones
            are dropped untried for a backoff (1 s, doubling to 30 s while
            the collector stays down), and once it answers again the export
            goes on. Not live (replay, ``export``), the first failed batch
            ends the export.

    Attach ``export.sink`` as a watcher, or replay into it. ``flush()`` and
    ``close()`` raise ``ExportError`` once a batch has failed (live: once per
    failure, naming how many spans and records were not exported since the
    previous ``flush``), and when the export queue dropped what did not fit.
    A failed export never reaches the run being watched.
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
        live: bool = False,
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
        self._outcome = _Outcome(self._failures, live=live)
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
        failure, lost = self._outcome.take()
        dropped = self._direct.queue.take_dropped() if self._direct is not None else 0
        if failure is None and not dropped:
            return
        said = [failure] if failure is not None else []
        if lost:
            said.append(f"{lost} spans and records not exported")
        if dropped:
            said.append(overflowed(dropped))
        raise ExportError(target=self.target, reason="; ".join(said))

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
            self.sink.release()  # facts of a turn that never opened: untraced
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


def overflowed(dropped: int) -> str:
    """What a flush says of spans and records its full queue dropped."""
    return f"{dropped} dropped, the export queue being full"


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
