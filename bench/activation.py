"""Benchmark activation: a session of 10,000 events, folded from its stream.

Pattern: one script, one run, its own ``redis-server`` on a free port; a human
         summary, then exactly one JSON line for machines.
Role:    bench; ``uv run python bench/activation.py`` (``--events N``,
         ``--quick``). Decides whether snapshots (R15) are needed: activating
         10,000 events should take under ~50 ms.
Emits:   the summary, ending with ``{"bench": "activation", "events",
         "memory_ms", "redis_ms", "redis_read_ms", "fold_ms"}``.

Laws: R6 (activation reads and folds, appends nothing), R21, R15.

What is measured (a real agent's governed session, a fresh agent's first
use of it, each figure the best of several runs): docs/design.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import EventStore, MemoryEventStore, fold, open_event_store
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted

ROOT = Path(__file__).resolve().parents[1]


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} shipped on 2026-11-30, tracking 1Z{order:012d}"


def model(request: ProviderRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "user":
        n = sum(1 for m in request.messages if m.role == "user")
        call = ToolCallRequest(id=f"c{n}", name="lookup", args={"order": n})
        return Reply(tool_calls=[call], usage={"input": 120, "output": 18})
    return Reply(content=f"Your order is on its way: {last.content}.")


def desk(store: EventStore) -> Agent:
    return (
        Agent.create(provider=scripted(respond=model), model="m", store=store)
        .tool(lookup)
        .tool_middleware(ToolMiddleware(name="audit", on_tool_call=lambda c: allow()))
        .build()
    )


async def record_session(events: int) -> tuple[MemoryEventStore, str]:
    """A real agent's session on the memory store, at least ``events`` long."""
    store = MemoryEventStore()
    agent = desk(store)
    await agent.run("where is my order?")
    sid = agent.session_id
    assert sid is not None
    while len(await store.read(sid)) < events:
        await agent.follow_up("and the next one?")
    return store, sid


async def best_ms(runs: int, body: Callable[[], Awaitable[Any]]) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        await body()
        best = min(best, time.perf_counter() - started)
    return best * 1000.0


async def measure(events: int, runs: int, redis_url: str) -> dict[str, Any]:
    memory, sid = await record_session(events)
    records = await memory.read(sid)

    async def activate_on(store: EventStore) -> None:
        assert await desk(store).recover(sid) is None

    async def fold_records() -> None:
        fold(r.decode() for r in records)

    memory_ms = await best_ms(runs, lambda: activate_on(memory))
    fold_ms = await best_ms(runs, fold_records)
    redis = open_event_store(redis_url)
    try:
        for start in range(0, len(records), 1000):
            batch = records[start : start + 1000]
            await redis.append_sealed(sid, batch, start)
        redis_ms = await best_ms(runs, lambda: activate_on(redis))
        redis_read_ms = await best_ms(runs, lambda: redis.read(sid))
    finally:
        await redis.close()
    return {
        "bench": "activation",
        "events": len(records),
        "memory_ms": round(memory_ms, 2),
        "redis_ms": round(redis_ms, 2),
        "redis_read_ms": round(redis_read_ms, 2),
        "fold_ms": round(fold_ms, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="1,000 events, 3 runs")
    args = parser.parse_args()
    events, runs = (1_000, 3) if args.quick else (args.events, 9)
    sys.path.insert(0, str(ROOT))
    from tests.fixtures_redis import RedisServer

    with RedisServer() as server:
        line = asyncio.run(measure(events, runs, server.url))
    print(
        f"activation of {line['events']} events: memory {line['memory_ms']} ms, "
        f"redis {line['redis_ms']} ms (read {line['redis_read_ms']} ms), "
        f"decode + fold {line['fold_ms']} ms (best of {runs})"
    )
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
