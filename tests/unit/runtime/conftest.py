"""R1 for every G-law test: each session a test leaves behind folds to its live state.

An autouse fixture records every agent built during a test; at teardown, each
session those agents host (whose journal was not broken by a failing store
on purpose) is read back from its store and folded up to the seq it last
appended, and the fold must equal the live state the session held — history,
ledger, window records, pending pause, checkpoint and the rest of
``SessionState``. So every scenario the
G-law tests produce doubles as a replay test of the record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from helmlog.events import fold
from helmlog.runtime import Agent, AgentBuilder


@pytest.fixture(autouse=True)
async def r1_every_stream_folds_to_the_live_state(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[None]:
    """Fold every session of every agent built in the test; compare with live."""
    built: list[Agent] = []
    original = AgentBuilder.build

    def build(self: AgentBuilder) -> Agent:
        agent = original(self)
        built.append(agent)
        return agent

    monkeypatch.setattr(AgentBuilder, "build", build)
    yield
    mismatches: list[str] = []
    for agent in built:
        sessions: dict[str, Any] = agent._sessions
        for sid, session in sessions.items():
            journal = session.journal
            if journal.broken or journal.pending_count:
                continue
            try:
                records = await agent.store.read(sid)
            except Exception:  # noqa: BLE001 — a test's deliberately failing store
                continue
            # Another host may have appended since (failover tests): this
            # session's cache must equal the fold of the prefix it recorded.
            folded = fold(r.decode() for r in records[: journal.flushed_seq])
            if folded != journal.folder.state():
                mismatches.append(sid)
    assert [] == mismatches, "R1: these sessions fold differently from live state"
