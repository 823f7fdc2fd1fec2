"""Exporters that write what they are handed to a JSON-lines file, ids resolved.

Role: test helper for ``OtelProcess``'s R6 test: the child's exporters must
be built in the child (``setup=functools.partial(file_exporters, path)``
pickles), and the parent reads the file; an in-process sink writes the same
form, so the two projections compare line for line.
Emits: one JSON object per span and per log record, in export order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class FileExporter(SpanExporter, LogRecordExporter):
    """Appends each span and record, as plain data, to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _write(self, rows: list[dict[str, Any]]) -> None:
        with self.path.open("a") as out:
            for row in rows:
                out.write(json.dumps(row, sort_keys=True, default=str) + "\n")

    def export(self, batch: Sequence[Any]) -> Any:
        rows: list[dict[str, Any]] = []
        spans = False
        for item in batch:
            if hasattr(item, "log_record"):
                record = item.log_record
                rows.append(
                    {
                        "kind": "record",
                        "body": record.body,
                        "attributes": dict(record.attributes or {}),
                        "timestamp": record.timestamp,
                        "span_id": record.span_id,
                    }
                )
            else:
                spans = True
                parent = item.parent.span_id if item.parent is not None else None
                rows.append(
                    {
                        "kind": "span",
                        "name": item.name,
                        "attributes": dict(item.attributes or {}),
                        "status": item.status.status_code.name,
                        "start": item.start_time,
                        "end": item.end_time,
                        "span_id": item.context.span_id,
                        "parent_id": parent,
                    }
                )
        self._write(rows)
        return SpanExportResult.SUCCESS if spans else LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def file_exporters(path: str) -> tuple[FileExporter, FileExporter]:
    """The child's ``setup``: both exporters write to ``path``."""
    exporter = FileExporter(path)
    return exporter, exporter


def projection(path: str) -> list[dict[str, Any]]:
    """What was written, ids replaced by the names of the spans they are."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    names = {row["span_id"]: row["name"] for row in rows if row["kind"] == "span"}
    out = []
    for row in rows:
        row = dict(row)
        if row["kind"] == "span":
            row["parent"] = names.get(row.pop("parent_id"))
            row.pop("span_id")
        else:
            row["span"] = names.get(row.pop("span_id"))
        out.append(row)
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))
