"""``helmlog recover`` finishes turns a stopped host left, on a real Redis (R7, R22).

A session whose stream ends with ``tool.dispatched`` (its host died while the
tool ran) is found through the store's open-turns index, or named on the
command line; its dispatched call is recorded as of unknown outcome and never
run again, the model reads that, and the turn ends with its answer. A session
with nothing unfinished is left alone.
"""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from helmlog.cli import app
from helmlog.events import fold, open_event_store

from . import recover_agents
from .recover_agents import ANSWER, RECOVERY_RUNS, left_mid_turn

pytestmark = pytest.mark.redis

runner = CliRunner()
AGENT = "tests.e2e.recover_agents:recoverer"
UNKNOWN = (
    "The outcome of tool 'refund' (call c1) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)


async def _finished_session(url: str) -> str:
    store = open_event_store(url)
    try:
        agent = recover_agents.recoverer(store)
        assert ANSWER == await agent.run("hello")
        assert agent.session_id is not None
        return agent.session_id
    finally:
        await store.close()


async def _after(url: str, sid: str) -> tuple[list[str], list[str], list[str]]:
    """The session's event types, its committed contents, and the open turns."""
    store = open_event_store(url)
    try:
        events = [r.decode() for r in await store.read(sid)]
        open_turns = await store.open_turns()
    finally:
        await store.close()
    contents = [m.content for m in fold(events).history]
    return [e.type for e in events], contents, open_turns


def test_r22_recover_finishes_every_open_turn_the_index_names(redis_url: str) -> None:
    """R22/R7: each left session is finished once; a finished one is not touched."""
    RECOVERY_RUNS.clear()
    left = sorted(asyncio.run(left_mid_turn(redis_url)) for _ in range(2))
    done = asyncio.run(_finished_session(redis_url))
    result = runner.invoke(app, ["recover", "--store", redis_url, "--agent", AGENT])
    assert 0 == result.exit_code, result.output
    assert [
        *(f"{sid}: finished the turn; it answered: {ANSWER}" for sid in left),
        "finished 2 turn(s) of 2 session(s) the open-turns index named",
    ] == result.stdout.splitlines()
    assert [] == RECOVERY_RUNS  # R7: the dispatched call was not run again
    for sid in left:
        types, contents, open_turns = asyncio.run(_after(redis_url, sid))
        assert 1 == types.count("tool.outcome_unknown")
        assert [UNKNOWN, ANSWER] == contents[-2:]
        assert [] == open_turns
    assert "agent.turn_end" == asyncio.run(_after(redis_url, done))[0][-1]


def test_r7_recover_one_named_session_then_nothing_is_left(redis_url: str) -> None:
    """R7: ``recover SESSION`` finishes that session; a second run has nothing to do."""
    sid = asyncio.run(left_mid_turn(redis_url))
    args = ["recover", sid, "--store", redis_url, "--agent", AGENT]
    first = runner.invoke(app, args)
    assert 0 == first.exit_code, first.output
    assert [f"{sid}: finished the turn; it answered: {ANSWER}"] == (
        first.stdout.splitlines()
    )
    again = runner.invoke(app, args)
    assert 0 == again.exit_code, again.output
    assert [f"{sid}: nothing to finish"] == again.stdout.splitlines()
    everything = runner.invoke(app, ["recover", "--store", redis_url, "--agent", AGENT])
    assert ["finished 0 turn(s) of 0 session(s) the open-turns index named"] == (
        everything.stdout.splitlines()
    )


def test_r18_recover_names_an_unknown_session_and_exits_1(redis_url: str) -> None:
    """A session the store lacks is reported, not a traceback; exit 1."""
    result = runner.invoke(
        app, ["recover", "nope", "--store", redis_url, "--agent", AGENT]
    )
    assert 1 == result.exit_code
    assert result.stdout.startswith("nope: could not recover: CheckpointError")
