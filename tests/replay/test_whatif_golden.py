"""Streams written before the record format changed still re-judge (issue 13, R10).

The golden streams (``tests/fixtures/streams``) were recorded by older writers
(stored facts beside the rows, defaults written out, session ids in every
event, a pause imported from another store, an unknown event type). A
what-if reads them through the same verified decode and fold as today's
streams: the policy that recorded them flips nothing, a changed one flips the
same decisions in the legacy stream as in the current one.
"""

from __future__ import annotations

from typing import Any

import pytest

import helmlog
from helmlog import (
    Agent,
    MessageMiddleware,
    ToolMiddleware,
    WhatIfReport,
    allow,
    ask,
    deny,
    sliding_window,
    tool,
)
from helmlog.events import StoredEvent

from .streams import FIXTURES, chain_key_of, imported_agent, load_records

TOUCHED: list[str] = []


class _Sealed:
    async def call(self, request: Any, on_token: Any = None) -> Any:
        TOUCHED.append("model")
        raise AssertionError("a what-if called the model")


def golden_desk(*, ceiling: float = 10_000, window: int = 1) -> Agent:
    """The refund desk the ``*_refund_desk`` fixtures were recorded with."""

    @tool
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        TOUCHED.append("refund")
        raise AssertionError("a what-if called a tool")

    return (
        Agent.create(provider=_Sealed(), model="m")
        .system("You refund.")
        .tool(refund)
        .act(
            before_tool=[
                ToolMiddleware(
                    name="refund-ceiling",
                    on_tool_call=lambda c: (
                        deny("over the ceiling")
                        if c.args["amount"] > ceiling
                        else allow()
                    ),
                ),
                ToolMiddleware(
                    name="four-eyes",
                    on_tool_call=lambda c: (
                        ask("Approve this refund?", c.args)
                        if c.args["amount"] > 500
                        else allow()
                    ),
                ),
            ],
            after_tool=[
                ToolMiddleware(
                    name="strip-pii",
                    on_tool_result=lambda r: allow(
                        r.result.replace("jo@example.com", "[email]"),
                        "masked an email",
                    ),
                )
            ],
            output=[
                MessageMiddleware(
                    name="no-codenames",
                    on_message=lambda m: (
                        allow(
                            m.content.replace("BLUEBIRD", "[codename]"),
                            "scrubbed a codename",
                        )
                        if "BLUEBIRD" in m.content
                        else allow()
                    ),
                )
            ],
            window=sliding_window(keep_recent_turns=window),
        )
        .build()
    )


def _records(name: str) -> list[StoredEvent]:
    return load_records(FIXTURES / f"{name}.jsonl")


def _shape(report: WhatIfReport) -> list[tuple[Any, ...]]:
    """Each decision without its seq (the two writers number events apart)."""
    return [
        (d.turn, d.moment, d.tool_call_id, d.status, d.was, d.now, d.flip, d.diverges)
        for s in report.sessions
        for d in s.decisions
    ]


@pytest.fixture(autouse=True)
def untouched() -> Any:
    TOUCHED.clear()
    yield
    assert [] == TOUCHED


@pytest.mark.parametrize("name", ["v1_refund_desk", "v3_refund_desk"])
async def test_whatif_a_golden_stream_rejudged_by_its_own_policy_flips_nothing(
    name: str,
) -> None:
    """R10: the recording policy re-judges a legacy or current stream as it was."""
    report = await helmlog.whatif(_records(name), golden_desk())
    assert () == report.flipped
    assert () == report.diverged
    assert {"unchanged"} == {d.status for s in report.sessions for d in s.decisions}
    # Two turns: input, output and each window visit that engaged; five calls
    # before the tools ran, and the two that ran after (c2-c4 were refused).
    assert 13 == report.decisions


async def test_whatif_a_legacy_and_a_current_stream_of_one_run_judge_alike() -> None:
    """R4/R10: stored facts beside the rows change nothing a what-if sees."""
    for changed in (golden_desk(), golden_desk(ceiling=800), golden_desk(window=2)):
        legacy = await helmlog.whatif(_records("v1_refund_desk"), changed)
        current = await helmlog.whatif(_records("v3_refund_desk"), changed)
        assert _shape(legacy) == _shape(current)


async def test_whatif_a_changed_policy_flips_a_golden_stream() -> None:
    """Issue 13: a ceiling of 800 refuses c1 (an approved ask of 900) first."""
    report = await helmlog.whatif(_records("v1_refund_desk"), golden_desk(ceiling=800))
    (session,) = report.sessions
    assert session.divergence is not None
    assert ("c1", "allow-to-deny", "refund-ceiling") == (
        session.divergence.tool_call_id,
        session.divergence.flip,
        session.divergence.middleware,
    )


@pytest.mark.parametrize(
    "name", ["v2_imported_pause", "v2_keyed_imported_pause", "v3_imported_pause"]
)
async def test_whatif_an_imported_pause_rejudges_from_its_import(name: str) -> None:
    """R9: a call paused on another store is judged from ``session.imported``:
    its ask is resumed as approved, and the stream's own pending ask stays one."""
    agent = imported_agent(None, [], [])
    report = await helmlog.whatif(_records(name), agent, key=chain_key_of(name))
    assert () == report.flipped
    assert [
        (1, "before-tool", "c1", "unchanged", "ask", "ask", None, False),
        (1, "before-tool", "c2", "unchanged", "ask", "ask", None, False),
    ] == _shape(report)


async def test_whatif_an_old_stream_with_an_unknown_event_rejudges() -> None:
    """R10: defaults for newer fields, an unknown type skipped: judged as held."""
    records = _records("v0_old_fields_and_unknown_type")
    watching = MessageMiddleware(name="watch", on_message=lambda m: allow())
    agent = Agent.create(provider=_Sealed(), model="m").message_middleware(watching)
    report = await helmlog.whatif(records, agent.build())
    assert [
        (1, "input", None, "unchanged", "allow", "allow", None, False),
        (1, "output", None, "unchanged", "allow", "allow", None, False),
    ] == _shape(report)
