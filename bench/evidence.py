"""Benchmark evidence: the cost of signed heads per turn, verification, proof size.

Pattern: bench/turns.py's shape: one long-lived agent per configuration, each
         turn a fresh ``agent.run`` of one governed tool call; configurations
         (no key / a signing key) take turns in every repetition; medians.
Role:    bench; ``uv run python bench/evidence.py``; a summary and one JSON line.
Emits:   nothing of helmlog's; stdout only.

Measures: (a) turns/s without and with a signing key, on the memory store and
on a real Redis (started here, ``tests/fixtures_redis``); target: signing
costs at most 10% on Redis; (b) bundle verification of 20-event sessions per
second on one core (target >= 1,000); (c) inclusion and consistency proof
size against log size (logarithmic).

Why a fresh session per turn: each turn is then exactly one signed head (a
batch ending the turn), the cost a deployment pays per turn.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    EventStore,
    HeadSigner,
    Message,
    MessageCommitted,
    open_event_store,
)
from helmlog.events.lowlevel import seal
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted
from helmlog_evidence import (
    HeadLog,
    SessionHead,
    SigningKey,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    make_bundle,
    verify,
)

REPETITIONS = 7
TURNS = 150
WARMUP_TURNS = 60
ANSWER = "Done."
TARGET_OVERHEAD = 0.10
TARGET_VERIFY_PER_S = 1_000.0
KEY = SigningKey.generate("bench")


@tool(inline=True)
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


def respond(request: ProviderRequest) -> Reply:
    if request.messages[-1].role == "user":
        call = ToolCallRequest(id="c1", name="lookup", args={"order": 7})
        return Reply(tool_calls=[call])
    return Reply(content=ANSWER)


def agent_on(store: EventStore, signer: HeadSigner | None) -> Agent:
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    builder = Agent.create(
        provider=scripted(respond=respond), model="bench", store=store, signer=signer
    )
    return builder.system("Look up.").tool(lookup).tool_middleware(*passes).build()


async def timed(agent: Agent, turns: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) per turn over ``turns``."""
    provider: Any = agent.config.provider
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(turns):
        out = await agent.run("Look my order up.")
        provider.requests.clear()
        if out != ANSWER:
            raise RuntimeError(f"unexpected answer {out!r}")
    return (
        (time.perf_counter() - wall) / turns,
        (time.process_time() - cpu) / turns,
    )


async def signing_cost(url: str | None) -> dict[str, float]:
    """Per turn without and with a key on one store, alternated; medians.

    The overhead is of this process's CPU time per turn: the machine may be
    shared, and wall time then measures the neighbours. On Redis the wall
    figures are reported beside it (they include the server's round trips).
    """
    plain_store = open_event_store(url)
    signed_store = open_event_store(url)
    agents = {
        "plain": agent_on(plain_store, None),
        "signed": agent_on(signed_store, HeadSigner(KEY)),
    }
    walls: dict[str, list[float]] = {name: [] for name in agents}
    cpus: dict[str, list[float]] = {name: [] for name in agents}
    try:
        for agent in agents.values():
            await timed(agent, WARMUP_TURNS)
        for rep in range(REPETITIONS):
            order = list(agents) if rep % 2 == 0 else list(reversed(agents))
            for name in order:
                gc.collect()
                wall, cpu = await timed(agents[name], TURNS)
                walls[name].append(wall)
                cpus[name].append(cpu)
    finally:
        await plain_store.close()
        await signed_store.close()
    cpu_plain, cpu_signed = (statistics.median(cpus[n]) for n in ("plain", "signed"))
    wall_plain, wall_signed = (statistics.median(walls[n]) for n in ("plain", "signed"))
    return {
        "plain_us_cpu": round(cpu_plain * 1e6, 1),
        "signed_us_cpu": round(cpu_signed * 1e6, 1),
        "overhead": round(cpu_signed / cpu_plain - 1, 4),
        "plain_turns_per_s_wall": round(1 / wall_plain, 1),
        "signed_turns_per_s_wall": round(1 / wall_signed, 1),
    }


def twenty_event_bundles(n: int) -> list[Any]:
    """``n`` bundles of 20-event sessions, heads logged in one log."""
    log = HeadLog("bench/heads")
    sessions = []
    for s in range(n):
        sid = f"session-{s}"
        events = [
            MessageCommitted(message=Message(role="user", content=f"m{i} of {sid}"))
            for i in range(20)
        ]
        _e, records = seal(sid, events, after_seq=0, prev_hash="")
        triples = [(r.seq, r.data, r.hash) for r in records]
        head = SessionHead.over(sid, triples, "sha256")
        note = KEY.sign(head.text())
        sessions.append((sid, triples, note, log.append(head.text())))
    checkpoint = log.checkpoint(KEY)
    return [
        make_bundle(sid, triples, note, checkpoint, index, log.leaves)
        for sid, triples, note, index in sessions
    ]


def verification_rate(n: int = 2_000) -> float:
    bundles = twenty_event_bundles(n)
    keys = [KEY.public]
    rates = []
    for _ in range(3):
        started = time.perf_counter()
        for bundle in bundles:
            if not verify(bundle, keys).ok:
                raise RuntimeError("a bench bundle failed to verify")
        rates.append(n / (time.perf_counter() - started))
    return statistics.median(rates)


def proof_sizes() -> dict[str, dict[str, int]]:
    sizes: dict[str, dict[str, int]] = {}
    for n in (10, 100, 1_000, 10_000, 100_000):
        leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
        inclusion = inclusion_proof(n // 3, leaves)
        consistency = consistency_proof(n // 3, leaves)
        sizes[str(n)] = {
            "inclusion_hashes": len(inclusion),
            "consistency_hashes": len(consistency),
            "inclusion_bytes": 32 * len(inclusion),
        }
    return sizes


async def redis_cost() -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.fixtures_redis import RedisServer

    with RedisServer() as server:
        return await signing_cost(server.url)


def main() -> int:
    memory = asyncio.run(signing_cost(None))
    redis = asyncio.run(redis_cost())
    rate = verification_rate()
    sizes = proof_sizes()
    for name, got in (("memory", memory), ("redis", redis)):
        print(
            f"{name}: {got['plain_us_cpu']} -> {got['signed_us_cpu']} us CPU per "
            f"turn signed ({got['overhead']:+.1%}; target <= {TARGET_OVERHEAD:.0%}"
            f"); wall {got['plain_turns_per_s_wall']} -> "
            f"{got['signed_turns_per_s_wall']} turns/s"
        )
    print(f"verify: {rate:,.0f} bundles of 20 events per second on one core")
    for n, size in sizes.items():
        print(
            f"log of {n:>6} heads: inclusion {size['inclusion_hashes']} hashes, "
            f"consistency {size['consistency_hashes']} hashes"
        )
    line = {
        "bench": "evidence",
        "memory": memory,
        "redis": redis,
        "verify_bundles_per_s": round(rate),
        "proof_hashes": {n: s["inclusion_hashes"] for n, s in sizes.items()},
        "targets_met": {
            "redis_overhead": redis["overhead"] <= TARGET_OVERHEAD,
            "verify_per_s": rate >= TARGET_VERIFY_PER_S,
        },
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
