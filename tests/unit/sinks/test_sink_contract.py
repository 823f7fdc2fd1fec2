"""The sink contract, run on every sink helmlog ships (R4, R5, R6, R16, G84, G86).

Every sink is idempotent by ``(session_id, seq)`` (a redelivered or replayed
event has the effect of one), never raises into a run (a failing file,
console or exporter is reported where the sink says, and the run completes),
keeps values out unless configured, and gives the same output replayed as
watched. Each kit below drives one sink on its real target: a file under
``tmp_path``, stdout through ``capsys``, the SDK's in-memory exporters, a
child process exporting to a real local OTLP receiver.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helmlog import Agent, ToolMiddleware, allow, conversation_redaction, tool
from helmlog.events import MemoryEventStore, ToolCallRequest
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import (
    ConsoleSink,
    ExportError,
    FactsConsumer,
    JsonlSink,
    OtelProcess,
    OtelSink,
)
from helmlog.sinks import replay as replay_into
from tests.otlp_receiver import Receiver, otlp_receiver

SECRET_ARG = "order-7734"
SECRET_RESULT = "card ending 4242"
SECRET_REPLY = "refund sent to the vault"
SECRETS = (SECRET_ARG, SECRET_RESULT, SECRET_REPLY)


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order} to {SECRET_RESULT}"


def _agent(*watchers: object, redact: Any = None, store: Any = None) -> Agent:
    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="refund", args={"order": SECRET_ARG})
                ],
                usage={"input_tokens": 11, "output_tokens": 7},
            ),
            Reply(content=SECRET_REPLY, usage={"input_tokens": 30, "output_tokens": 2}),
        ]
    )
    audit = ToolMiddleware(
        name="audit", on_tool_call=lambda c: allow(), on_tool_result=lambda r: allow()
    )
    return (
        Agent.create(
            provider=model,
            model="m",
            clock=FakeClock(step=3),
            redact=redact,
            store=store,
        )
        .tool(refund)
        .tool_middleware(audit)
        .watch(*watchers)
        .build()
    )


async def _run(*watchers: object, redact: Any = None, store: Any = None) -> list[Any]:
    """Run the refund turn watched by ``watchers``; its stored records."""
    agent = _agent(*watchers, redact=redact, store=store)
    assert SECRET_REPLY == await agent.run("refund please")
    await agent.idle()
    assert agent.session_id is not None
    return await agent.store.read(agent.session_id)


# -- kits: one sink on its real target ------------------------------------------


class Kit:
    """Builds one kind of sink, reads back what it produced, breaks its target.

    ``values_flag``: the sink takes ``values=`` (the OTel projections); a
    record sink (JSON lines, console) writes each event as it was served, so
    its values are configured by the agent's redaction policy instead (R16,
    G86). ``failure`` is where the sink reports a failed target.
    """

    name = ""
    values_flag = False

    def sink(self, *, values: bool = False) -> Any:
        raise NotImplementedError

    def output(self, sink: Any) -> Any:
        """All ``sink`` produced so far, ``replayed`` marks left out."""
        raise NotImplementedError

    def break_target(self, sink: Any) -> None:
        raise NotImplementedError

    def failure(self, sink: Any, caplog: pytest.LogCaptureFixture) -> BaseException:
        """The failure as reported where the sink documents it."""
        raise NotImplementedError


def _logged(caplog: pytest.LogCaptureFixture, logger: str) -> BaseException:
    """The exception a logger recorded (the run's delivery, G84; the SDK's),
    one per failed event, all of one type."""
    raised = [
        r.exc_info[1]
        for r in caplog.records
        if r.name.startswith(logger) and r.exc_info and r.exc_info[1] is not None
    ]
    assert 1 == len({type(exc) for exc in raised})
    return raised[0]


class JsonlKit(Kit):
    """``JsonlSink``: ``ExportError`` from ``on_event``, logged by the run."""

    name = "jsonl"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.made = 0

    def sink(self, *, values: bool = False) -> JsonlSink:
        self.made += 1
        return JsonlSink(self.folder / f"sink{self.made}.jsonl")

    def output(self, sink: Any) -> Any:
        lines = [json.loads(x) for x in sink.path.read_text().splitlines()]
        for line in lines:
            line.pop("replayed")
        return [x for x in lines if x["seq"] is not None]  # tokens are not replayed

    def break_target(self, sink: Any) -> None:
        sink.path.unlink()
        sink.path.mkdir()  # the path is now a folder: no line can be appended

    def failure(self, sink: Any, caplog: pytest.LogCaptureFixture) -> BaseException:
        return _logged(caplog, "helmlog")


class ConsoleKit(Kit):
    """``ConsoleSink`` on stdout: ``ExportError`` from ``on_event``, logged."""

    name = "console"

    def __init__(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.capsys = capsys
        self.monkeypatch = monkeypatch
        self.printed: dict[int, str] = {}

    def sink(self, *, values: bool = False) -> ConsoleSink:
        return ConsoleSink()

    def output(self, sink: Any) -> Any:
        # Invariant: a test reads a sink's output right after delivering to it.
        text = self.printed.get(id(sink), "") + self.capsys.readouterr().out
        self.printed[id(sink)] = text
        return [x for x in text.replace(" (replayed)", "").splitlines() if x[4] != "-"]

    def break_target(self, sink: Any) -> None:
        closed = io.StringIO()
        closed.close()
        self.monkeypatch.setattr(sys, "stdout", closed)

    def failure(self, sink: Any, caplog: pytest.LogCaptureFixture) -> BaseException:
        return _logged(caplog, "helmlog")


class _Breakable(InMemorySpanExporter):
    """The SDK's in-memory exporter, which raises once its collector is 'down'."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def export(self, spans: Any) -> SpanExportResult:
        if self.down:
            raise OSError("the collector is down")
        return super().export(spans)


