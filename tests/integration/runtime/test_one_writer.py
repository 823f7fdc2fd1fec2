"""R20 on a real Redis: of two writers resuming one pause, exactly one proceeds.

Two agents built the same way (in this process on one store, or one of them
in a second client process with its own connection) resume the same pause
checkpoint at once, round after round. Exactly one proceeds and finishes its
turn (its tool's result recorded, ``agent.turn_end`` last); the other gets
``CheckpointError("replayed")`` — whether its checkpoint check saw the pause
already answered or its first append lost the store's sequence check — and
appends nothing: no ``error.fatal``, no second ``pause.resume``. Every stream
verifies. Last, R21 on the same Redis: a paused session dropped from the
agent's cache resumes from its stream, and re-activation appends nothing.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from helmlog import CheckpointError, HelmlogError, is_ask_pause
from helmlog.events import EventStore, fold, open_event_store, verify_chain
from helmlog.runtime import check_in_approved

from .one_writer_agent import ANSWER, build

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[3]
ROUNDS = 50
PROCESS_ROUNDS = 20


async def _outcome(coro: Any) -> Any:
    try:
        return await coro
    except HelmlogError as exc:
        return exc


async def _assert_one_turn_completed(store: EventStore, session_id: str) -> None:
    records = await store.read(session_id)
    types = [r.decode().type for r in records]
    assert verify_chain(records) is None
    assert "error.fatal" not in types
    assert "agent.turn_end" == types[-1]
    assert 1 == types.count("pause.resume")
    assert 1 == types.count("tool.dispatched")
    assert 1 == types.count("stream.tool_end")
    state = fold(r.decode() for r in records)
    assert "refunded 900.00 on order 7" == state.history[2].content
    assert ANSWER == state.history[-1].content


async def test_r20_two_agents_on_one_redis_store_exactly_one_resume_proceeds(
    redis_url: str,
) -> None:
    """R20/R9: 50 rounds on one Redis store: one answer, one "replayed", no fatal,
    even when both writers seal byte-identical batches."""
    store = open_event_store(redis_url)
    try:
        first, second = build(store), build(store)
        for n in range(ROUNDS):
            paused = await first.run("Refund order 7 for $900")
            assert is_ask_pause(paused)
            cp = paused.checkpoint
            if n % 2:
                # Odd rounds: both hosts hold the pause, so both pass the
                # checkpoint check and the store's seq check decides.
                assert await second.recover(cp.session_id) is None
            # Two people approve at once; in even rounds the same approval
            # reaches both, so both writers often seal byte-identical batches,
            # which the store must not take for its own resend (writer_key).
            one = check_in_approved(by="dana@ops")
            other = one if n % 2 == 0 else check_in_approved(by="eve@ops")
            outcomes = await asyncio.gather(
                _outcome(first.resume(cp, one)),
                _outcome(second.resume(cp, other)),
            )
            assert [ANSWER] == [o for o in outcomes if isinstance(o, str)]
            (loss,) = [o for o in outcomes if not isinstance(o, str)]
            assert isinstance(loss, CheckpointError)
            assert "replayed" == loss.reason
            await _assert_one_turn_completed(store, cp.session_id)
            for host in (first, second):
                # R1: each host's cache is a prefix of what the store holds.
                journal = host._sessions[cp.session_id].journal
                records = await store.read(cp.session_id)
                assert fold(r.decode() for r in records[: journal.flushed_seq]) == (
                    journal.folder.state()
                )
    finally:
        await store.close()


@pytest.mark.slow
async def test_r20_two_client_processes_resuming_one_checkpoint(
    redis_url: str,
) -> None:
    """R20: a second process resumes each checkpoint as this one does: one proceeds."""
    store = open_event_store(redis_url)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integration.runtime.one_writer_agent",
        redis_url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        here = build(store)
        wins = {"here": 0, "there": 0}
        for _ in range(PROCESS_ROUNDS):
            paused = await here.run("Refund order 7 for $900")
            assert is_ask_pause(paused)
            cp = paused.checkpoint
            child.stdin.write(cp.to_json().encode() + b"\n")
            await child.stdin.drain()
            mine = await _outcome(here.resume(cp, check_in_approved(by="dana@ops")))
            theirs = (
                (await asyncio.wait_for(child.stdout.readline(), timeout=60))
                .decode()
                .strip()
            )
            if mine == ANSWER:
                wins["here"] += 1
                assert "ERR_CHECKPOINT replayed" == theirs
            else:
                wins["there"] += 1
                assert isinstance(mine, CheckpointError)
                assert ("replayed", "ok") == (mine.reason, theirs)
            await _assert_one_turn_completed(store, cp.session_id)
        assert PROCESS_ROUNDS == wins["here"] + wins["there"]
    finally:
        child.stdin.close()
        await asyncio.wait_for(child.wait(), timeout=30)
        await store.close()
    assert 0 == child.returncode


async def test_r21_an_evicted_session_reactivates_from_redis_silently(
    redis_url: str,
) -> None:
    """R21/R6 on Redis: a dropped paused session resumes from its stream alone."""
    store = open_event_store(redis_url)
    try:
        agent = build(store)
        paused = await agent.run("Refund order 7 for $900")
        assert is_ask_pause(paused)
        sid = paused.checkpoint.session_id
        before = await store.read(sid)
        assert 1 == agent.evict_idle(now=agent.config.clock() + 601_000)
        assert 0 == agent.resident_count
        assert before == await store.read(sid)
        out = await agent.resume(paused.checkpoint, check_in_approved(by="dana@ops"))
        assert ANSWER == out
        after = await store.read(sid)
        assert before == after[: len(before)]  # re-activation appended nothing
        await _assert_one_turn_completed(store, sid)
        assert fold(r.decode() for r in after) == agent.last_snapshot()
    finally:
        await store.close()
