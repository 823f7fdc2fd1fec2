"""Trace context travels in the events (issue 8 item 8).

A turn's W3C trace context is recorded on ``agent.turn_start`` (the caller's,
else one the runtime mints) and on what continues the turn (``pause.resume``,
``tool.outcome_unknown``); ``OtelSink`` parents each turn's ``invoke_agent``
span on it, so replays and other processes land in the same trace. Streams
recorded before contexts were still trace, deterministically.
"""

from __future__ import annotations

import hashlib
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helmlog import Agent, AskPause, ToolMiddleware, allow, ask, check_in_approved, tool
from helmlog.events import (
    EventStore,
    Folder,
    MemoryEventStore,
    PauseResumed,
    ToolCallRequest,
    ToolOutcomeUnknown,
    TurnStarted,
)
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import OtelSink, replay
from tests.replay.streams import FIXTURES, load_records

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
APPROVER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Telemetry:
    """An ``OtelSink`` on in-memory exporters: one per "host"."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.logs = InMemoryLogRecordExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(
            SimpleLogRecordProcessor(self.logs)
        )
        self.sink = OtelSink(self.tracer_provider, self.logger_provider)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def trace_ids(self) -> set[str]:
        return {f"{s.context.trace_id:032x}" for s in self.finished()}


def turn_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if s.name.startswith("invoke_agent")),
        key=lambda s: s.start_time or 0,
    )


def parent_of(span: ReadableSpan) -> tuple[str, str]:
    assert span.parent is not None
    return (f"{span.parent.trace_id:032x}", f"{span.parent.span_id:016x}")


def ids_of(span: ReadableSpan) -> tuple[str, str]:
    return (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")


def link_of(span: ReadableSpan) -> tuple[str, str]:
    """Where a turn's span hangs: its parent, or its own ids when a root."""
    return ids_of(span) if span.parent is None else parent_of(span)


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def asking_agent(
    *watchers: object, store: EventStore | None = None, resuming: bool = False
) -> Agent:
    """Asks a person before every refund; answers after it ran.

    ``resuming``: the model's script starts after the paused call (a host
    that resumes never saw the model propose it).
    """
    proposal = Reply(
        tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": 7})]
    )
    model = scripted(["Refunded."] if resuming else [proposal, "Refunded."])
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    return (
        Agent.create(provider=model, model="m", clock=FakeClock(step=3), store=store)
        .tool(refund)
        .act(before_tool=[four_eyes])
        .watch(*watchers)
        .build()
    )


def plain_agent(*watchers: object) -> Agent:
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": 7})]
            ),
            "Refunded.",
        ]
    )
    return (
        Agent.create(provider=model, model="m", clock=FakeClock(step=3))
        .tool(refund)
        .act(before_tool=[ToolMiddleware(name="pass", on_tool_call=lambda c: allow())])
        .watch(*watchers)
        .build()
    )


async def recorded(agent: Agent) -> list[Any]:
    assert agent.session_id is not None
    return [r.decode() for r in await agent.store.read(agent.session_id)]


async def test_a_caller_traceparent_is_the_turn_spans_parent() -> None:
    """A traceparent passed to ``run`` is recorded and parents ``invoke_agent``."""
    telemetry = Telemetry()
    agent = plain_agent(telemetry.sink)
    assert "Refunded." == await agent.run("refund 7", traceparent=CALLER)
    (started,) = [e for e in await recorded(agent) if isinstance(e, TurnStarted)]
    assert (CALLER, "") == (started.traceparent, started.tracestate)
    (turn,) = turn_spans(telemetry.finished())
    assert (CALLER_TRACE, CALLER_SPAN) == parent_of(turn)
    assert {CALLER_TRACE} == telemetry.trace_ids()
    assert {int(CALLER_TRACE, 16)} == {
        d.log_record.trace_id for d in telemetry.logs.get_finished_logs()
    }


async def test_without_a_caller_the_runtime_mints_one_context_per_turn() -> None:
    """No caller context: each turn gets a fresh, valid, recorded one, whose
    ids the turn's span takes: the trace's root (issue 26)."""
    telemetry = Telemetry()
    agent = plain_agent(telemetry.sink)
    await agent.run("refund 7")
    first = next(e for e in await recorded(agent) if isinstance(e, TurnStarted))
    version, trace_id, span_id, flags = first.traceparent.split("-")
    assert ("00", 32, 16, "01") == (version, len(trace_id), len(span_id), flags)
    assert first.trace_minted
    (turn,) = turn_spans(telemetry.finished())
    assert turn.parent is None
    assert (trace_id, span_id) == ids_of(turn)
    assert {trace_id} == telemetry.trace_ids()


async def test_a_malformed_caller_traceparent_is_ignored_as_w3c_says() -> None:
    """A traceparent that does not parse restarts the trace (W3C), never raises."""
    for bad in ("garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", 42):
        agent = plain_agent()
        assert "Refunded." == await agent.run("refund 7", traceparent=bad)  # type: ignore[arg-type]
        (started,) = [e for e in await recorded(agent) if isinstance(e, TurnStarted)]
        assert bad != started.traceparent
        assert 55 == len(started.traceparent)


