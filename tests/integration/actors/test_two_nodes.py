"""Killing a node moves its sessions to the other node (R22), on a real two-node Ray.

A local cluster of two Ray nodes (``ray.cluster_utils.Cluster``: a head and
a worker) runs held sessions on a named helmlog cluster; the worker node is
killed (its raylet and every process on it) while tools run there. With no
``recover()`` call, the host of the dead node restarts on the head and
finishes those turns per R7; the head's own sessions are untouched; new
sessions of the dead host's index are served on the head. It needs a Ray of
its own, so it runs in a separate driver process (``two_nodes.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from helmlog.events import EventStore, open_event_store, verify_chain

from ...polling import until
from .failover_agents import ANSWER

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.asyncio(loop_scope="session"),
]

DRIVER_TIMEOUT_S = 480
UNKNOWN = (
    "The outcome of tool 'refund' (call c1) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[EventStore]:
    s = open_event_store(redis_url)
    yield s
    await s.close()


def _drive(redis_url: str) -> dict[str, Any]:
    """Run the driver in its own process group; its report, or a failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.actors.two_nodes", redis_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = driver.communicate(timeout=DRIVER_TIMEOUT_S)
    finally:
        if driver.poll() is None:
            # Whatever the driver started goes with its process group.
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert 0 == driver.returncode, stderr[-4000:]
    (line,) = [x for x in stdout.splitlines() if x.startswith("REPORT ")]
    report: dict[str, Any] = json.loads(line.removeprefix("REPORT "))
    return report


def _processes_of(gcs_address: str) -> list[str]:
    """Command lines of live processes that belong to the driver's Ray."""
    out = subprocess.run(
        ["ps", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if gcs_address in line]


async def test_r22_killing_a_node_moves_its_sessions_to_the_other_node(
    redis_url: str, store: EventStore
) -> None:
    """R22, R7, R8: the dead node's sessions finish on the other node, once each."""
    report = _drive(redis_url)

    head, worker = report["head"], report["worker"]
    moved = [s for s in report["sessions"] if s["node"] == worker]
    stayed = [s for s in report["sessions"] if s["node"] == head]
    assert moved, report
    assert len(report["sessions"]) == len(moved) + len(stayed)
    for s in moved:
        sid = s["session_id"]
        assert ("HostUnavailableError", sid) == (s["error"], s["error_session_id"])
        events = [r.decode() for r in await store.read(sid)]
        types = [e.type for e in events]
        assert 1 == types.count("tool.dispatched"), (sid, types)
        assert ["c1"] == [
            e.tool_call_id for e in events if e.type == "tool.outcome_unknown"
        ]
        assert "error.fatal" not in types, (sid, types)
        assert ANSWER + UNKNOWN == events[-1].final_content
        assert verify_chain(await store.read(sid)) is None
    for s in stayed:
        assert ANSWER + f"refunded order {s['order']}" == s.get("answer"), s
    assert {str(s["host"]): head for s in moved} == report["dead_hosts_now_on"]
    assert [] == await store.open_turns()

    await until(
        "the cluster's processes exit",
        lambda: _processes_of(report["gcs_address"]),
        30,
        ok=lambda left: not left,
    )
