"""The two-node driver: kill a node mid-tool and see its sessions move (R22).

Pattern: a separate Ray driver (``python -m tests.integration.actors.two_nodes
         REDIS_URL``) that starts its own head-and-worker local cluster, runs
         held sessions on a named helmlog cluster there, kills the worker
         node and reports one ``REPORT`` JSON line.
Role:    test support for ``test_two_nodes.py``, which needs a Ray of its own.
Emits:   through the hosts' agents, into the shared Redis store.

Laws: R22 (the dead node's host restarts on the other and finishes its open
turns), R7 (the running tool is not run again), R8 (sessions keep their host).

Why sessions are started until a worker-node host holds one: Ray places
actors on a random node, so the tool records its node; a cluster whose hosts
all landed on the head is destroyed and another is tried.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Final

import ray
import redis.asyncio as aioredis
from ray.cluster_utils import Cluster as RayCluster

from helmlog.actors import Cluster, ClusterAgent, host_for
from helmlog.events import HelmlogError, open_event_store

from ...polling import until
from .failover_agents import HELD_KEY, HOLD_KEY, held_agent

N_HOSTS: Final = 2
MAX_SESSIONS: Final = 24
PLACEMENT_TRIES: Final = 8
WAIT_S: Final = 120.0
# Node death is noticed by GCS health checks; a short period keeps the test
# short (Ray's defaults take tens of seconds).
FAST_HEALTH: Final = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}


class Run:
    """One session started on the cluster: its order, client and call."""

    def __init__(self, order: int, client: ClusterAgent) -> None:
        self.order = order
        self.client = client
        self.call = asyncio.ensure_future(client.run(f"refund order {order}"))

    @property
    def session_id(self) -> str:
        assert self.client.session_id is not None
        return self.client.session_id


async def _start_until_a_worker_host_is_busy(
    redis: Any, address: str, redis_url: str, worker: str
) -> tuple[Cluster, list[Run], dict[str, str]]:
    """Start held sessions until one runs on a host of the worker node."""
    for attempt in range(PLACEMENT_TRIES):
        cluster = Cluster.connect(
            address, redis_url, n_hosts=N_HOSTS, name=f"two-nodes-{attempt}"
        )
        agent = cluster.agent(held_agent)
        runs: list[Run] = []
        covered: set[int] = set()
        while len(covered) < N_HOSTS and len(runs) < MAX_SESSIONS:
            run = Run(len(runs) + 1, agent.client())
            runs.append(run)
            count = len(runs)

            async def running(count: int = count) -> bool:
                return count == await redis.hlen(HELD_KEY)

            await until("the tool runs", running, WAIT_S)
            covered.add(host_for(run.session_id, N_HOSTS))
        held = {
            k.decode(): v.decode() for k, v in (await redis.hgetall(HELD_KEY)).items()
        }
        nodes = {str(r.order): held[str(r.order)] for r in runs}
        if worker in nodes.values():
            return cluster, runs, nodes
        # Every host landed on the head: let these turns end, try another name.
        await redis.delete(HOLD_KEY)
        await _settled(runs)
        await cluster.destroy()
        await redis.delete(HELD_KEY)
        await redis.set(HOLD_KEY, 1)
    raise RuntimeError(f"no host landed on the worker node in {PLACEMENT_TRIES} tries")


async def _settled(runs: list[Run]) -> list[Any]:
    """Every run's answer or error, within the deadline."""
    calls = asyncio.gather(*(r.call for r in runs), return_exceptions=True)
    return list(await asyncio.wait_for(calls, WAIT_S))


def _outcome(result: Any) -> dict[str, Any]:
    if isinstance(result, HelmlogError):
        return {
            "error": type(result).__name__,
            "error_session_id": getattr(result, "session_id", None),
        }
    if isinstance(result, BaseException):
        return {"error": type(result).__name__, "error_session_id": None}
    return {"answer": str(result)}


async def _serving_node(redis: Any, agent: ClusterAgent, host: int) -> str:
    """The node a host serves on now: a new session placed there says."""
    for order in range(1000, 1000 + MAX_SESSIONS):
        client = agent.client()
        run = Run(order, client)
        await asyncio.wait_for(run.call, WAIT_S)
        if host_for(run.session_id, N_HOSTS) == host:
            node = await redis.hget(HELD_KEY, str(order))
            return str(node.decode())
    raise RuntimeError(f"no new session was placed on host {host}")


async def drive(rc: RayCluster, worker_node: Any, redis_url: str) -> dict[str, Any]:
    """Run held sessions, kill the worker node, report what became of them."""
    head, worker = rc.head_node.node_id, worker_node.node_id
    redis = aioredis.from_url(redis_url)
    store = open_event_store(redis_url)
    try:
        await redis.set(HOLD_KEY, 1)
        cluster, runs, nodes = await _start_until_a_worker_host_is_busy(
            redis, rc.address, redis_url, worker
        )
        moved = [r for r in runs if nodes[str(r.order)] == worker]
        dead_hosts = sorted({host_for(r.session_id, N_HOSTS) for r in moved})

        killed = time.monotonic()
        rc.remove_node(worker_node, allow_graceful=False)

        async def moved_finished() -> bool:
            for run in moved:
                types = [e.decode().type for e in await store.read(run.session_id)]
                if "agent.turn_end" not in types:
                    return False
            return True

        # Nobody calls recover(): the restarted host's failover finishes them.
        await until("the dead node's sessions finish", moved_finished, WAIT_S)
        moved_after_s = round(time.monotonic() - killed, 2)
        await redis.delete(HOLD_KEY)
        results = await _settled(runs)
        agent = cluster.agent(held_agent)
        after = {h: await _serving_node(redis, agent, h) for h in dead_hosts}
        report = {
            "head": head,
            "worker": worker,
            "gcs_address": rc.address,
            "sessions": [
                {
                    "session_id": r.session_id,
                    "order": r.order,
                    "node": nodes[str(r.order)],
                    "host": host_for(r.session_id, N_HOSTS),
                    **_outcome(result),
                }
                for r, result in zip(runs, results, strict=True)
            ],
            "dead_hosts_now_on": {str(h): node for h, node in after.items()},
            # A figure, not a target: node death noticed, host restarted,
            # its failover done (no test asserts on time).
            "moved_finished_after_s": moved_after_s,
        }
        await cluster.destroy()
        return report
    finally:
        await store.close()
        await redis.aclose()


def main(redis_url: str) -> None:
    """Start the two-node cluster, drive it, print the report, stop it all."""
    rc = RayCluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "_system_config": FAST_HEALTH,
        },
    )
    try:
        worker_node = rc.add_node(num_cpus=1)
        rc.wait_for_nodes()
        ray.init(address=rc.address, log_to_driver=False, configure_logging=False)
        report = asyncio.run(drive(rc, worker_node, redis_url))
    finally:
        ray.shutdown()
        rc.shutdown()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