async def test_a_resume_without_context_continues_the_turns_trace() -> None:
    """The pause's continuation is recorded, and traced, in the turn's trace."""
    host_a, host_b = Telemetry(), Telemetry()
    store = MemoryEventStore()
    agent = asking_agent(host_a.sink, store=store)
    out = await agent.run("refund 7", traceparent=CALLER)
    assert isinstance(out, AskPause)
    other = asking_agent(host_b.sink, store=store, resuming=True)
    assert "Refunded." == await other.resume(out.checkpoint, check_in_approved("dana"))
    (resumed,) = [e for e in await recorded(other) if isinstance(e, PauseResumed)]
    assert CALLER == resumed.traceparent
    assert {CALLER_TRACE} == host_a.trace_ids() == host_b.trace_ids()
    (continuation,) = turn_spans(host_b.finished())
    assert (CALLER_TRACE, CALLER_SPAN) == parent_of(continuation)
    assert True is (continuation.attributes or {}).get("helmlog.resumed")


async def test_a_resume_callers_context_parents_the_continuation() -> None:
    """A traceparent passed to ``resume`` is recorded and parents the rest."""
    telemetry = Telemetry()
    agent = asking_agent(telemetry.sink)
    out = await agent.run("refund 7", traceparent=CALLER)
    assert isinstance(out, AskPause)
    await agent.resume(out.checkpoint, check_in_approved("dana"), traceparent=APPROVER)
    (resumed,) = [e for e in await recorded(agent) if isinstance(e, PauseResumed)]
    assert APPROVER == resumed.traceparent
    first, continuation = turn_spans(telemetry.finished())
    assert (CALLER_TRACE, CALLER_SPAN) == parent_of(first)
    _, approver_trace, approver_span, _ = APPROVER.split("-")
    assert (approver_trace, approver_span) == parent_of(continuation)


async def test_the_fold_knows_the_open_turns_trace_context() -> None:
    """``Folder.trace`` follows the turn's start and its continuations."""
    agent = asking_agent()
    out = await agent.run("refund 7", traceparent=CALLER)
    assert isinstance(out, AskPause)
    folder = Folder()
    for event in await recorded(agent):
        folder.apply(event)
    assert (CALLER, "") == folder.trace
    await agent.resume(out.checkpoint, check_in_approved("dana"), traceparent=APPROVER)
    folder = Folder()
    for event in await recorded(agent):
        folder.apply(event)
    assert (APPROVER, "") == folder.trace


async def test_replay_reproduces_the_recorded_trace_ids() -> None:
    """R6: a replay's spans are in the traces the watched run's were in."""
    live = Telemetry()
    agent = asking_agent(live.sink)
    out = await agent.run("refund 7")
    assert isinstance(out, AskPause)
    await agent.resume(out.checkpoint, check_in_approved("dana"))
    assert agent.session_id is not None
    later = Telemetry()
    await replay(await agent.store.read(agent.session_id), later.sink)
    assert 1 == len(live.trace_ids())
    assert live.trace_ids() == later.trace_ids()
    assert [link_of(s) for s in turn_spans(live.finished())] == [
        link_of(s) for s in turn_spans(later.finished())
    ]


async def test_a_golden_stream_without_trace_fields_replays_deterministically() -> None:
    """R10: an older stream traces one trace per turn, derived from
    ``sha256("helmlog-trace", session id, turn)``, the same on every replay."""
    records = load_records(FIXTURES / "v1_refund_desk.jsonl")
    events = [r.decode() for r in records]
    starts = [e for e in events if isinstance(e, TurnStarted)]
    assert starts and all("" == e.traceparent for e in starts)
    first, second = Telemetry(), Telemetry()
    await replay(records, first.sink)
    await replay(records, second.sink)
    expected = {
        hashlib.sha256(
            f"helmlog-trace\0{e.session_id}\0turn {e.turn}".encode()
        ).hexdigest()[:32]
        for e in starts
    }
    assert expected == first.trace_ids() == second.trace_ids()
    assert len(first.finished()) == len(second.finished())


async def test_a_recovery_on_another_host_continues_the_turns_trace() -> None:
    """R7: the recovering host's ``tool.outcome_unknown`` carries the turn's
    context, and its spans (a ``helmlog.recovered`` continuation) join it."""
    from tests.unit.runtime.test_recover import DyingStore, HostStopped, _crash

    runs: list[int] = []

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        runs.append(order)
        if len(runs) == 1:
            store.dead = True
            raise HostStopped
        return f"refunded {order}"

    store = DyingStore()
    sid = await _crash(store, refund)
    telemetry = Telemetry()
    second = (
        Agent.create(provider=scripted(["Checked."]), model="m", store=store)
        .tool(refund)
        .watch(telemetry.sink)
        .build()
    )
    assert "Checked." == await second.recover(sid)
    events = [r.decode() for r in await store.read(sid)]
    (started,) = [e for e in events if isinstance(e, TurnStarted)]
    (unknown,) = [e for e in events if isinstance(e, ToolOutcomeUnknown)]
    assert started.traceparent == unknown.traceparent
    _, trace_id, parent_id, _ = started.traceparent.split("-")
    assert {trace_id} == telemetry.trace_ids()
    (continuation,) = turn_spans(telemetry.finished())
    assert (trace_id, parent_id) == parent_of(continuation)
    assert True is (continuation.attributes or {}).get("helmlog.recovered")
