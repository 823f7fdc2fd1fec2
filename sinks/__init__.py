"""helmlog.sinks — watchers that read the record and never drive the loop.

Imports nothing of helmlog but ``helmlog.events`` (R16).
"""

from ._consumer import FactsConsumer
from ._direct import FinishedTelemetry
from ._export import ExportError, OtlpExport, export, otlp_endpoints
from ._follow import follow_facts
from ._jsonl import ConsoleSink, JsonlSink
from ._offload import OtelProcess
from ._otel import OtelSink
from ._otlp_facts import OtlpFactsSink
from ._replay import replay

__all__ = [
    "ConsoleSink",
    "ExportError",
    "FactsConsumer",
    "FinishedTelemetry",
    "JsonlSink",
    "OtelProcess",
    "OtelSink",
    "OtlpExport",
    "OtlpFactsSink",
    "export",
    "follow_facts",
    "otlp_endpoints",
    "replay",
]
