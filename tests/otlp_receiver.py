"""A tiny OTLP/HTTP receiver on a free local port, for export tests.

Pattern: a real ``http.server`` in a thread that records each POST body by
         path (``/v1/traces``, ``/v1/logs``) and answers 200, or a fixed
         status when told to fail; decodes what it took as OTLP protobuf
         (``spans``, ``log_records``, ``attributes``) for field-by-field checks.
Role:    tests; the collector ``OtlpExport`` and ``helmlog ... --otlp`` send to.
Emits:   nothing of helmlog's.

Why a real socket, not a mocked exporter: what is tested is that the bytes
reach a collector, and that a refusing or absent one is reported.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.polling import until_sync


class Receiver:
    """What a receiver was sent, decoded, by signal."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.posts: dict[str, list[bytes]] = {}
        self.status = 200
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def span_names(self) -> list[str]:
        names = []
        for body in self.posts.get("/v1/traces", []):
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    names.extend(span.name for span in scope.spans)
        return names

    def service_names(self) -> set[str]:
        """The ``service.name`` of every resource that sent spans."""
        names = set()
        for body in self.posts.get("/v1/traces", []):
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for kv in resource.resource.attributes:
                    if kv.key == "service.name":
                        names.add(kv.value.string_value)
        return names

    def spans(self) -> list[Span]:
        """Every span received, as the collector decoded it (protobuf)."""
        spans: list[Span] = []
        for body in self.posts.get("/v1/traces", []):
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    spans.extend(scope.spans)
        return spans

    def log_records(self) -> list[LogRecord]:
        """Every log record received, decoded (protobuf)."""
        records: list[LogRecord] = []
        for body in self.posts.get("/v1/logs", []):
            request = ExportLogsServiceRequest.FromString(body)
            for resource in request.resource_logs:
                for scope in resource.scope_logs:
                    records.extend(scope.log_records)
        return records

    def log_count(self) -> int:
        count = 0
        for body in self.posts.get("/v1/logs", []):
            request = ExportLogsServiceRequest.FromString(body)
            for resource in request.resource_logs:
                for scope in resource.scope_logs:
                    count += len(scope.log_records)
        return count

    def wait_for(self, path: str, deadline_s: float = 10.0) -> None:
        """Poll until ``path`` received a POST, or fail at the deadline."""
        until_sync(f"a POST to {path}", lambda: path in self.posts, deadline_s)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve on 127.0.0.1 at a free port until the block exits."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with receiver.lock:
                receiver.posts.setdefault(self.path, []).append(body)
            self.send_response(receiver.status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return  # keep test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """A span's or record's attributes as plain values (arrays as tuples)."""
    return {kv.key: plain(kv.value) for kv in pairs}


def plain(value: AnyValue) -> Any:
    """One OTLP ``AnyValue`` as the Python value it carries."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(plain(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return None if kind is None else getattr(value, kind)
