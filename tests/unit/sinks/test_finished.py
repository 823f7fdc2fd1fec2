"""FinishedTelemetry: the spans and records of the SDK's providers, built as data (R6).

The same recorded events, projected by one ``OtelSink`` on the SDK's own
providers and by one on ``FinishedTelemetry``, export the same spans (names,
kinds, parents, traces, attributes, events, status, recorded times, resource
and scope) and the same log records; only the randomly drawn span ids differ,
so spans are compared by what they are, parents by name.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helmlog import (
    Agent,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import (
    FatalError,
    LlmStarted,
    ToolCallRequest,
    ToolStarted,
    TurnStarted,
)
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import FinishedTelemetry, OtelSink, replay
from helmlog.sinks._direct import ExportQueue
from tests.polling import until_sync


@tool
def refund(order: str) -> str:
    """Refund an order."""
    if order == "broken":
        raise RuntimeError("the ledger is down")
    return f"refunded {order}"


def _sdk_providers() -> tuple[Any, Any, TracerProvider, LoggerProvider]:
    """The SDK's own providers, exporting into memory as each span ends."""
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    return spans, logs, tracer_provider, logger_provider


def _shape(spans: Any, records: Any) -> tuple[list[Any], list[Any]]:
    by_id = {s.context.span_id: s.name for s in spans}
    traces = sorted({s.context.trace_id for s in spans})
    span_rows = sorted(
        (
            s.start_time,
            s.name,
            s.kind,
            sorted(dict(s.attributes or {}).items()),
            [(e.name, dict(e.attributes or {}), e.timestamp) for e in s.events],
            (s.status.status_code, s.status.description),
            s.end_time,
            by_id.get(s.parent.span_id) if s.parent is not None else None,
            s.parent is not None and s.parent.span_id not in by_id,  # a recorded parent
            traces.index(s.context.trace_id),
            bool(s.context.trace_flags.sampled),
            dict(s.resource.attributes),
            s.instrumentation_scope.name if s.instrumentation_scope else None,
        )
        for s in spans
    )
    record_rows = sorted(
        (
            r.log_record.timestamp,
            r.log_record.body,
            r.log_record.event_name,
            sorted(dict(r.log_record.attributes or {}).items()),
            by_id.get(r.log_record.span_id),
            traces.index(r.log_record.trace_id),
            dict(r.resource.attributes),
        )
        for r in records
    )
    return span_rows, record_rows


async def _recorded() -> list[Any]:
    """A session's records: a denied call, a tool that raises, an ask and its
    resume, a second turn."""
    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="refund", args={"order": "a"}),
                    ToolCallRequest(id="c2", name="refund", args={"order": "big"}),
                    ToolCallRequest(id="c3", name="refund", args={"order": "broken"}),
                ],
                usage={"input_tokens": 11, "output_tokens": 7},
            ),
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c4", name="refund", args={"order": "asked"})
                ]
            ),
            Reply(content="Done.", usage={"input_tokens": 30, "output_tokens": 2}),
            Reply(content="Again.", usage={"input_tokens": 40, "output_tokens": 3}),
        ]
    )
    gate = ToolMiddleware(
        name="gate",
        on_tool_call=lambda c: (
            deny("too big")
            if c.args["order"] == "big"
            else ask("ok?")
            if c.args["order"] == "asked"
            else allow()
        ),
    )
    agent = (
        Agent.create(provider=model, model="m", clock=FakeClock(step=3))
        .tool(refund)
        .act(before_tool=[gate])
        .build()
    )
    paused = await agent.run("refund please")
    assert is_ask_pause(paused)
    assert "Done." == await agent.resume(paused.checkpoint, check_in_approved(by="d"))
    assert "Again." == await agent.follow_up("and again")
    assert agent.session_id is not None
    return list(await agent.store.read(agent.session_id))


async def test_r6_finished_telemetry_exports_what_the_sdk_providers_export() -> None:
    """R6: spans and records from ``FinishedTelemetry`` equal the SDK path's."""
    records = await _recorded()
    spans, logs, tracer_provider, logger_provider = _sdk_providers()
    await replay(records, OtelSink(tracer_provider, logger_provider))

    finished_spans, finished_logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    telemetry = FinishedTelemetry(finished_spans, finished_logs)
    await replay(records, OtelSink(telemetry, telemetry))
    assert telemetry.flush(timeout_s=10)

    expected = _shape(spans.get_finished_spans(), logs.get_finished_logs())
    actual = _shape(
        finished_spans.get_finished_spans(), finished_logs.get_finished_logs()
    )
    assert len(expected[0]) >= 6 and len(expected[1]) >= 4  # the case is not empty
    assert expected == actual
    telemetry.shutdown()


async def test_r6_finished_telemetry_handles_a_fatal_turn_and_an_unsampled_caller() -> (
    None
):
    """R6: a fatal error's status, and a caller's unsampled context, as the SDK."""
    unsampled = "00-" + "a" * 32 + "-" + "b" * 16 + "-00"
    events = [
        TurnStarted(session_id="s", seq=1, timestamp=10, turn=1),
        LlmStarted(session_id="s", seq=2, timestamp=11, iteration=1, model="m"),
        FatalError(session_id="s", seq=3, timestamp=12, code="ERR_PROVIDER"),
        TurnStarted(session_id="s", seq=4, timestamp=20, turn=2, traceparent=unsampled),
        ToolStarted(
            session_id="s",
            seq=5,
            timestamp=21,
            tool_name="refund",
            tool_call_id="c9",
            iteration=1,
        ),
    ]
    spans, logs, tracer_provider, logger_provider = _sdk_providers()
    await replay(events, OtelSink(tracer_provider, logger_provider))

    finished_spans, finished_logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    telemetry = FinishedTelemetry(finished_spans, finished_logs)
    await replay(events, OtelSink(telemetry, telemetry))
    telemetry.shutdown()
    expected = _shape(spans.get_finished_spans(), logs.get_finished_logs())
    actual = _shape(
        finished_spans.get_finished_spans(), finished_logs.get_finished_logs()
    )
    assert ["chat m", "invoke_agent helmlog"] == sorted(r[1] for r in expected[0])
    assert expected == actual


def test_the_export_queue_drops_what_does_not_fit_and_counts_it() -> None:
    """A collector that holds a batch up: the queue keeps at most
    ``max_queue`` items per signal and counts the rest, so an outage costs
    no memory (as the SDK's batch processors)."""
    release = threading.Event()

    class Stuck(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            release.wait(30)
            return SpanExportResult.SUCCESS

    queue = ExportQueue(Stuck(), Stuck(), max_batch=2, max_queue=3)  # type: ignore[arg-type]  # spans only
    try:
        spans = [ReadableSpan(name=f"s{n}") for n in range(12)]
        for span in spans[:2]:
            queue.put_span(span)  # a full batch: the thread takes it, and waits
        until_sync("the thread takes the batch", lambda: not queue._spans, 10)
        for span in spans[2:]:
            queue.put_span(span)
        assert 7 == queue.take_dropped()
        assert 0 == queue.take_dropped()
    finally:
        release.set()
        queue.shutdown()
