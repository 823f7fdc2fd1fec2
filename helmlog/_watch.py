"""``helmlog watch``: a consumer-group watcher of the facts streams, as a command.

Pattern: a sink named by a spec string (``jsonl:PATH``, ``otlp:URL``,
         ``console``) driven by ``helmlog.sinks.FactsConsumer``.
Role:    the face's watcher; ``helmlog watch --store URL --group NAME``.
Emits:   each decision fact to the chosen sink; nothing into the store but
         the group's position and acknowledgements.

Laws: R4 (read through a consumer group, acknowledged only after the sink
returned; a killed watcher restarted under its name delivers what it had not
acknowledged, and its JSONL file holds each fact once), R16 (the watcher
reads; it never drives a run).

Why the OTLP sink exports each fact before it returns: ``FactsConsumer``
acknowledges when ``on_event`` returns, so a sink that only queued the
record (a batch processor) would have the fact acknowledged before any
collector had it; here a failed export raises, and the fact stays pending
and is retried.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

from helmlog.events import EventStore, HelmlogError
from helmlog.sinks import ConsoleSink, FactsConsumer, JsonlSink, OtelSink

SINK_HELP = "Where facts go: jsonl:PATH, otlp:URL or console."


class WatchSinkError(HelmlogError):
    """A sink spec names no sink helmlog knows, or one it cannot open."""

    code = "ERR_WATCH_SINK"


class OtlpExportFailedError(HelmlogError):
    """An OTLP collector did not take a fact; the watcher retries it."""

    code = "ERR_OTLP_EXPORT"
    retryable = True


def default_consumer() -> str:
    """A consumer name stable across restarts on one machine: its host name."""
    return socket.gethostname() or "helmlog-watch"


def open_sink(spec: str) -> tuple[Any, Callable[[], None]]:
    """The sink a spec names and how to close it; ``WatchSinkError`` if none."""
    kind, _, target = spec.partition(":")
    if kind == "console" and not target:
        return ConsoleSink(), _nothing
    if kind == "jsonl" and target:
        path = Path(target)
        try:
            # Fail now, not at the first fact: the file must be writable.
            with path.open("ab"):
                pass
        except OSError as exc:
            raise WatchSinkError(f"cannot write {target}: {exc}") from exc
        return JsonlSink(path), _nothing
    if kind == "otlp" and target:
        sink = OtlpFactsSink(target)
        return sink, sink.close
    raise WatchSinkError(f"unknown sink {spec!r}: use jsonl:PATH, otlp:URL or console")


async def watch(
    store: EventStore,
    *,
    group: str,
    consumer: str,
    sink: Any,
    from_start: bool = True,
    claim_idle_ms: int | None = 30_000,
    count: int | None = None,
    idle_exit_s: float | None = None,
) -> int:
    """Run a ``FactsConsumer`` until ``count`` facts or ``idle_exit_s`` idle."""
    consumer_loop = FactsConsumer(
        store,
        group,
        consumer,
        sink,
        from_start=from_start,
        claim_idle_ms=claim_idle_ms,
        claim_every_s=max(0.5, (claim_idle_ms or 0) / 2000),
        block_ms=500,
    )
    return await consumer_loop.run(limit=count, idle_exit_s=idle_exit_s)


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
        OtelSink(self._traces, self._logs).on_event(event)
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


def _nothing() -> None:
    return None
