"""The recovery sweep: finish the unfinished turns the open-turns index names.

Pattern: candidates from the open-turns index (or the one session named),
         each handed to a fresh agent's own ``recover``, then reindexed;
         at most ``concurrency`` at once; one session's failure is reported.
Role:    runtime layer, exported by ``helmlog.runtime.lowlevel``; ``helmlog
         recover`` runs it (the hosts' failover sweeps their shards instead).

Laws: R22 (candidates from the open-turns index, never a scan), R7 (a
dispatched call is not run again unless idempotent), R1 (the stream decides).
Why ``reindex`` after every candidate: the index is a projection that can be
stale; repairing it from the stream keeps the next sweep from folding again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Final

from helmlog.events import EventStore, HelmlogError

from ._agent import Agent
from .pause._pause import AskPause

CONCURRENCY: Final = 16


@dataclasses.dataclass(frozen=True)
class Recovered:
    """What recovering one session did.

    ``outcome`` is ``"finished"`` (the turn ended with ``text``, the answer),
    ``"paused"`` (it stopped at a new pause; ``text`` is the question),
    ``"nothing-to-do"`` (no unfinished turn) or ``"failed"`` (``text`` names
    the error; nothing else of that session was touched).
    """

    session_id: str
    outcome: str
    text: str = ""

    def line(self) -> str:
        """One line for the terminal."""
        said = {
            "finished": "finished the turn; it answered: ",
            "paused": "finished up to a new pause: ",
            "nothing-to-do": "nothing to finish",
            "failed": "could not recover: ",
        }[self.outcome]
        return f"{self.session_id}: {said}{self.text}"


async def recover_one(
    store: EventStore, session_id: str, factory: Callable[[EventStore], Agent]
) -> Recovered:
    """Finish one session's unfinished turn (R7), then reindex it."""
    try:
        agent = factory(store)
        if agent.store is not store:
            raise ValueError(
                "the --agent function must build its agent on the store it is given"
            )
        out = await agent.recover(session_id)
    except (HelmlogError, ValueError) as exc:
        done = Recovered(session_id, "failed", f"{type(exc).__name__}: {exc}")
    else:
        if out is None:
            done = Recovered(session_id, "nothing-to-do")
        elif isinstance(out, AskPause):
            done = Recovered(session_id, "paused", out.ask.question)
        else:
            done = Recovered(session_id, "finished", out)
    await store.reindex(session_id)
    return done


async def recover_sessions(
    store: EventStore,
    factory: Callable[[EventStore], Agent],
    session_id: str | None = None,
    *,
    concurrency: int = CONCURRENCY,
) -> list[Recovered]:
    """Recover ``session_id``, or every session the open-turns index names.

    Sessions are independent: one that fails is reported and the rest go on.
    At most ``concurrency`` recover at once (each may call a model and run
    tools). Results are in session-id order.

    Raises:
        StoreError: the open-turns index could not be read.
    """
    if session_id is not None:
        return [await recover_one(store, session_id, factory)]
    candidates = sorted(set(await store.open_turns()))
    gate = asyncio.Semaphore(concurrency)

    async def one(sid: str) -> Recovered:
        async with gate:
            return await recover_one(store, sid, factory)

    return list(await asyncio.gather(*(one(sid) for sid in candidates)))
