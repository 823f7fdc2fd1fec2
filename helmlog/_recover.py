"""Unfinished turns from the command line: ``helmlog recover``.

Pattern: the failover sweep run by hand — candidates from the store's
         open-turns index (or the one session named), each handed to the
         agent's own ``recover`` and then reindexed.
Role:    the face; ``helmlog recover --store URL [SESSION] --agent
         module:function`` calls ``recover_sessions``.
Emits:   through each recovering agent, what R7 says: ``tool.outcome_unknown``
         for a call dispatched without a result (or, for an idempotent tool,
         a new dispatch), the rest of the batch, the model's answer.

Laws: R22 (``helmlog recover`` finishes, per R7, the unfinished turns found
through the open-turns index, never a scan of every session), R7 (a
dispatched call is not run again unless its tool is idempotent), R1 (the
stream decides whether a turn is open; the index only names candidates).

Why one agent per session: an agent holds per-run state and its provider (a
scripted model's script, a client's connection), as on a host; the factory
is cheap and sessions must not share those.

Why ``reindex`` after every candidate, recovered or not: the index is a
projection that can be stale (a host died between an append and its index
update); repairing from the stream drops a mark whose turn is over and keeps
one whose turn is still open, so the next sweep does not fold it again. It
also publishes the facts after the session's cursor (R4), so one run of
``recover`` is also one sweep of the facts outbox over the open turns (the
agent's activation of each candidate publishes them first).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Final

from helmlog.events import EventStore, HelmlogError
from helmlog.runtime import Agent, AskPause

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