class _Telemetry:
    def __init__(self) -> None:
        self.spans = _Breakable()
        self.logs = InMemoryLogRecordExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(
            SimpleLogRecordProcessor(self.logs)
        )


def _shape(name: str, start: int, end: int, trace_id: int, attrs: Any) -> Any:
    kept = sorted((k, v) for k, v in dict(attrs).items() if k != "helmlog.replayed")
    return (name, start, end, trace_id, repr(kept))


class OtelKit(Kit):
    """``OtelSink`` on the SDK's in-memory exporters: the SDK's processor logs
    an exporter's failure; nothing reaches the run."""

    name = "otel"
    values_flag = True

    def __init__(self) -> None:
        self.telemetry: dict[int, _Telemetry] = {}

    def sink(self, *, values: bool = False) -> OtelSink:
        t = _Telemetry()
        sink = OtelSink(t.tracer_provider, t.logger_provider, values=values)
        self.telemetry[id(sink)] = t
        return sink

    def output(self, sink: Any) -> Any:
        t = self.telemetry[id(sink)]
        spans = sorted(
            _shape(
                s.name,
                s.start_time or 0,
                s.end_time or 0,
                s.context.trace_id,
                s.attributes or {},
            )
            for s in t.spans.get_finished_spans()
        )
        records = [
            (r.log_record.body, r.log_record.timestamp, _shape("", 0, 0, 0, attrs))
            for r in t.logs.get_finished_logs()
            for attrs in [r.log_record.attributes or {}]
        ]
        return spans, records

    def break_target(self, sink: Any) -> None:
        self.telemetry[id(sink)].spans.down = True

    def failure(self, sink: Any, caplog: pytest.LogCaptureFixture) -> BaseException:
        return _logged(caplog, "opentelemetry.sdk.trace.export")


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


class OtelProcessKit(Kit):
    """``OtelProcess`` exporting to a real local OTLP receiver: a refusing
    collector is an ``ExportError`` at ``flush``/``close``."""

    name = "otel-process"
    values_flag = True

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.receivers: dict[int, Receiver] = {}

    def sink(self, *, values: bool = False) -> OtelProcess:
        receiver = self.stack.enter_context(otlp_receiver())
        sink = OtelProcess(receiver.url, values=values)
        self.stack.callback(_close_quietly, sink)
        self.receivers[id(sink)] = receiver
        return sink

    def output(self, sink: Any) -> Any:
        sink.flush()
        receiver = self.receivers[id(sink)]
        spans, records = [], []
        for body in receiver.posts.get("/v1/traces", []):
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                for scope in rs.scope_spans:
                    for s in scope.spans:
                        attrs = {a.key: _value(a.value) for a in s.attributes}
                        trace_id = int.from_bytes(s.trace_id, "big")
                        spans.append(
                            _shape(
                                s.name,
                                s.start_time_unix_nano,
                                s.end_time_unix_nano,
                                trace_id,
                                attrs,
                            )
                        )
        for body in receiver.posts.get("/v1/logs", []):
            for rl in ExportLogsServiceRequest.FromString(body).resource_logs:
                for scope in rl.scope_logs:
                    for r in scope.log_records:
                        attrs = {a.key: _value(a.value) for a in r.attributes}
                        shape = _shape("", 0, 0, 0, attrs)
                        records.append((_value(r.body), r.time_unix_nano, shape))
        return sorted(spans), records

    def break_target(self, sink: Any) -> None:
        self.receivers[id(sink)].status = 400

    def failure(self, sink: Any, caplog: pytest.LogCaptureFixture) -> BaseException:
        with pytest.raises(ExportError) as raised:
            sink.close()
        return raised.value


