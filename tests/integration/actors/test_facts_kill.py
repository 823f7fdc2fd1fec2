"""No fact is lost when hosts die mid-burst (R4, R22), on real Ray and Redis.

A burst of demo sessions (decisions, a pause and its approval, follow-ups)
runs on two hosts; each host is killed with ``ray.kill`` while the burst is
under way and Ray restarts it. Whatever the dead hosts had not yet sent, the
outbox publishes: failover's activations and the hosts' facts sweep (every
``facts_sweep_s``) over the open-turn index. Then every decision row of every
session has its fact on the facts streams, and nothing else is there
(deduplicated by ``(session_id, seq)``, as every watcher is).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from helmlog._demo import demo_agent, run_session
from helmlog.events import EventStore, open_event_store
from helmlog.events.redis import _fact_ops

from ...polling import until

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")

SESSIONS = 16
SWEEP_S = 0.5
SETTLE_WITHIN_S = 90.0


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[EventStore]:
    s = open_event_store(redis_url)
    yield s
    await s.close()


async def owed_and_published(
    store: EventStore,
) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """Every fact the streams' rows project, and every fact published."""
    owed: set[tuple[str, int]] = set()
    for sid in await store.sessions():
        owed |= {(sid, op[2]) for op in _fact_ops(sid, await store.read(sid))}
    return owed, {(f.session_id, f.seq) for f in await store.read_facts()}


@_on_session_loop
async def test_r4_hosts_killed_mid_burst_lose_no_fact(
    ray_local: None, redis_url: str, store: EventStore
) -> None:
    """R4/R22: hosts killed by ray.kill mid-burst and restarted; after the
    sweep every decision row has exactly one fact (deduplicated), none missing."""
    import ray

    from helmlog.actors import Cluster

    cluster = Cluster.local(
        redis_url,
        n_hosts=2,
        name=f"outbox-{uuid.uuid4().hex[:8]}",
        facts_sweep_s=SWEEP_S,
    )
    burst: list[asyncio.Future[object]] = []
    try:
        agent = cluster.agent(demo_agent)
        burst = [
            asyncio.ensure_future(run_session(store, agent.client()))
            for _ in range(SESSIONS)
        ]
        seen = 0
        for host in range(cluster.n_hosts):

            async def more_facts(floor: int = seen + 20) -> bool:
                # Sessions of a killed host end with HostUnavailableError, so
                # the rest of the burst may finish first: then kill anyway.
                if all(f.done() for f in burst):
                    return True
                return len(await store.read_facts()) >= floor

            await until("the burst publishes facts", more_facts, 60.0)
            seen = len(await store.read_facts())
            name = f"{cluster.name}.host.{host}"
            ray.kill(ray.get_actor(name, namespace="helmlog"), no_restart=False)
        await asyncio.gather(*burst, return_exceptions=True)
        owed, _ = await owed_and_published(store)
        assert len(owed) > 0

        async def nothing_missing() -> bool:
            owed, published = await owed_and_published(store)
            return owed <= published

        await until("every fact is published", nothing_missing, SETTLE_WITHIN_S)
        owed, published = await owed_and_published(store)
        assert set() == owed - published
        assert set() == published - owed
    finally:
        # Every session's outcome is collected, whatever failed: no task is
        # left for the garbage collector to report in a later test.
        await asyncio.gather(*burst, return_exceptions=True)
        await cluster.shutdown(hosts=True)
