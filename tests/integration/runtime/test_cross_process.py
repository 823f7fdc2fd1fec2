"""A session written by one process is read, verified and resumed by another (R1, R9).

Process A runs a governed agent on Redis until a four-eyes ask pauses it and
hands out the checkpoint's JSON. Process B — a separate Python process with
its own store connection and nothing in memory — activates the session from
the stream, checks the checkpoint against it, resumes it as ``dana@ops``, and
the real tool runs there. The stream then verifies, folds to the finished
conversation, and refuses the same checkpoint a second time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helmlog import CheckpointError, check_in_approved, is_ask_pause
from helmlog.events import fold, open_event_store, verify_chain

from .refund_agent import build

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


async def test_r1_a_pause_written_here_is_resumed_by_another_process(
    redis_url: str,
) -> None:
    """R1/R9: another process resumes from the stream alone; the chain verifies."""
    store = open_event_store(redis_url)
    try:
        agent = build(store)
        out = await agent.run("Refund order 7 for $900")
        assert is_ask_pause(out)
        text = out.checkpoint.to_json()
        sid = out.checkpoint.session_id

        child = subprocess.run(
            [sys.executable, "-m", "tests.integration.runtime.refund_agent", redis_url],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert 0 == child.returncode, child.stderr
        assert "Refunded order 7." == child.stdout.strip()

        records = await store.read(sid)
        assert verify_chain(records) is None
        state = fold(r.decode() for r in records)
        assert state.pending is None
        assert "refunded 900.00 on order 7" == state.history[2].content
        assert [
            ("four-eyes", "ask", "Refund over $500?"),
            ("four-eyes", "allow", "approved by dana@ops"),
        ] == [(r.middleware, r.outcome, r.why) for r in state.middleware_decisions]

        # This process's agent still caches the paused session; it catches up
        # with the stream, which says the pause was resolved elsewhere, so the
        # checkpoint is spent — here and on a fresh agent alike.
        for host in (agent, build(store)):
            with pytest.raises(CheckpointError) as info:
                await host.resume(text, check_in_approved(by="eve@ops"))
            assert "replayed" == info.value.reason
    finally:
        await store.close()
