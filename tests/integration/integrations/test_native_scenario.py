"""The shared scenario in the native loop: the record every framework must equal.

Pattern: ``scenario.build_agent`` run by ``Agent.run`` on a real Redis
         (``tests/fixtures_redis.py``) up to its ask; ``helmlog approve
         --agent ...scenario:native_agent`` as a real subprocess resumes it
         (and calls the scenario's model there, to the answer); the stored
         rows equal ``expected_rows`` (the same conversation in memory).
Role:    integration test of ``scenario.py`` itself: the baseline the
         LangChain, Agents SDK and Pydantic AI tests compare against.
Emits:   nothing.

Laws: issue 27 item 6 (one scenario, the native loop's rows; an ask approved
from a second process, the tool run exactly once), G15, G21, G33–G43,
G59–G62, R18.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from helmlog import is_ask_pause
from helmlog.events import open_event_store

from . import scenario as sc
from .conftest import ROOT

pytestmark = pytest.mark.redis


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "helmlog.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    return done.stdout


async def test_the_native_scenario_approved_from_a_second_process(
    redis_url: str, approver_env: dict[str, str], runs_file: Path
) -> None:
    """Issue 27 item 6: the native loop pauses on the $800 refund; another
    process approves as dana@ops and answers; the rows are
    ``expected_rows``; lookup ran here, the refund once, there."""
    store = open_event_store(redis_url)
    try:
        agent = sc.build_agent(store)
        out = await agent.run(sc.MESSAGES[sc.REFUND_800], session_id=sc.REFUND_800)
        assert is_ask_pause(out)
        assert ("refund", "c2", "four-eyes") == (
            out.tool_name,
            out.tool_call_id,
            out.ask.middleware,
        )
        env = {**approver_env, "HELMLOG_STORE": redis_url}
        listed = await anyio.to_thread.run_sync(lambda: _cli(env, "asks", "--json"))
        assert [(sc.REFUND_800, "c2")] == [
            (q["session_id"], q["tool_call_id"]) for q in json.loads(listed)
        ]
        answered = await anyio.to_thread.run_sync(
            lambda: _cli(
                env,
                "approve",
                sc.REFUND_800,
                "--agent",
                "tests.integration.integrations.scenario:native_agent",
            )
        )
        assert sc.FINAL[sc.REFUND_800] == answered.strip()
        assert ["lookup_order", "refund"] == sc.runs(runs_file)
        rows = await sc.session_rows(store, sc.REFUND_800)
    finally:
        await store.close()
    assert await sc.expected_rows(sc.REFUND_800) == rows


async def test_the_native_scenario_refuses_over_the_ceiling(
    redis_url: str, runs_file: Path
) -> None:
    """G15: the $20,000 refund is denied before it runs; the model reads
    the refusal as the tool's message and answers; the rows are
    ``expected_rows``."""
    store = open_event_store(redis_url)
    try:
        agent = sc.build_agent(store)
        out = await agent.run(sc.MESSAGES[sc.REFUND_20000], session_id=sc.REFUND_20000)
        assert sc.FINAL[sc.REFUND_20000] == out
        tool_message = agent.last_snapshot().history[2]
        assert ("tool", sc.REFUSAL) == (tool_message.role, tool_message.content)
        assert [] == sc.runs(runs_file)
        rows = await sc.session_rows(store, sc.REFUND_20000)
    finally:
        await store.close()
    assert await sc.expected_rows(sc.REFUND_20000) == rows
