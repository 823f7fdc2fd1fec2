"""Benchmark an attached OtelSink's cost on governed turns per second.

Pattern: a micro-benchmark in one process: the same governed one-tool turn on
         agents with no watcher and with sinks; cases take turns in every
         repetition, and a cost is the median of each sample against its
         no-sink neighbour, so the machine's slow spells land on both sides.
Role:    bench; ``uv run python bench/sinks.py`` (``--quick``, ``--no-redis``).
Emits:   nothing of helmlog's; a summary and one JSON line on stdout.

Target (issue 8 item 8): the attached sink costs at most 15 % of turns/s.
The headline is ``OtelProcess`` (the sink in a child process, as helmlog
attaches it for live export); the in-process forms and the SDK's own floor
are reported beside it. What each case measures and why: docs/design.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_discard import Discard, discarding_exporters

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog._embedded import embedded_redis
from helmlog.events import EventStore, MemoryEventStore, open_event_store
from helmlog.runtime.providers import (
    ProviderRequest,
    Reply,
    ScriptedProvider,
    ToolCallRequest,
    scripted,
)
from helmlog.sinks import FinishedTelemetry, OtelProcess, OtelSink

REPETITIONS = 15
TURNS = 300
WARMUP_TURNS = 200
TARGET_COST = 0.15
FACTS_PER_TURN = 4  # decision facts of one bench turn (3 passes, 1 stamp)
FLOOR_TURNS = 1000  # turns of bare SDK work per floor sample
REDIS_TURNS_DIVISOR = 3  # a Redis-recorded turn is slower: fewer per sample
ANSWER = "Done."


@tool(inline=True)
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


def respond(request: ProviderRequest) -> Reply:
    """One tool call for a fresh user message, else the final answer."""
    if request.messages[-1].role == "user":
        return Reply(
            tool_calls=[ToolCallRequest(id="c0", name="lookup", args={"order": 7})],
            usage={"input_tokens": 40, "output_tokens": 9},
        )
    return Reply(content=ANSWER, usage={"input_tokens": 60, "output_tokens": 2})


def governed_links() -> list[ToolMiddleware]:
    """Three pass-throughs at before-tool, one transform at after-tool."""
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda res: allow({**res.result, "checked": True}, "stamped"),
    )
    return [*passes, stamp]


class Noop:
    """A watcher that does nothing: the runtime's cost of having one."""

    def on_event(self, event: Any) -> None:
        return None


def discarding_providers() -> tuple[TracerProvider, LoggerProvider]:
    """An in-process sink's providers: the SDK's batch processors, discarded."""
    exporter = Discard()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return tracer_provider, logger_provider


def sdk_floor_us_per_turn(turns: int) -> float:
    """Microseconds the OTel SDK alone spends on one turn's telemetry.

    What ``OtelSink`` asks of the SDK per bench turn, without the sink: an
    ``invoke_agent`` span, two ``chat`` spans (usage set at their end), one
    ``execute_tool`` span, and one log record per fact, on batch processors.
    """
    from opentelemetry import trace
    from opentelemetry._logs import LogRecord

    tracer_provider, logger_provider = discarding_providers()
    tracer = tracer_provider.get_tracer("floor")
    logger = logger_provider.get_logger("floor")
    fact = {
        "helmlog.session_id": "0" * 32,
        "helmlog.seq": 7,
        "helmlog.middleware": "pass-0",
        "helmlog.moment": "before-tool",
        "helmlog.at": "tool",
        "helmlog.iteration": 1,
        "helmlog.outcome": "allow",
        "helmlog.changed": False,
        "helmlog.replayed": False,
        "helmlog.tool_name": "lookup",
        "helmlog.tool_call_id": "c0",
    }

    def one_turn() -> None:
        turn = tracer.start_span(
            "invoke_agent helmlog",
            start_time=1,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "helmlog",
                "gen_ai.conversation.id": "0" * 32,
                "helmlog.session_id": "0" * 32,
                "helmlog.replayed": False,
                "helmlog.turn": 1,
            },
        )
        under = trace.set_span_in_context(turn)
        for iteration in (1, 2):
            chat = tracer.start_span(
                "chat bench",
                context=under,
                kind=trace.SpanKind.CLIENT,
                start_time=2,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "bench",
                    "gen_ai.conversation.id": "0" * 32,
                    "helmlog.iteration": iteration,
                },
            )
            chat.set_attributes(
                {
                    "helmlog.tool_call_count": 1,
                    "gen_ai.usage.input_tokens": 40,
                    "gen_ai.usage.output_tokens": 9,
                    "gen_ai.response.finish_reasons": ("stop",),
                }
            )
            chat.end(end_time=3)
        call = tracer.start_span(
            "execute_tool lookup",
            context=under,
            start_time=4,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "c0",
                "helmlog.iteration": 1,
            },
        )
        at_tool = trace.set_span_in_context(call)
        for _ in range(FACTS_PER_TURN):
            logger.emit(
                LogRecord(
                    timestamp=5,
                    context=at_tool,
                    event_name="helmlog.middleware.decision",
                    body="pass-0 allow at before-tool",
                    attributes=fact,
                )
            )
        call.end(end_time=6)
        turn.end(end_time=7)

    for _ in range(min(turns, WARMUP_TURNS)):
        one_turn()
    samples = []
    for _ in range(3):
        gc.collect()
        started = time.perf_counter()
        for _ in range(turns):
            one_turn()
        samples.append((time.perf_counter() - started) / turns * 1e6)
    tracer_provider.shutdown()
    logger_provider.shutdown()
    return statistics.median(samples)


