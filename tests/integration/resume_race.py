"""One client process of the resume race: resume checkpoints when told to go.

Pattern: a separate driver process (``python -m tests.integration.resume_race
         URL CHECKPOINTS GO_KEY``) with its own agents on the shared Redis
         store, started twice by ``test_failover.py``.
Role:    test support; prints one JSON line: each session's outcome.
Emits:   through its agents, into the shared store.

Laws: R9 (of two concurrent resumes of one checkpoint exactly one proceeds;
the other gets ``CheckpointError("replayed")`` and appends nothing), R20 (a
run that loses a sequence conflict appends nothing more to that session).

Why both processes wait on one Redis key before resuming: the race is only a
race if the two resumes overlap; each process signals that it is ready, and
the test releases both at once.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import redis.asyncio as aioredis

from helmlog import CheckpointError, HelmlogError
from helmlog.events import EventStore, open_event_store

from .failover_agents import card_agent

READY_SUFFIX = ":ready"
DEADLINE_S = 60.0


async def _resume(store: EventStore, checkpoint: str) -> dict[str, str]:
    agent = card_agent(store)
    sid = json.loads(checkpoint)["session_id"]
    try:
        out = await agent.resume(checkpoint, "the visa card")
    except CheckpointError as exc:
        return {"session_id": sid, "outcome": f"CheckpointError:{exc.reason}"}
    except HelmlogError as exc:
        return {"session_id": sid, "outcome": type(exc).__name__}
    return {"session_id": sid, "outcome": "answer", "text": str(out)}


async def main(url: str, checkpoints: Path, go_key: str) -> None:
    """Resume every checkpoint in ``checkpoints`` once ``go_key`` is set."""
    texts: list[str] = json.loads(checkpoints.read_text())
    store = open_event_store(url)
    client = aioredis.from_url(url)
    try:
        await client.incr(go_key + READY_SUFFIX)
        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while not await client.exists(go_key):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("the test never said go")
            await asyncio.sleep(0.005)
        results = await asyncio.gather(*(_resume(store, cp) for cp in texts))
    finally:
        await client.aclose()
        await store.close()
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