def _close_quietly(sink: OtelProcess) -> None:
    try:
        sink.close()
    except ExportError:
        return  # a test that broke the collector read the failure already


@pytest.fixture(params=["jsonl", "console", "otel", "otel-process"])
def kit(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Kit]:
    with ExitStack() as stack:
        kits: dict[str, Kit] = {
            "jsonl": JsonlKit(tmp_path),
            "console": ConsoleKit(capsys, monkeypatch),
            "otel": OtelKit(),
            "otel-process": OtelProcessKit(stack),
        }
        yield kits[request.param]


# -- the contract ----------------------------------------------------------------


async def test_r4_a_redelivered_or_replayed_event_has_the_effect_of_one(
    kit: Kit,
) -> None:
    """R4: events the sink watched, replayed into it twice, change nothing."""
    sink = kit.sink()
    records = await _run(sink)
    watched = kit.output(sink)
    assert watched  # the sink produced something to compare
    await replay_into(records, sink)
    await replay_into(records, sink)
    assert watched == kit.output(sink)


async def test_r4_facts_a_consumer_group_delivers_again_have_the_effect_of_one(
    kit: Kit,
) -> None:
    """R4: a ``FactsConsumer`` delivering every fact a second time (a second
    group from the start: what a restart or a claim redelivers) changes
    nothing the sink produced."""
    store = MemoryEventStore()
    await _run(store=store)
    sink = kit.sink()
    first = FactsConsumer(store, "g1", "c", sink, block_ms=10)
    delivered = await first.run(idle_exit_s=0.05)
    once = kit.output(sink)
    again = FactsConsumer(store, "g2", "c", sink, block_ms=10)
    assert delivered == await again.run(idle_exit_s=0.05)
    assert 0 < delivered
    assert once == kit.output(sink)


async def test_r6_replay_gives_the_output_watching_gave(kit: Kit) -> None:
    """R6: a sink attached after the fact and replayed into matches a watcher."""
    live = kit.sink()
    records = await _run(live)
    watched = kit.output(live)
    later = kit.sink()
    assert len(records) == await replay_into(records, later)
    assert watched == kit.output(later)


async def test_r5_a_failing_target_never_reaches_the_run_and_is_reported(
    kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    """R5/G84: with its target failing the run answers and records as unwatched;
    the failure is reported where the sink says (typed, or the SDK's log)."""
    unwatched = [r.decode().type for r in await _run()]
    sink = kit.sink()
    kit.break_target(sink)
    with caplog.at_level(logging.WARNING):
        records = await _run(sink)
    assert unwatched == [r.decode().type for r in records]
    failure = kit.failure(sink, caplog)
    expected = OSError if kit.name == "otel" else ExportError
    assert isinstance(failure, expected)


async def test_r16_values_stay_out_unless_configured(kit: Kit) -> None:
    """R16: no argument, result or content unless configured (``values=True``
    for the OTel sinks, no redaction policy for a record sink)."""
    quiet = kit.sink(values=False)
    await _run(quiet, redact=None if kit.values_flag else conversation_redaction())
    said = repr(kit.output(quiet))
    assert [] == [s for s in SECRETS if s in said]
    loud = kit.sink(values=True)
    await _run(loud)
    said = repr(kit.output(loud))
    assert list(SECRETS) == [s for s in SECRETS if s in said]


async def test_g86_a_sink_given_values_still_gets_none_under_redaction(
    kit: Kit,
) -> None:
    """G86: the agent's redaction policy holds even for a sink given values."""
    sink = kit.sink(values=True)
    await _run(sink, redact=conversation_redaction())
    said = repr(kit.output(sink))
    assert [] == [s for s in SECRETS if s in said]
