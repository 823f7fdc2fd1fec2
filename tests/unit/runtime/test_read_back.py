"""An append that raised is read back before the run is told anything (R24).

Pattern: whole runs on memory stores whose ``append_sealed`` raises a plain
         exception (a third-party store, a driver error) before or after the
         batch landed, or whose reads fail too.
Role:    unit tests of the journal's read-back (``runtime/_journal.py``).
Emits:   nothing.

Laws: R24 (unknown is not failed: a run is told "failed" only for an append
that is not in the stream; an append that landed is a success and its facts
are published; a store that cannot answer leaves the outcome unknown), R5
(the governed action never happens on an append that did not land).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    LedgerAppendError,
    LedgerOutcomeUnknownError,
    MemoryEventStore,
    StoredEvent,
)
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

from .helpers import Recorder


class FlakyStore(MemoryEventStore):
    """Raises on the ``fail_at``-th append, after (``landed``) or before it."""

    def __init__(self, fail_at: int, *, landed: bool, reads_fail: bool = False):
        super().__init__()
        self.fail_at, self.landed, self.reads_fail = fail_at, landed, reads_fail
        self.appends = 0

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        self.appends += 1
        if self.appends != self.fail_at:
            return await super().append_sealed(session_id, records, expected_seq)
        if self.landed:
            await super().append_sealed(session_id, records, expected_seq)
        raise ConnectionResetError("the reply was lost")

    async def head(self, session_id: str) -> tuple[int, str]:
        if self.reads_fail and self.appends >= self.fail_at:
            raise ConnectionResetError("still down")
        return await super().head(session_id)


def build(store: FlakyStore, ran: list[int], *watchers: Any) -> Agent:
    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        ran.append(amount)
        return "paid"

    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="pay", args={"amount": 5})]
            ),
            "done",
        ]
    )
    audit = ToolMiddleware(name="audit", on_tool_call=lambda c: allow())
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(pay)
        .tool_middleware(audit)
        .watch(*watchers)
        .build()
    )


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
async def test_r24_an_append_that_landed_is_a_success(fail_at: int) -> None:
    """R24: a store that raised after the batch landed: the run goes on as if
    the reply had come back, its tool runs once, and every fact is heard."""
    store = FlakyStore(fail_at, landed=True)
    recorder = Recorder()
    ran: list[int] = []
    agent = build(store, ran, recorder)
    assert "done" == await agent.run("pay")
    assert [5] == ran
    rows = agent.last_snapshot().middleware_decisions
    assert [("audit", "allow")] == [(r.middleware, r.outcome) for r in rows]
    assert 1 == len(recorder.of("middleware.decision"))


# The appends of one governed turn: 1 opens it, 2 files the decision and the
# dispatch (the tool runs only after it landed), 3 records the result, 4
# ends the turn.
@pytest.mark.parametrize(("fail_at", "runs"), [(1, 0), (2, 0), (3, 1), (4, 1)])
async def test_r24_an_append_that_did_not_land_is_reported_failed(
    fail_at: int, runs: int
) -> None:
    """R24/R5: read back and absent: ``LedgerAppendError`` that says so; the
    tool never runs unless its dispatch was in the stream."""
    store = FlakyStore(fail_at, landed=False)
    ran: list[int] = []
    with pytest.raises(LedgerAppendError) as err:
        await build(store, ran).run("pay")
    assert not isinstance(err.value, LedgerOutcomeUnknownError)
    assert "the append is not in the stream" in str(err.value)
    assert runs == len(ran)


async def test_r24_a_store_that_cannot_answer_leaves_the_outcome_unknown() -> None:
    """R24: the read-back fails too: the run is told the outcome is unknown,
    never that the append failed."""
    store = FlakyStore(1, landed=True, reads_fail=True)
    with pytest.raises(LedgerOutcomeUnknownError):
        await build(store, []).run("pay")
