"""One client process of the resume race: resume checkpoints when told to go.

Pattern: a separate driver process (``python -m
         tests.integration.actors.resume_race URL CHECKPOINTS GO_KEY
         [RAY_ADDRESS CLUSTER_NAME]``), started twice by ``test_failover.py``;
         with a Ray address it resumes through that cluster's named hosts.
Role:    test support; prints one JSON line: each session's outcome.
Emits:   through its agents (or the hosts), into the shared store.

Laws: R9 (of two concurrent resumes exactly one proceeds; the other gets
``CheckpointError("replayed")``), R20, R21.

Why both processes wait on one Redis key: the race is only a race if the two
resumes overlap, so the test releases both at once.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from helmlog import CheckpointError, HelmlogError
from helmlog.events import open_event_store

from ...polling import until
from .failover_agents import card_agent

READY_SUFFIX = ":ready"
DEADLINE_S = 60.0
ANSWER = "the visa card"

Resume = Callable[[str], Awaitable[Any]]


async def _outcome(resume: Resume, checkpoint: str) -> dict[str, str]:
    sid = json.loads(checkpoint)["session_id"]
    try:
        out = await resume(checkpoint)
    except CheckpointError as exc:
        return {"session_id": sid, "outcome": f"CheckpointError:{exc.reason}"}
    except HelmlogError as exc:
        return {"session_id": sid, "outcome": type(exc).__name__}
    return {"session_id": sid, "outcome": "answer", "text": str(out)}


async def _race(url: str, texts: list[str], go_key: str, resume: Resume) -> None:
    client = aioredis.from_url(url)
    try:
        await client.incr(go_key + READY_SUFFIX)
        await until(
            "the test says go", lambda: client.exists(go_key), DEADLINE_S, every=0.005
        )
        results = await asyncio.gather(*(_outcome(resume, cp) for cp in texts))
    finally:
        await client.aclose()
    print(json.dumps(results))


async def in_process(url: str, texts: list[str], go_key: str) -> None:
    """Each checkpoint resumed by an agent of this process, on the store."""
    store = open_event_store(url)

    def resume(checkpoint: str) -> Awaitable[Any]:
        return card_agent(store).resume(checkpoint, ANSWER)

    try:
        await _race(url, texts, go_key, resume)
    finally:
        await store.close()


async def on_cluster(
    url: str, texts: list[str], go_key: str, address: str, name: str
) -> None:
    """Each checkpoint resumed through the named cluster's hosts."""
    from helmlog.actors import Cluster

    cluster = Cluster.connect(address, url, name=name)
    agent = cluster.agent(card_agent)

    def resume(checkpoint: str) -> Awaitable[Any]:
        return agent.client().resume(checkpoint, ANSWER)

    try:
        await _race(url, texts, go_key, resume)
    finally:
        await cluster.shutdown()


def main(argv: list[str]) -> None:
    """Resume every checkpoint in the file ``argv[1]`` once ``argv[2]`` is set."""
    url, path, go_key, *ray_args = argv
    texts: list[str] = json.loads(Path(path).read_text())
    if ray_args:
        address, name = ray_args
        asyncio.run(on_cluster(url, texts, go_key, address, name))
    else:
        asyncio.run(in_process(url, texts, go_key))


if __name__ == "__main__":
    main(sys.argv[1:])
