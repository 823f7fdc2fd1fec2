"""Benchmark the cluster: governed turns through 2 session hosts against one process.

Pattern: one script, one run, its own ``redis-server`` on a free port and its
         own local Ray; a human summary, then exactly one JSON line.
Role:    bench; ``uv run python bench/cluster.py`` (``--quick``). Measures, on
         the same Redis: turns/s in one process and through 2 hosts, bare
         round trips, a burst of new sessions, memory per idle session, and
         what idle eviction leaves resident.
Emits:   the summary, ending with ``{"bench": "cluster", ...}``.

Laws: R8, R17, R21, issue 7 item 4 (not slower than one process).

The turn is the refund desk's (``demo_agent`` on both sides, its model
answered from the request); the JSON fields and targets: docs/design.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from helmlog._demo import TURNS, demo_agent, run_session
from helmlog.events import EventStore, open_event_store

# tests.fixtures_redis (the RedisServer the bench starts) lives in the repo.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_RATIO = 0.8
TARGET_BYTES = 20_000
MAX_RESIDENT = 2_000


async def _sessions(store: EventStore, count: int, make: Any) -> tuple[float, int]:
    """Run ``count`` demo sessions at once; (turns/s, failed sessions)."""
    started = time.perf_counter()
    outcomes = await asyncio.gather(
        *(run_session(store, make()) for _ in range(count)), return_exceptions=True
    )
    elapsed = time.perf_counter() - started
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed and isinstance(failed[0], Exception):
        print(f"  first failure: {type(failed[0]).__name__}: {failed[0]}")
    turns = len(TURNS) * (count - len(failed))
    return turns / elapsed, len(failed)


async def run(
    quick: bool, concurrency: int | None = None, rounds: int | None = None
) -> dict[str, Any]:
    """Every measurement, in one run."""
    from helmlog.actors import Cluster
    from tests.fixtures_redis import RedisServer

    concurrency = concurrency or (200 if quick else 1_000)
    rounds = rounds or (2 if quick else 4)
    burst = 1_000 if quick else 5_000
    out: dict[str, Any] = {"concurrency": concurrency, "max_resident": MAX_RESIDENT}
    with RedisServer() as server:
        url = server.url
        store = open_event_store(url)
        cluster = Cluster.local(
            url,
            name="bench",
            n_hosts=2,
            num_cpus=2,
            max_resident=MAX_RESIDENT,
            idle_s=3600.0,
        )
        try:
            agent = cluster.agent(demo_agent)
            await _sessions(store, 100, agent.client)  # warm both paths
            await _sessions(store, 100, lambda: demo_agent(store))
            single, clustered = [], []
            for _ in range(rounds):
                s, fail_s = await _sessions(
                    store, concurrency, lambda: demo_agent(store)
                )
                c, fail_c = await _sessions(store, concurrency, agent.client)
                single.append(s)
                clustered.append(c)
                print(f"  round: one process {s:,.0f} turns/s, cluster {c:,.0f}")
                assert fail_s == fail_c == 0, (fail_s, fail_c)
            usage = await cluster.usage()
            out["ops_per_batch"] = sum(u.ops for u in usage) / max(
                1, sum(u.batches for u in usage)
            )
            out["results_per_group"] = sum(u.ops for u in usage) / max(
                1, sum(u.groups for u in usage)
            )
            out["turns_per_s_single_process"] = max(single)
            out["turns_per_s_cluster"] = max(clustered)

            pings = 2_000 if quick else 20_000
            started = time.perf_counter()
            await cluster.ping(pings)
            out["bare_roundtrips_per_s"] = pings / (time.perf_counter() - started)

            await cluster.evict(0.0)
            evicted_before = sum(u.evicted for u in await cluster.usage())
            _rate, failed = await _sessions(store, burst, agent.client)
            out["burst_sessions"] = burst
            out["failed_turns"] = failed * len(TURNS)
            usage = await cluster.usage()
            # The burst holds more sessions per host than max_resident: the
            # hosts dropped the least recently used idle ones as it ran.
            out["resident_after_eviction"] = max(u.resident for u in usage)
            out["evicted_in_burst"] = sum(u.evicted for u in usage) - evicted_before
            await cluster.evict(0.0)
            usage = await cluster.usage()
            out["resident_after_idle_sweep"] = max(u.resident for u in usage)

            out["bytes_per_idle_session"] = await _bytes_per_session(
                cluster, agent, store, 300 if quick else 1_000
            )
        finally:
            await cluster.shutdown(hosts=True)
            await store.close()
    return out


async def _bytes_per_session(
    cluster: Any, agent: Any, store: EventStore, count: int
) -> float:
    """Traced bytes the hosts free by dropping ``count`` idle sessions, each."""
    links = cluster._running()
    await asyncio.gather(*(k.handle.trace_memory.remote(True) for k in links))
    try:
        await _sessions(store, count, agent.client)
        before = sum(u.traced_bytes for u in await cluster.usage(collect=True))
        dropped = await cluster.evict(0.0)
        after = sum(u.traced_bytes for u in await cluster.usage(collect=True))
    finally:
        await asyncio.gather(*(k.handle.trace_memory.remote(False) for k in links))
    return (before - after) / max(1, dropped)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--concurrency", type=int, help="sessions at once")
    parser.add_argument("--rounds", type=int, help="interleaved rounds")
    args = parser.parse_args()
    r = asyncio.run(run(args.quick, args.concurrency, args.rounds))
    ratio = r["turns_per_s_cluster"] / r["turns_per_s_single_process"]
    ok = {
        "ratio": ratio >= TARGET_RATIO,
        "burst": r["failed_turns"] == 0,
        "memory": r["bytes_per_idle_session"] <= TARGET_BYTES,
        "eviction": r["resident_after_eviction"] <= r["max_resident"],
    }

    def mark(name: str) -> str:
        return "ok  " if ok[name] else "MISS"

    print(
        f"helmlog cluster benchmark (2 hosts, {r['concurrency']} concurrent sessions)"
    )
    print(
        f"  [{mark('ratio')}] cluster {r['turns_per_s_cluster']:,.0f} turns/s vs one "
        f"process {r['turns_per_s_single_process']:,.0f} -> {ratio:.2f}x "
        f"(target >= {TARGET_RATIO}x)"
    )
    print(
        f"         {r['ops_per_batch']:.1f} operations per batch, "
        f"{r['results_per_group']:.1f} results per reply group"
    )
    print(f"         bare round trips {r['bare_roundtrips_per_s']:,.0f}/s (batched)")
    print(
        f"  [{mark('burst')}] burst of {r['burst_sessions']:,} new sessions: "
        f"{r['failed_turns']} failed turns"
    )
    print(
        f"  [{mark('memory')}] {r['bytes_per_idle_session']:,.0f} bytes per idle "
        f"resident session (target <= {TARGET_BYTES:,})"
    )
    print(
        f"  [{mark('eviction')}] resident per host after the burst: "
        f"{r['resident_after_eviction']:,} ({r['evicted_in_burst']:,} dropped; "
        f"max_resident {r['max_resident']:,}); after an idle sweep "
        f"{r['resident_after_idle_sweep']}"
    )
    line = {
        "bench": "cluster",
        "turns_per_s_cluster": round(r["turns_per_s_cluster"]),
        "turns_per_s_single_process": round(r["turns_per_s_single_process"]),
        "ratio": round(ratio, 3),
        "bare_roundtrips_per_s": round(r["bare_roundtrips_per_s"]),
        "failed_turns": r["failed_turns"],
        "burst_sessions": r["burst_sessions"],
        "bytes_per_idle_session": round(r["bytes_per_idle_session"]),
        "resident_after_eviction": r["resident_after_eviction"],
        "resident_after_idle_sweep": r["resident_after_idle_sweep"],
        "evicted_in_burst": r["evicted_in_burst"],
        "max_resident": r["max_resident"],
        "concurrency": r["concurrency"],
        "targets_met": all(ok.values()),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
