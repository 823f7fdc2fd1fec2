"""Shared hosts at scale (R21, R22, issue 7 items 3, 5, 6, 8), on real Ray and Redis.

Named hosts are reached by every client process of one cluster; a burst of
new sessions fails no turn; a host keeps a bounded number of sessions and
re-activates a dropped one silently; pending asks are read from the index and
resumed on the session's host; a cluster name is refused with another store,
host count or factory, and so is a factory hosts cannot use.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from helmlog import check_in_approved, is_ask_pause
from helmlog._demo import demo_agent, run_session
from helmlog.actors import Cluster, ClusterConfigError, host_for
from helmlog.events import EventStore, StoreError, open_event_store

from .cluster_agents import asking_agent, desk_agent, off_store_agent

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")


def _name() -> str:
    return f"scale-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    c = Cluster.local(redis_url, n_hosts=2, name=_name(), max_resident=3)
    yield c
    await c.shutdown(hosts=True)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[EventStore]:
    s = open_event_store(redis_url)
    yield s
    await s.close()


@_on_session_loop
async def test_a_burst_of_2000_new_sessions_on_two_hosts_fails_no_turn(
    ray_local: None, redis_url: str, store: EventStore
) -> None:
    """Issue 7 item 11: 2,000 new demo sessions at once, default store URL."""
    cluster = Cluster.local(redis_url, n_hosts=2, name=_name())
    try:
        agent = cluster.agent(demo_agent)
        outcomes = await asyncio.gather(
            *(run_session(store, agent.client()) for _ in range(2_000)),
            return_exceptions=True,
        )
    finally:
        await cluster.shutdown(hosts=True)
    failed = [repr(o) for o in outcomes if isinstance(o, BaseException)]
    assert [] == failed[:3]
    assert 2_000 == len(
        {o.session_id for o in outcomes if not isinstance(o, BaseException)}
    )


@_on_session_loop
async def test_r21_two_client_processes_share_the_named_hosts(
    cluster: Cluster, store: EventStore, tmp_path: Path
) -> None:
    """R21: another process's Cluster.connect(name=...) reaches the same hosts,
    places the session where this one did and continues it there."""
    import ray

    agent = cluster.agent(desk_agent)
    assert "echo: hello" == await agent.run("hello")
    sid = agent.session_id
    assert sid is not None
    cp = agent.checkpoint()
    assert cp is not None
    path = tmp_path / "cp.json"
    path.write_text(cp.to_json())
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.actors.shared_hosts",
            address,
            cluster.store_url,
            cluster.name,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert 0 == done.returncode, done.stderr[-2000:]
    there = json.loads(done.stdout.strip().splitlines()[-1])
    assert ("echo: and again", sid, 2) == (
        there["answer"],
        there["session_id"],
        there["n_hosts"],
    )
    assert sid in there["hosted"][host_for(sid, 2)]
    assert there["hosted"] == await cluster.hosted()
    types = [r.decode().type for r in await store.read(sid)]
    assert 2 == types.count("agent.turn_end")


@_on_session_loop
async def test_r21_an_evicted_session_reactivates_silently_and_continues(
    cluster: Cluster, store: EventStore
) -> None:
    """R21, R6: a host keeps at most max_resident sessions; a dropped session
    re-activates from its stream on next use, appending nothing to do so."""
    agent = cluster.agent(desk_agent)
    first = agent.client()
    assert "echo: one" == await first.run("one")
    sid = first.session_id
    assert sid is not None
    others = [agent.client() for _ in range(12)]
    await asyncio.gather(*(o.run("other") for o in others))
    assert all(len(held) <= 3 for held in await cluster.hosted())
    await cluster.evict(0.0)
    assert [[], []] == await cluster.hosted()
    before = [r.seq for r in await store.read(sid)]

    assert "echo: two" == await first.follow_up("two")
    events = [r.decode() for r in await store.read(sid)]
    assert before == [e.seq for e in events][: len(before)]
    assert "agent.turn_start" == events[len(before)].type
    assert [sid] == (await cluster.hosted())[host_for(sid, 2)]
    assert ["one", "echo: one", "two", "echo: two"] == [
        m.content for m in first.last_snapshot().history
    ]


@_on_session_loop
async def test_issue7_pending_asks_are_read_from_the_index_and_resumed_on_the_host(
    cluster: Cluster,
) -> None:
    """Item 8: cluster.pending_asks() lists the pauses; cluster.resume(session,
    decision) resumes one on its host from the stream's checkpoint."""
    agent = cluster.agent(asking_agent)
    paused = [agent.client() for _ in range(3)]
    outs = await asyncio.gather(*(p.run("refund order 7") for p in paused))
    assert all(is_ask_pause(o) for o in outs)
    sids = sorted(p.session_id for p in paused if p.session_id)
    asks = await cluster.pending_asks()
    assert sids == sorted(a.session_id for a in asks)
    assert {("ask", "refund", "four-eyes")} == {
        (a.kind, a.tool_name, a.middleware) for a in asks
    }

    out = await cluster.resume(sids[0], check_in_approved(by="dana@ops"))
    assert "Refunded." == out
    assert sids[1:] == sorted(a.session_id for a in await cluster.pending_asks())


@_on_session_loop
async def test_issue7_a_name_that_runs_otherwise_or_a_bad_factory_is_refused(
    cluster: Cluster, ray_local: None, redis_url: str
) -> None:
    """Typed errors: another store URL, host count or factory for a running
    name; a lambda factory; a factory off its store; an unreachable store."""
    cluster.agent(desk_agent)
    other_db = redis_url.rsplit("/", 1)[0] + "/5"
    clashes = [
        (Cluster(other_db, name=cluster.name), desk_agent, "store_url"),
        (Cluster(redis_url, 3, name=cluster.name), desk_agent, "n_hosts"),
        (Cluster(redis_url, name=cluster.name), asking_agent, "factory"),
    ]
    for other, factory, what in clashes:
        with pytest.raises(ClusterConfigError) as info:
            other.agent(factory)
        assert (what, cluster.name) == (info.value.what, info.value.name)

    with pytest.raises(ClusterConfigError) as lam:
        cluster.agent(lambda store: desk_agent(store))
    assert "lambda" in str(lam.value)

    off = Cluster(redis_url, 1, name=_name())
    down = Cluster("redis://127.0.0.1:1/0", 1, name=_name())
    try:
        with pytest.raises(ClusterConfigError) as info:
            off.agent(off_store_agent)
        assert "factory" == info.value.what
        with pytest.raises(StoreError):
            down.agent(desk_agent)
    finally:
        await off.destroy()
        await down.destroy()
