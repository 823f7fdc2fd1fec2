"""OtelSink: GenAI spans per turn, model and tool call, a record per fact (R16).

Fed live as a watcher and after the fact through ``replay``, the sink yields
the same spans and records (R6), timed by the recorded timestamps, once per
``(session_id, seq)`` however often an event is delivered (R4).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helmlog import Agent, ToolMiddleware, allow, deny, tool
from helmlog.events import (
    LlmEnded,
    LlmStarted,
    PauseRequested,
    PauseResumed,
    ToolCallRequest,
    ToolStarted,
    TurnEnded,
    TurnStarted,
    UnknownEvent,
)
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import OtelSink, replay

SECRET_ARG = "order-7734"
SECRET_RESULT = "card ending 4242"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order} to {SECRET_RESULT}"


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.logs = InMemoryLogRecordExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.tracer_provider = tracer_provider
        self.logger_provider = logger_provider

    def sink(self, *, values: bool = False) -> OtelSink:
        return OtelSink(self.tracer_provider, self.logger_provider, values=values)

    def span_shape(self) -> list[tuple[str, int, int]]:
        return sorted(
            (s.name, s.start_time or 0, s.end_time or 0)
            for s in self.spans.get_finished_spans()
        )

    def records(self) -> list[Any]:
        return [d.log_record for d in self.logs.get_finished_logs()]

    def everything(self) -> str:
        spans = [
            (s.name, dict(s.attributes or {}), [e.attributes for e in s.events])
            for s in self.spans.get_finished_spans()
        ]
        records = [(r.body, dict(r.attributes or {})) for r in self.records()]
        return repr((spans, records))


def _agent(*watchers: object) -> Agent:
    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="refund", args={"order": SECRET_ARG}),
                    ToolCallRequest(id="c2", name="refund", args={"order": "big"}),
                ],
                usage={"input_tokens": 11, "output_tokens": 7},
            ),
            Reply(content="Done.", usage={"input_tokens": 30, "output_tokens": 2}),
        ]
    )
    ceiling = ToolMiddleware(
        name="ceiling",
        on_tool_call=lambda c: deny("too big") if c.args["order"] == "big" else allow(),
    )
    return (
        Agent.create(provider=model, model="m", clock=FakeClock(step=3))
        .tool(refund)
        .act(before_tool=[ceiling])
        .watch(*watchers)
        .build()
    )


async def test_r16_genai_spans_per_turn_model_call_and_tool_call() -> None:
    """R16: ``invoke_agent`` per turn, ``chat``/``execute_tool`` children (GenAI)."""
    telemetry = Telemetry()
    agent = _agent(telemetry.sink())
    assert "Done." == await agent.run("refund please")
    spans = telemetry.spans.get_finished_spans()
    names = sorted(s.name for s in spans)
    expected_names = [
        "chat m",
        "chat m",
        "execute_tool refund",
        "execute_tool refund",
        "invoke_agent helmlog",
    ]
    assert expected_names == names
    (turn,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.session_id is not None
    (started,) = [
        e
        for e in (r.decode() for r in await agent.store.read(agent.session_id))
        if isinstance(e, TurnStarted)
    ]
    # Issue 26: the runtime minted the turn's context, so the turn's span
    # takes its ids: the trace's root, with no parent no one emits.
    assert started.trace_minted
    assert turn.parent is None
    assert started.traceparent == (
        f"00-{turn.context.trace_id:032x}-{turn.context.span_id:016x}-01"
    )
    for span in spans:
        if span is not turn:
            assert span.parent is not None
            assert turn.context.span_id == span.parent.span_id
    assert {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "helmlog",
        "gen_ai.conversation.id": agent.session_id,
    }.items() <= dict(turn.attributes or {}).items()
    chats = sorted(
        (s for s in spans if s.name == "chat m"), key=lambda s: s.start_time or 0
    )
    assert [
        ("chat", "m", 11, 7, ("tool_calls",)),
        ("chat", "m", 30, 2, ("stop",)),
    ] == [
        (
            a["gen_ai.operation.name"],
            a["gen_ai.request.model"],
            a["gen_ai.usage.input_tokens"],
            a["gen_ai.usage.output_tokens"],
            tuple(a["gen_ai.response.finish_reasons"]),
        )
        for a in (dict(s.attributes or {}) for s in chats)
    ]
    tools = sorted(
        (dict(s.attributes or {}) for s in spans if s.name.startswith("execute_tool")),
        key=lambda a: str(a["gen_ai.tool.call.id"]),
    )
    assert [("execute_tool", "refund", "c1"), ("execute_tool", "refund", "c2")] == [
        (a["gen_ai.operation.name"], a["gen_ai.tool.name"], a["gen_ai.tool.call.id"])
        for a in tools
    ]


async def test_r16_one_log_record_per_fact_and_no_value_in_it() -> None:
    """R16: each decision fact is a log record under its turn, with no value."""
    telemetry = Telemetry()
    agent = _agent(telemetry.sink())
    assert "Done." == await agent.run("refund please")
    rows = agent.last_snapshot().middleware_decisions
    records = telemetry.records()
    assert len(rows) == len(records)
    assert {"helmlog.middleware.decision"} == {r.event_name for r in records}
    assert [(r.middleware, r.outcome, r.why) for r in rows] == [
        (
            r.attributes["helmlog.middleware"],
            r.attributes["helmlog.outcome"],
            r.attributes.get("helmlog.why"),
        )
        for r in records
    ]
    (turn,) = [
        s
        for s in telemetry.spans.get_finished_spans()
        if s.name.startswith("invoke_agent")
    ]
    assert {turn.context.trace_id} == {r.trace_id for r in records}
    assert SECRET_ARG not in telemetry.everything()


async def test_r16_no_values_unless_configured() -> None:
    """R16: arguments and results appear only with ``values=True``."""
    quiet, loud = Telemetry(), Telemetry()
    await _agent(quiet.sink(), loud.sink(values=True)).run("refund please")
    assert SECRET_ARG not in quiet.everything()
    assert SECRET_RESULT not in quiet.everything()
    assert SECRET_ARG in loud.everything()
    assert SECRET_RESULT in loud.everything()


async def test_r6_replay_gives_the_spans_a_watcher_saw_and_r4_only_once() -> None:
    """R6/R4: replaying the stored stream (twice) yields the watched spans, once."""
    live = Telemetry()
    agent = _agent(live.sink())
    await agent.run("refund please")
    assert agent.session_id is not None
    records = await agent.store.read(agent.session_id)

    later = Telemetry()
    sink = later.sink()
    await replay(records, sink)
    await replay(records, sink)
    assert live.span_shape() == later.span_shape()
    assert len(live.records()) == len(later.records())
    assert all(r.attributes["helmlog.replayed"] for r in later.records())


async def test_dispatch_is_by_event_class_not_by_type_string() -> None:
    """An unknown event named like a known one opens no span (typed table)."""
    telemetry = Telemetry()
    sink = telemetry.sink()
    impostor = UnknownEvent(type="agent.turn_start", session_id="s", seq=1)
    sink.on_event(impostor)
    sink.on_event(UnknownEvent(type="agent.turn_end", session_id="s", seq=2))
    assert () == telemetry.spans.get_finished_spans()


async def test_a_paused_turn_ends_its_span_and_the_resume_opens_one() -> None:
    """A pause ends the turn's span; the resumed work gets a span of its own."""
    telemetry = Telemetry()
    sink = telemetry.sink()
    events = [
        TurnStarted(session_id="s", seq=1, timestamp=10, turn=1),
        LlmStarted(session_id="s", seq=2, timestamp=11, iteration=1, model="m"),
        LlmEnded(session_id="s", seq=3, timestamp=12, iteration=1, content=""),
        ToolStarted(
            session_id="s",
            seq=4,
            timestamp=13,
            tool_name="refund",
            tool_call_id="c1",
            iteration=1,
        ),
        PauseRequested(
            session_id="s",
            seq=5,
            timestamp=14,
            kind="ask",
            tool_name="refund",
            tool_call_id="c1",
        ),
        PauseResumed(
            session_id="s", seq=6, timestamp=20, kind="ask", tool_call_id="c1"
        ),
        TurnEnded(session_id="s", seq=7, timestamp=25, turn=1, final_content="ok"),
    ]
    await replay(events, sink)
    shape = [
        (s.name, (s.start_time or 0) // 1_000_000, (s.end_time or 0) // 1_000_000)
        for s in sorted(
            telemetry.spans.get_finished_spans(), key=lambda s: s.start_time or 0
        )
    ]
    assert [
        ("invoke_agent helmlog", 10, 14),
        ("chat m", 11, 12),
        ("execute_tool refund", 13, 14),
        ("invoke_agent helmlog", 20, 25),
    ] == shape


def test_issue26_sinks_sharing_a_provider_wrap_its_id_source_once() -> None:
    """Issue 26 item 6: a sink primes its tracer's id source for a minted
    trace's root; the SDK caches one tracer per scope, so the hundredth sink
    on a provider (``OtlpFactsSink`` makes one per fact) wraps it no deeper
    than the first, and a span it does not prime gets fresh ids."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from helmlog.sinks._ids import PrimedIds

    telemetry = Telemetry()
    for _ in range(100):
        telemetry.sink()
    tracer = telemetry.tracer_provider.get_tracer("helmlog")
    ids = tracer.id_generator  # type: ignore[attr-defined]
    assert isinstance(ids, PrimedIds)
    assert isinstance(ids.inner, RandomIdGenerator)
    ids.prime(7, 9)
    assert (7, 9) == (ids.generate_trace_id(), ids.generate_span_id())
    assert 9 != ids.generate_span_id()
