"""Benchmark what-if: recorded governed turns re-judged per second, from memory.

Pattern: a micro-benchmark in one process: record once, then the median of
         timed repetitions of re-judging the whole record under a changed
         policy (a fourth before-tool link, so every turn is walked in full).
Role:    bench; ``uv run python bench/whatif.py`` (``--quick``).
Emits:   nothing of helmlog's; a summary and one JSON line on stdout.

Measures: ``turns_per_s`` (``WhatIf.session`` over decoded streams),
``verified_turns_per_s`` (end to end through ``helmlog.whatif``, chains
verified, R19), and the same in CPU time (``cpu_*``).
Target: ``turns_per_s`` >= 10,000 (issue 13).

Why turns and not decisions: a turn is what a policy change is asked about;
each holds five decisions here. Details: docs/design.md.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from typing import Any

import helmlog
from helmlog import Agent, MessageMiddleware, ToolMiddleware, allow, tool
from helmlog.events import Event, StoredEvent, UnknownEvent
from helmlog.runtime.lowlevel import WhatIf
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted

SESSIONS = 200
TURNS = 10
REPETITIONS = 7
TARGET_TURNS_PER_S = 10_000.0
ANSWER = "Done."


@tool
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


def respond(request: ProviderRequest) -> Reply:
    """A lookup for a fresh user message, else the final answer."""
    if request.messages[-1].role == "user":
        call = ToolCallRequest(id="c1", name="lookup", args={"order": 7})
        return Reply(tool_calls=[call])
    return Reply(content=ANSWER)


def desk(extra_link: bool = False) -> Agent:
    """The governed one-tool desk; ``extra_link`` is the changed policy."""
    links = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    if extra_link:
        links.append(ToolMiddleware(name="new-rule", on_tool_call=lambda c: allow()))
    links.append(
        ToolMiddleware(
            name="stamp",
            on_tool_result=lambda res: allow({**res.result, "checked": True}, "ok"),
        )
    )
    quiet = MessageMiddleware(name="quiet", on_message=lambda m: allow())
    return (
        Agent.create(provider=scripted(respond=respond), model="bench")
        .tool(lookup)
        .tool_middleware(*links)
        .message_middleware(quiet)
        .build()
    )


async def recorded(sessions: int, turns: int) -> list[list[StoredEvent]]:
    """Record the sessions live; their stored records, session by session."""
    agent = desk()
    out: list[list[StoredEvent]] = []
    for _ in range(sessions):
        answer = await agent.run("Look my order up.")
        for _ in range(turns - 1):
            answer = await agent.follow_up("And again.")
        if answer != ANSWER:
            raise RuntimeError(f"unexpected answer {answer!r}")
        sid = agent.session_id
        assert sid is not None
        out.append(await agent.store.read(sid))
    return out


async def measure(sessions: int, turns: int, repetitions: int) -> dict[str, Any]:
    """Both paths, interleaved per repetition: wall-clock and CPU time."""
    streams = await recorded(sessions, turns)
    records = [r for stream in streams for r in stream]
    decoded: list[tuple[str, list[Event | UnknownEvent]]] = [
        (s[0].session_id, [r.decode() for r in s]) for s in streams
    ]
    changed = desk(extra_link=True)
    engine = WhatIf(changed.config)
    report = await helmlog.whatif(records, changed)  # warm up, and check
    if report.flipped or len(report.sessions) != sessions:
        raise RuntimeError("the bench's policy change must flip nothing")
    total = sessions * turns
    samples: dict[str, list[float]] = {k: [] for k in ("wall", "cpu", "vwall", "vcpu")}

    async def rejudge() -> None:
        for sid, events in decoded:
            await engine.session(sid, events)

    async def verified() -> None:
        await helmlog.whatif(records, changed)

    for _ in range(repetitions):
        for run, wall, cpu in ((rejudge, "wall", "cpu"), (verified, "vwall", "vcpu")):
            gc.collect()
            started, cpu_started = time.perf_counter(), time.process_time()
            await run()
            samples[wall].append(total / (time.perf_counter() - started))
            samples[cpu].append(total / (time.process_time() - cpu_started))
    rate = {k: round(statistics.median(v)) for k, v in samples.items()}
    return {
        "bench": "whatif",
        "turns_per_s": rate["wall"],
        "cpu_turns_per_s": rate["cpu"],
        "verified_turns_per_s": rate["vwall"],
        "verified_cpu_turns_per_s": rate["vcpu"],
        "decisions_per_turn": round(report.decisions / total, 2),
        "sessions": sessions,
        "turns": total,
        "target_turns_per_s": TARGET_TURNS_PER_S,
        "target_met": rate["wall"] >= TARGET_TURNS_PER_S,
    }


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    sessions, reps = (20, 2) if quick else (SESSIONS, REPETITIONS)
    r = asyncio.run(measure(sessions, TURNS, reps))
    met = "met" if r["target_met"] else "MISSED"
    print(
        f"helmlog what-if: {r['turns']:,} recorded governed turns "
        f"({r['sessions']} sessions) from memory, median of {reps}"
    )
    print(
        f"  re-judge (fold + walks)     {r['turns_per_s']:>8,} turns/s "
        f"(cpu {r['cpu_turns_per_s']:,})  target >= {TARGET_TURNS_PER_S:,.0f}: {met}"
    )
    print(
        f"  with verify + decode        {r['verified_turns_per_s']:>8,} turns/s "
        f"(cpu {r['verified_cpu_turns_per_s']:,})"
    )
    print(f"  decisions per turn          {r['decisions_per_turn']:>8}")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
