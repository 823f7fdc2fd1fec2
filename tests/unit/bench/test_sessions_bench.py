"""``bench/sessions.py --quick`` runs and prints its one JSON line (issue 29).

Pattern: a smoke run of the script as a user runs it (a subprocess, its own
         redis-server), then checks of the line's shape and of what the
         stub's latency makes certain; no timing is a target here.
Role:    unit-level smoke test of the sessions bench.
Emits:   nothing.

Laws: issue 29 (the table reproducible: every case measured in one run,
each in its own process, with the figures the issue names); STYLE.md
(figures live in the bench, never in a timed test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
FIGURES = {
    "turns",
    "turns_per_s",
    "turns_per_s_per_core",
    "cpu_us_per_turn",
    "redis_cpu_us_per_turn",
    "redis_cores",
    "p50_ms",
    "p99_ms",
    "gc_collections",
    "gc_max_ms",
    "gc_over_20ms",
    "gc_young_max_ms",
    "gc_older_collections",
    "gc_older_max_ms",
    "gc_full_collections",
    "gc_full_max_ms",
    "memory_per_session_bytes",
    "stalled_windows",
}


def test_sessions_bench_quick_measures_every_case_in_one_run() -> None:
    """Issue 29: one ``--quick`` run measures helmlog on memory and Redis,
    LangChain and the Agents SDK, each in its own process with every figure,
    and the ratios."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sessions.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
    )
    assert 0 == done.returncode, done.stderr[-2000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])

    assert "sessions" == line["bench"]
    # Every case on the loop helmlog's servers run on (uvicorn, Ray actors).
    assert "uvloop" == line["loop"]
    assert {} == line["skipped"]  # both frameworks are in the dev group
    (users,) = line["results"]
    cases = line["results"][users]
    assert {"helmlog_memory", "helmlog_redis", "langchain", "openai_agents"} == set(
        cases
    )
    for name, figures in cases.items():
        assert FIGURES == set(figures), name
        assert (figures["turns"] > 0, 0) == (True, figures["stalled_windows"]), name
        assert figures["cpu_us_per_turn"] > 0, name
        # Two model calls of 50 ms each: no turn is faster than 100 ms.
        assert 100.0 <= figures["p50_ms"] <= figures["p99_ms"], name
        assert figures["memory_per_session_bytes"] > 0, name
    # Only the Redis case counts a server's CPU (in clock ticks: a short
    # window may see none).
    assert cases["helmlog_redis"]["redis_cpu_us_per_turn"] >= 0
    assert 0 == cases["helmlog_memory"]["redis_cpu_us_per_turn"]
    assert {
        "redis_vs_memory_cpu",
        "redis_with_server_vs_memory_cpu",
        "memory_vs_langchain",
        "redis_vs_langchain",
        "memory_vs_openai_agents",
        "redis_vs_openai_agents",
    } == set(line["ratios"][users])
    assert line["versions"]["langchain"] != "not installed"
    # Each case in a process of its own, each settling its own collector.
    assert "a process per case" == line["isolation"]
    frozen = line["frozen_objects_per_case"][users]
    assert set(cases) == set(frozen), frozen
    assert all(n > 0 for n in frozen.values()), frozen
