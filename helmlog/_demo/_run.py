"""Running the refund desk: one whole conversation, or N at once.

Pattern: ``run_session`` plays the script's turns on an agent, approves the
         pause, and checks each turn ended as written; ``run_sessions`` runs
         N of them on one store with bounded concurrency.
Role:    the face; ``helmlog demo``, the cluster tests and ``bench/cluster.py``.
Emits:   through the agent, into the event store it is given.

Laws: R1 (the timeline is read back from the stored records), R17 (the same
conversation on a cluster records the same rows), G71 (a silent moment fails).

Why only the first session is kept whole: its table is the one shown, so
``--sessions 5000`` holds 5000 ids and totals, not 5000 folded states.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from helmlog import LOOP_MOMENTS, SessionState, is_ask_pause
from helmlog.events import EventStore, watched

from ._script import TURNS, DemoError, Turn, demo_agent, the_approval


@dataclasses.dataclass(frozen=True)
class DemoSession:
    """One finished session: its id, its folded state, and what was said.

    ``timeline`` is the stream's order of ledger rows and window records
    (``"row"``, ``"window"``), so the table can show each where it happened.
    """

    session_id: str
    state: SessionState
    transcript: tuple[tuple[str, str], ...]
    timeline: tuple[str, ...]


TIMELINE_KINDS = {
    "middleware.decision": "row",
    "window.compacted": "window",
}


async def run_session(store: EventStore, agent: Any = None) -> DemoSession:
    """Run the whole conversation once, as a new session in ``store``.

    ``agent`` is anything with ``Agent``'s shape — a cluster's agent runs the
    same conversation on its hosts; by default an in-process one.
    """
    if agent is None:
        agent = demo_agent(store)
    transcript: list[tuple[str, str]] = []
    for number, turn in enumerate(TURNS, start=1):
        transcript.append(("customer", turn.customer))
        if number == 1:
            out = await agent.run(turn.customer)
        else:
            out = await agent.follow_up(turn.customer)
        if is_ask_pause(out) != turn.pauses:
            raise DemoError(f"turn {number} was written to {_expect(turn)}; it did not")
        if is_ask_pause(out):
            approval = the_approval()
            asker = out.ask.middleware or "a pause"
            transcript.append((asker, f"asks: {out.ask.question}"))
            transcript.append((approval.by, f"approves: {approval.note}"))
            out = await agent.resume(out.checkpoint, approval)
        if not isinstance(out, str):
            raise DemoError(f"turn {number} paused twice; the script approves one ask")
        transcript.append(("agent", out))
    session_id = agent.session_id
    if session_id is None:
        raise DemoError("the agent ran no session")
    state = agent.last_snapshot()
    spoke = {row.moment for row in state.middleware_decisions}
    spoke |= {"window"} if state.window_records else set()
    silent = [moment for moment in LOOP_MOMENTS if moment not in spoke]
    if silent:
        raise DemoError(f"the demo is meant to show every moment; silent: {silent}")
    stream = watched(stored.decode() for stored in await store.read(session_id))
    timeline = tuple(TIMELINE_KINDS[e.type] for e in stream if e.type in TIMELINE_KINDS)
    return DemoSession(session_id, state, tuple(transcript), timeline)


def _expect(turn: Turn) -> str:
    return "pause for a person" if turn.pauses else "end with an answer"


DEFAULT_CONCURRENCY = 100


@dataclasses.dataclass
class DemoRun:
    """What ``run_sessions`` ran: the first session whole, the rest as totals.

    Only the first session's state is kept (its table is the one shown), so
    ``--sessions 5000`` holds 5000 ids, not 5000 folded states.
    """

    first: DemoSession
    session_ids: list[str]
    turns: int = 0
    rows: int = 0
    window_records: int = 0


async def run_sessions(
    count: int,
    store: EventStore,
    on_done: Callable[[DemoSession], Any] | None = None,
    cluster_agent: Any = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> DemoRun:
    """Run ``count`` independent sessions on one store, at most ``concurrency``
    at a time; the first to fail stops the others and is raised.

    With ``cluster_agent`` (from ``Cluster.agent(demo_agent)``) the sessions
    run on the cluster's hosts; each gets its own client view of them.
    """
    if count < 1 or concurrency < 1:
        raise ValueError("run_sessions needs count >= 1 and concurrency >= 1")
    ids: list[str] = [""] * count
    first: list[DemoSession] = []
    totals = [0, 0, 0]
    pending = iter(range(count))

    async def worker() -> None:
        for index in pending:
            agent = cluster_agent.client() if cluster_agent is not None else None
            session = await run_session(store, agent)
            ids[index] = session.session_id
            state = session.state
            totals[0] += state.turn
            totals[1] += len(state.middleware_decisions)
            totals[2] += len(state.window_records)
            if index == 0:
                first.append(session)
            if on_done is not None:
                on_done(session)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(count, concurrency)):
                group.create_task(worker())
    except ExceptionGroup as failed:
        # The first failure is the story; the rest were cancelled by it.
        raise failed.exceptions[0] from None
    return DemoRun(first[0], ids, *totals)
