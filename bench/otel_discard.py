"""Exporters that take every batch and count it, for bench/sinks.py.

Pattern: an OTel span and log-record exporter that discards, as a collector
         that is always up.
Role:    bench; ``bench/sinks.py`` exports through it in process, and hands
         ``discarding_exporters`` to ``OtelProcess(setup=...)``.
Emits:   nothing.

Laws: R28 (the export child imports a ``setup`` by its module's name and
never the caller's ``__main__``, so the bench's setup lives here, not in the
script it runs as; ``python bench/sinks.py`` puts this folder on the path the
child is handed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class Discard(SpanExporter, LogRecordExporter):
    """Takes every batch and counts it, as a collector that is always up."""

    def __init__(self) -> None:
        self.spans = 0
        self.records = 0

    def export(self, batch: Sequence[Any]) -> Any:
        if batch and isinstance(batch[0], ReadableSpan):
            self.spans += len(batch)
            return SpanExportResult.SUCCESS
        self.records += len(batch)
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def discarding_exporters() -> tuple[Discard, Discard]:
    """The child's exporters for ``OtelProcess``: one that discards, twice."""
    exporter = Discard()
    return exporter, exporter
