"""A stopped host's sessions are taken over through its lease (R27), on real
Ray and Redis.

A host whose worker is stopped (SIGSTOP) mid-tool looks alive to Ray, which
never restarts it. Its lease lapses; the other host takes its shard over and
finishes its turns per R7, with no ``recover`` call: the non-idempotent tool
is recorded as ``tool.outcome_unknown``, the idempotent one runs again. The
callers waiting on the stopped host get ``HostUnavailableError`` naming their
sessions. When the host wakes (SIGCONT) and its held tool runs return, its
appends conflict: the streams hold nothing written after the takeover.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from helmlog.actors import HostUnavailableError
from helmlog.events import EventStore, verify_chain

from ...polling import until as _until
from .lease_agents import (
    ANSWER,
    HOLD_KEY,
    PID_KEY,
    lease_agent,
    returned_key,
    runs_key,
)

if TYPE_CHECKING:
    from helmlog.actors import Cluster

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")

LEASE_S = 3.0
END_WITHIN_S = 60.0
STOPPED = 0  # the index of the host the test stops
UNKNOWN = (
    "The outcome of tool 'refund' (call c1) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)


class Turn(NamedTuple):
    sid: str
    tool: str
    order: int
    running: asyncio.Future[Any]


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    from helmlog.actors import Cluster

    c = Cluster.local(
        redis_url, n_hosts=2, name=f"lease-{uuid.uuid4().hex[:8]}", lease_s=LEASE_S
    )
    yield c
    await c.shutdown(hosts=True)


async def _start_turns(cluster: Cluster) -> tuple[list[Turn], list[Turn]]:
    """Start held turns until the stopped host has two refunds and a reserve;
    the turns on it, and the others."""
    from helmlog.actors import host_for

    agent = cluster.agent(lease_agent)
    wanted = {"refund": 2, "reserve": 1}
    mine: list[Turn] = []
    others: list[Turn] = []
    order = 0
    while any(wanted.values()):
        order += 1
        assert order <= 64, "placement never put the turns on the stopped host"
        name = "refund" if wanted["refund"] else "reserve"
        client = agent.client()
        running = asyncio.ensure_future(client.run(f"{name} order {order}"))

        async def sent(client: Any = client) -> str | None:
            sid: str | None = client.session_id
            return sid

        turn = Turn(await _until("the run is sent", sent), name, order, running)
        if host_for(turn.sid, cluster.n_hosts) == STOPPED:
            wanted[name] -= 1
            mine.append(turn)
        else:
            others.append(turn)
    return mine, others


@_on_session_loop
async def test_r27_a_stopped_hosts_turns_are_taken_over_and_it_appends_nothing_after(
    cluster: Cluster, store: EventStore, redis: Any
) -> None:
    """R27, R7, R20: a SIGSTOPped host's turns end by takeover within 60 s, no
    tool runs twice unless idempotent, and the woken host appends nothing."""
    await redis.set(HOLD_KEY, 1)
    turns, others = await _start_turns(cluster)

    async def all_running() -> bool:
        counts = [await redis.get(runs_key(t.tool, t.order)) for t in turns]
        return [b"1"] * len(turns) == counts

    await _until("every tool runs", all_running)
    pids = {int(await redis.hget(PID_KEY, str(t.order))) for t in turns}
    assert 1 == len(pids), pids
    (pid,) = pids

    os.kill(pid, signal.SIGSTOP)
    try:
        for turn in turns:
            with pytest.raises(HostUnavailableError) as info:
                await asyncio.wait_for(turn.running, END_WITHIN_S)
            assert turn.sid == info.value.session_id  # R22: it names its session
            assert STOPPED == info.value.host

        async def all_ended() -> dict[str, list[Any]]:
            streams = {t.sid: await store.read(t.sid) for t in turns}
            ends = [s[-1].type if s else "" for s in streams.values()]
            return streams if ends == ["agent.turn_end"] * len(turns) else {}

        taken_over = await _until("the turns end", all_ended, within=END_WITHIN_S)
    finally:
        os.kill(pid, signal.SIGCONT)
        await redis.delete(HOLD_KEY)

    # The woken host's held runs return, and it tries to append their results.
    async def woken_and_idle() -> bool:
        usage = await cluster.usage()
        returned = [await redis.get(returned_key(t.tool, t.order)) for t in turns]
        return 0 == usage[STOPPED].busy and None not in returned

    await _until("the woken host is idle", woken_and_idle)
    for turn in others:
        assert (ANSWER + f"{turn.tool} done for order {turn.order}") == (
            await asyncio.wait_for(turn.running, END_WITHIN_S)
        )

    usage = await cluster.usage()
    assert [0, len(turns)] == [u.failover_finished for u in usage]  # host 1 took them
    for turn in turns:
        records = await store.read(turn.sid)
        assert taken_over[turn.sid] == records  # nothing written after takeover
        assert list(range(1, len(records) + 1)) == [r.seq for r in records]
        assert verify_chain(records) is None
        events = [r.decode() for r in records]
        dispatched = [e for e in events if e.type == "tool.dispatched"]
        if turn.tool == "refund":
            assert b"1" == await redis.get(runs_key(turn.tool, turn.order))
            assert [1] == [e.attempt for e in dispatched]
            assert ["c1"] == [
                e.tool_call_id for e in events if e.type == "tool.outcome_unknown"
            ]
            assert ANSWER + UNKNOWN == events[-1].final_content
        else:
            assert b"2" == await redis.get(runs_key(turn.tool, turn.order))
            assert [1, 2] == [e.attempt for e in dispatched]
            assert (
                ANSWER + f"reserve done for order {turn.order}"
                == events[-1].final_content
            )
        assert "error.fatal" not in [e.type for e in events]
    assert not {t.sid for t in turns} & set(await store.open_turns())
