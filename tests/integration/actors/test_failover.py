"""Failover is automatic (R22) and one writer wins (R9, R20), on real Ray and Redis.

A host killed mid-tool — by ``ray.kill`` or by SIGKILL of its worker process
— is restarted by Ray, and the restarted host finishes the turn by itself:
nobody calls ``recover()``. The non-idempotent tool ran exactly once and the
model read R7's outcome-unknown text; an idempotent one runs again as attempt
2. Two client processes resuming one checkpoint — with agents of their own on
the shared Redis, or joined to one named cluster's hosts: exactly one
proceeds, the other is refused as ``replayed`` and appends nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from helmlog import is_ask_pause
from helmlog.actors import HostUnavailableError
from helmlog.events import EventStore, verify_chain

if TYPE_CHECKING:
    from helmlog.actors import Cluster

from ...polling import until as _until
from .failover_agents import (
    ANSWER,
    PID_KEY,
    RUNS_KEY,
    card_agent,
    idempotent_agent,
    refund_agent,
)

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")

FINISH_WITHIN_S = 30.0
UNKNOWN = (
    "The outcome of tool 'refund' (call c1) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    from helmlog.actors import Cluster

    # Hosts are named and detached: a name of its own per test, destroyed after.
    c = Cluster.local(redis_url, n_hosts=2, name=f"failover-{uuid.uuid4().hex[:8]}")
    yield c
    await c.shutdown(hosts=True)


async def _kill_mid_tool(
    cluster: Cluster, factory: Any, store: EventStore, redis: Any, how: str
) -> str:
    """Start a turn, wait until its tool runs, kill the host; the session id."""
    import ray

    from helmlog.actors import host_for

    client = cluster.agent(factory).client()
    running = asyncio.ensure_future(client.run("refund order 7"))

    async def tool_running() -> bool:
        return b"1" == await redis.get(RUNS_KEY)

    await _until("the tool runs", tool_running)
    (sid,) = await store.open_turns()
    if how == "ray.kill":
        # The host process dies; Ray restarts it (max_restarts=-1).
        name = f"{cluster.name}.host.{host_for(sid, cluster.n_hosts)}"
        ray.kill(ray.get_actor(name, namespace="helmlog"), no_restart=False)
    else:
        os.kill(int(await redis.get(PID_KEY)), signal.SIGKILL)
    with pytest.raises(HostUnavailableError) as info:
        await running
    assert sid == info.value.session_id  # R22: the error names its session
    assert sid == client.session_id
    return sid


async def _finished(store: EventStore, sid: str) -> list[Any]:
    """The session's events once its turn ended, polled for R22's 30 s."""

    async def ended() -> list[Any]:
        events = [r.decode() for r in await store.read(sid)]
        return events if "agent.turn_end" in [e.type for e in events] else []

    return list(await _until("the turn ends", ended, within=FINISH_WITHIN_S))


@_on_session_loop
@pytest.mark.parametrize("how", ["ray.kill", "SIGKILL"])
async def test_r22_a_host_killed_mid_tool_finishes_the_turn_with_no_recover_call(
    how: str, cluster: Cluster, store: EventStore, redis: Any
) -> None:
    """R22, R7: the restarted host finishes the turn; the tool ran exactly once."""
    sid = await _kill_mid_tool(cluster, refund_agent, store, redis, how)

    events = await _finished(store, sid)

    assert b"1" == await redis.get(RUNS_KEY)
    types = [e.type for e in events]
    assert 1 == types.count("tool.dispatched")
    assert ["c1"] == [
        e.tool_call_id for e in events if e.type == "tool.outcome_unknown"
    ]
    assert "error.fatal" not in types, types
    assert ANSWER + UNKNOWN == events[-1].final_content
    assert verify_chain(await store.read(sid)) is None
    assert [] == await store.open_turns()


@_on_session_loop
async def test_r22_an_idempotent_tool_runs_again_as_attempt_2_after_its_host_died(
    cluster: Cluster, store: EventStore, redis: Any
) -> None:
    """R22, R7: only an idempotent tool is dispatched again, with its arguments."""
    sid = await _kill_mid_tool(cluster, idempotent_agent, store, redis, "ray.kill")

    events = await _finished(store, sid)

    assert b"2" == await redis.get(RUNS_KEY)
    assert [(1, {"order": 7}), (2, {"order": 7})] == [
        (e.attempt, e.args) for e in events if e.type == "tool.dispatched"
    ]
    assert ANSWER + "refunded order 7" == events[-1].final_content
    assert verify_chain(await store.read(sid)) is None


RACE_SESSIONS = 20


async def _race(
    checkpoints: list[str],
    redis_url: str,
    redis: Any,
    tmp_path: Path,
    *on_ray: str,
) -> dict[str, list[str]]:
    """Two client processes resume every checkpoint at once; outcomes by session."""
    path = tmp_path / "checkpoints.json"
    path.write_text(json.dumps(checkpoints))
    go = "race:go"
    command = [sys.executable, "-m", "tests.integration.actors.resume_race"]
    clients = [
        subprocess.Popen(
            [*command, redis_url, str(path), go, *on_ray],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:

        async def both_ready() -> bool:
            return b"2" == await redis.get(go + ":ready")

        await _until("both clients are ready", both_ready, within=120)
        await redis.set(go, 1)
        outputs = [c.communicate(timeout=120) for c in clients]
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
    codes = [c.returncode for c in clients]
    if codes != [0, 0]:
        # Whole, for the failure's report (an assertion message is cut short).
        for code, (_out, err) in zip(codes, outputs, strict=True):
            print(f"--- a client exited {code}; its stderr:\n{err}")
    assert [0, 0] == codes
    by_session: dict[str, list[str]] = {}
    for stdout, _stderr in outputs:
        (line,) = [x for x in stdout.splitlines() if x.startswith("[")]
        for result in json.loads(line):
            by_session.setdefault(result["session_id"], []).append(result["outcome"])
    return by_session


async def _one_proceeded(store: EventStore, by_session: dict[str, list[str]]) -> None:
    """R9, R20: one answer and one "replayed" per session; the winner's turn
    completes, the chain is intact, no error.fatal."""
    assert RACE_SESSIONS == len(by_session)
    for sid, outcomes in by_session.items():
        assert ["CheckpointError:replayed", "answer"] == sorted(outcomes), sid
        events = [r.decode() for r in await store.read(sid)]
        types = [e.type for e in events]
        assert 1 == types.count("pause.resume"), sid
        assert "error.fatal" not in types, (sid, types)
        assert "agent.turn_end" == types[-1], sid
        assert "Refunded to the visa card." == events[-1].final_content
        assert verify_chain(await store.read(sid)) is None


@_on_session_loop
async def test_r9_two_client_processes_resuming_one_checkpoint_one_proceeds(
    redis_url: str, store: EventStore, redis: Any, tmp_path: Path
) -> None:
    """R9, R20: two processes' own agents on one Redis race on each checkpoint;
    one proceeds, the other gets "replayed" and appends nothing."""
    checkpoints = []
    for _ in range(RACE_SESSIONS):
        out = await card_agent(store).run("refund order 7")
        assert is_ask_pause(out)
        checkpoints.append(out.checkpoint.to_json())

    by_session = await _race(checkpoints, redis_url, redis, tmp_path)

    await _one_proceeded(store, by_session)


@_on_session_loop
async def test_r9_two_client_processes_resume_one_checkpoint_on_shared_hosts(
    cluster: Cluster, redis_url: str, store: EventStore, redis: Any, tmp_path: Path
) -> None:
    """R9, R21: two client processes joined to one named cluster resume each
    checkpoint on its shared host; one proceeds, the other gets "replayed"."""
    import ray

    agent = cluster.agent(card_agent)
    checkpoints = []
    for _ in range(RACE_SESSIONS):
        out = await agent.client().run("refund order 7")
        assert is_ask_pause(out)
        checkpoints.append(out.checkpoint.to_json())
    address = ray.get_runtime_context().gcs_address

    by_session = await _race(
        checkpoints, redis_url, redis, tmp_path, address, cluster.name
    )

    await _one_proceeded(store, by_session)
