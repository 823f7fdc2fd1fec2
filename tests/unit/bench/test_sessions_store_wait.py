"""``bench/sessions.py``'s store wait: the figure issue 29 item 1 names.

Pattern: the bench module loaded from its file; its pure figure and target
         functions checked on given waits, and its timed store on a real
         Redis (a timed session's append adds its wait; others go as they
         are).
Role:    unit tests of the sessions bench's store-wait figure.
Emits:   nothing.

Laws: issue 29 item 1 ("the store's p50 wait <= 5 ms at 1,000 users": a
target the run reports, measured); STYLE.md (figures live in the bench,
never in a timed test: nothing here times anything).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helmlog.events import TurnStarted
from helmlog.events.lowlevel import seal
from tests.fixtures_redis import RedisServer

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_sessions", ROOT / "bench" / "sessions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_sessions", module)
    spec.loader.exec_module(module)
    return module


def test_issue29_store_wait_is_reported_as_p50_p99_and_its_target() -> None:
    """Issue 29 item 1: the timed turns' waits give p50 and p99 and how many
    turns were timed; the 5 ms target is judged on the Redis case's p50 at
    1,000 users, and absent when the run has no such figure."""
    bench = _bench()
    wait = bench.store_wait_of(sorted([float(ms) for ms in range(1, 101)]))
    assert {"p50_ms": 51.0, "p99_ms": 100.0, "turns": 100} == wait
    fast = {"1000": {"helmlog_redis": {"p50_ms": 4.9, "p99_ms": 9.0, "turns": 9}}}
    slow = {"1000": {"helmlog_redis": {"p50_ms": 5.1, "p99_ms": 9.0, "turns": 9}}}
    met = [
        bench.targets({}, {}, w).get("redis_store_wait_p50_le_5ms")
        for w in (fast, slow, {"100": fast["1000"]}, None)
    ]
    assert [True, False, None, None] == met


@pytest.mark.redis
@pytest.mark.asyncio(loop_scope="session")
async def test_issue29_the_timed_store_adds_a_timed_sessions_waits_only(
    private_redis: RedisServer,
) -> None:
    """Issue 29 item 1: the bench's timed Redis store appends as the store
    does (the seq comes back) and adds the wait of a timed session's sealed
    appends (the journal's way in) to its entry; an untimed session's
    appends leave no entry."""
    bench = _bench()
    store = bench.TimedRedisEventStore.from_url(private_redis.url)
    try:
        store.waits["timed"] = 0.0
        seqs = []
        for sid in ("timed", "untimed"):
            # The journal's way in: sealed records and their events.
            events, records = seal(
                sid, [TurnStarted(turn=1)], after_seq=0, prev_hash=""
            )
            seqs.append(await store.append_sealed(sid, records, 0, events=events))
        seqs.append(await store.append("timed", [TurnStarted(turn=2)], 1))
        assert [1, 1, 2] == seqs
        assert ["timed"] == list(store.waits)
        assert store.waits["timed"] > 0.0
    finally:
        await store.close()
