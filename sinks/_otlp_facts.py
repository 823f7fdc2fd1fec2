"""A facts sink that hands each fact to an OTLP/HTTP collector before it returns.

Pattern: an ``OtelSink`` per fact over a logger provider whose exporter
         remembers its last failure; a failed export raises, typed.
Role:    sinks layer; ``helmlog watch --sink otlp:URL`` drives it through
         ``FactsConsumer``.
Emits:   each decision fact as an OTLP log record; raises
         ``OtlpExportFailedError`` (retryable) when the collector refused it.

Laws: R4 (a fact is acknowledged only after it was exported; a redelivery
already exported is skipped), R16 (the sink reads; it never drives a run).

Why export before returning: ``FactsConsumer`` acknowledges when ``on_event``
returns, so a batching sink would see facts acknowledged before any collector
had them; here a failed export leaves the fact pending, and it is retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

from helmlog.events import HelmlogError

from ._otel import OtelSink


class OtlpExportFailedError(HelmlogError):
    """An OTLP collector did not take a fact; the watcher retries it."""

    code = "ERR_OTLP_EXPORT"
    retryable = True


class OtlpFactsSink:
    """An ``OtelSink`` whose decision records reach an OTLP/HTTP collector
    before ``on_event`` returns; a failed export raises."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (
            OTLPLogExporter,
        )
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        base = url.rstrip("/")
        for suffix in ("/v1/logs", "/v1/traces"):
            base = base.removesuffix(suffix)
        self.url = url
        resource = Resource.create({"service.name": "helmlog"})
        self._checked = _CheckedLogs(
            OTLPLogExporter(endpoint=f"{base}/v1/logs", timeout=timeout_s)
        )
        self._logs = LoggerProvider(resource=resource)
        self._logs.add_log_record_processor(SimpleLogRecordProcessor(self._checked))
        # Facts open no spans; a provider without exporters keeps it so.
        self._traces = TracerProvider(resource=resource)
        self._done: set[tuple[str, int | None]] = set()

    def __repr__(self) -> str:
        return f"OtlpFactsSink({self.url!r})"

    async def on_event(self, event: Any) -> None:
        # The exporter blocks on HTTP: off the loop, one fact at a time.
        await asyncio.to_thread(self._emit, event)

    def _emit(self, event: Any) -> None:
        key = (getattr(event, "session_id", ""), getattr(event, "seq", None))
        if key[1] is not None and key in self._done:
            return  # a redelivery (R4): exported already
        self._checked.failed = None
        # A fresh OtelSink per fact: its seen-set would skip the retry of a
        # fact whose export failed; this sink's own set counts successes only.
        sink = OtelSink(self._traces, self._logs)
        sink.on_event(event)
        sink.release()  # a fact alone opens no turn: an input one goes now
        if self._checked.failed is not None:
            raise OtlpExportFailedError(
                f"the OTLP collector at {self.url} did not take session "
                f"{key[0]!r} seq {key[1]}: {self._checked.failed}"
            )
        if key[1] is not None:
            self._done.add(key)

    def close(self) -> None:
        self._logs.shutdown()
        self._traces.shutdown()


class _CheckedLogs(LogRecordExporter):
    """A log exporter that remembers its last failure (the SDK only logs it)."""

    def __init__(self, inner: LogRecordExporter) -> None:
        self._inner = inner
        self.failed: str | None = None

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            result = self._inner.export(batch)
        except Exception as exc:  # noqa: BLE001 - R16: raised by on_event, retried
            self.failed = f"{type(exc).__name__}: {exc}"
            return LogRecordExportResult.FAILURE
        if result is not LogRecordExportResult.SUCCESS:
            self.failed = "the export failed"
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK is untyped here

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))