class Case:
    """One agent, its provider, and the samples taken of it."""

    def __init__(
        self,
        label: str,
        store: EventStore,
        *,
        watched: bool = False,
        inline: bool = False,
        noop: bool = False,
        process: bool = False,
        direct: bool = False,
    ) -> None:
        self.label = label
        self.model: ScriptedProvider = scripted(respond=respond)
        builder = (
            Agent.create(provider=self.model, model="bench", store=store)
            .system("Look up.")
            .tool(lookup)
            .tool_middleware(*governed_links())
        )
        self.exporter = Discard()
        self.tracer_provider = TracerProvider()
        self.logger_provider = LoggerProvider()
        if watched:
            self.tracer_provider.add_span_processor(BatchSpanProcessor(self.exporter))
            self.logger_provider.add_log_record_processor(
                BatchLogRecordProcessor(self.exporter)
            )
            builder = builder.watch(
                OtelSink(
                    self.tracer_provider, self.logger_provider, deferred=not inline
                )
            )
        elif noop:
            builder = builder.watch(Noop())
        self.direct: FinishedTelemetry | None = None
        if direct:
            self.direct = FinishedTelemetry(self.exporter, self.exporter)
            builder = builder.watch(OtelSink(self.direct, self.direct))
        self.process: OtelProcess | None = None
        if process:
            self.process = OtelProcess(setup=discarding_exporters)
            builder = builder.watch(self.process)
        self.agent = builder.build()
        self.samples: list[float] = []
        self.paired: list[float] = []  # the no-sink sample taken next to each

    async def run(self, turns: int) -> float:
        """Seconds for ``turns`` fresh runs, each one governed turn."""
        agent, requests = self.agent, self.model.requests
        started = time.perf_counter()
        for _ in range(turns):
            out = await agent.run("Look my order up.")
            requests.clear()  # the scripted provider's test evidence
            if out != ANSWER:
                raise RuntimeError(f"{self.label}: unexpected answer {out!r}")
        await agent.idle()
        if self.process is not None:
            self.process.flush()  # the child's work is done inside the timing
        if self.direct is not None:
            self.direct.flush()  # its export thread's work too
        return time.perf_counter() - started

    async def sample(self, turns: int) -> None:
        self.samples.append(turns / await self.run(turns))

    @property
    def cost(self) -> float:
        """``1 - turns/s against no sink``: the median over repetitions of
        each sample against the no-sink sample taken next to it."""
        pairs = zip(self.samples, self.paired, strict=True)
        return 1 - statistics.median(mine / theirs for mine, theirs in pairs)

    @property
    def turns_per_s(self) -> float:
        return statistics.median(self.samples)

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
        if self.direct is not None:
            self.direct.shutdown()
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


async def measure(
    repetitions: int, turns: int, store_url: str | None = None
) -> dict[str, Any]:
    """The six cases, interleaved, each on its own store; the JSON result."""
    stores: list[EventStore] = [
        MemoryEventStore() if store_url is None else open_event_store(store_url)
        for _ in range(6)
    ]
    bare = Case("no sink", stores[0])
    noop = Case("noop watcher", stores[1], noop=True)
    otel = Case("otel", stores[2], watched=True)
    process = Case("otel process", stores[3], process=True)
    inline = Case("otel inline", stores[4], watched=True, inline=True)
    direct = Case("otel direct", stores[5], direct=True)
    watched = [noop, otel, process, inline, direct]
    cases = [bare, *watched]
    for case in cases:
        await case.run(min(turns, WARMUP_TURNS))
    for repetition in range(repetitions):
        # Each watched sample has a no-sink sample next to it, before it in
        # one repetition and after it in the next; each repetition starts
        # at the next case.
        at = repetition % len(watched)
        for case in watched[at:] + watched[:at]:
            for one in (bare, case) if repetition % 2 == 0 else (case, bare):
                gc.collect()
                await one.sample(turns)
            case.paired.append(bare.samples[-1])
    for case in cases:
        case.close()
    for store in stores:
        await store.close()
    cost = otel.cost
    process_cost = process.cost
    floor = sdk_floor_us_per_turn(FLOOR_TURNS)
    turn_us = 1e6 / bare.turns_per_s
    return {
        "bench": "sinks",
        "turns_per_s_no_sink": round(bare.turns_per_s, 1),
        # The headline: the sink as attached for live export, in its child.
        "turns_per_s_otel": round(process.turns_per_s, 1),
        "otel_cost": round(process_cost, 3),
        "target_cost": TARGET_COST,
        "met": process_cost <= TARGET_COST,
        "turns_per_s_noop_watcher": round(noop.turns_per_s, 1),
        "noop_watcher_cost": round(noop.cost, 3),
        "turns_per_s_otel_in_process": round(otel.turns_per_s, 1),
        "otel_in_process_cost": round(cost, 3),
        "otel_in_process_own_cost": round(1 - (1 - cost) / (1 - noop.cost), 3),
        "met_in_process": cost <= TARGET_COST,
        "turns_per_s_otel_inline": round(inline.turns_per_s, 1),
        "otel_inline_cost": round(inline.cost, 3),
        "turns_per_s_otel_direct": round(direct.turns_per_s, 1),
        "otel_direct_cost": round(direct.cost, 3),
        "turn_us_no_sink": round(turn_us, 1),
        "sdk_floor_us_per_turn": round(floor, 1),
        "sdk_floor_cost": round(1 - 1 / (1 + floor / turn_us), 3),
        "spans_exported": otel.exporter.spans,
        "records_exported": otel.exporter.records,
        "repetitions": repetitions,
        "turns_per_sample": turns,
    }


def summary(result: dict[str, Any], where: str = "memory") -> str:
    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    return "\n".join(
        [
            "helmlog OtelSink cost: governed one-tool turns, "
            f"{where} store, median of {result['repetitions']} paired samples",
            f"  no sink     {result['turns_per_s_no_sink']:10,.0f} turns/s",
            f"  OtelProcess {result['turns_per_s_otel']:10,.0f} turns/s  "
            f"cost {result['otel_cost']:.1%}  target <= {TARGET_COST:.0%}: "
            f"{verdict(result['met'])} (attached for live export: the sink in"
            " its child)",
            f"  noop watch  {result['turns_per_s_noop_watcher']:10,.0f} turns/s  "
            f"cost {result['noop_watcher_cost']:.1%} (the runtime's delivery)",
            f"  in process  {result['turns_per_s_otel_in_process']:10,.0f} turns/s  "
            f"cost {result['otel_in_process_cost']:.1%} "
            f"(own {result['otel_in_process_own_cost']:.1%}): "
            f"{verdict(result['met_in_process'])} (OtelSink on the SDK's"
            " providers, deferred)",
            f"  inline      {result['turns_per_s_otel_inline']:10,.0f} turns/s  "
            f"cost {result['otel_inline_cost']:.1%} (OtelSink(deferred=False))",
            f"  direct      {result['turns_per_s_otel_direct']:10,.0f} turns/s  "
            f"cost {result['otel_direct_cost']:.1%} (OtelSink on FinishedTelemetry,"
            " in process)",
            f"  exported    {result['spans_exported']:,} spans, "
            f"{result['records_exported']:,} decision records (in process)",
            f"  SDK floor   {result['sdk_floor_us_per_turn']:10,.1f} us/turn  "
            f"= {result['sdk_floor_cost']:.1%} of a {result['turn_us_no_sink']:,.0f}"
            " us turn (the least an in-process SDK sink costs)",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--no-redis", action="store_true", help="memory store only")
    args = parser.parse_args()
    repetitions, turns = (3, 50) if args.quick else (REPETITIONS, TURNS)
    result = asyncio.run(measure(repetitions, turns))
    print(summary(result))
    if not args.no_redis:
        with embedded_redis() as url:
            on_redis = asyncio.run(
                measure(repetitions, max(1, turns // REDIS_TURNS_DIVISOR), url)
            )
        print(summary(on_redis, "redis"))
        result["redis"] = {k: v for k, v in on_redis.items() if k != "bench"}
        result["met_redis"] = on_redis["met"]
        result["met_in_process_redis"] = on_redis["met_in_process"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
