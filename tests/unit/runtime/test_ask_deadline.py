"""An ask may carry a deadline: ``ask(..., timeout_s=...)`` (issue 11 item 4).

The verb validates it; the pause records it (``pause.request.timeout_ms``);
the asks index turns it into a deadline (``PendingAsk.deadline``), so
whoever enforces it reads it from the record, not from memory.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, ask, is_ask_pause, tool
from helmlog.events import MemoryEventStore, PauseRequested
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def _agent(store: MemoryEventStore, timeout_s: float | None) -> Agent:
    rule = ToolMiddleware(
        name="four-eyes", on_tool_call=lambda call: ask("Sure?", timeout_s=timeout_s)
    )
    model = scripted(
        [Reply(tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": 7})])]
    )
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(refund)
        .act(before_tool=[rule])
        .build()
    )


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, True, "5"])
def test_a_deadline_is_a_positive_number_of_seconds(bad: Any) -> None:
    """``timeout_s`` that is not a positive finite number is a ValueError."""
    with pytest.raises(ValueError, match="timeout_s"):
        ask("Sure?", timeout_s=bad)


def test_an_ask_keeps_its_deadline_through_equality_and_pickling() -> None:
    """The deadline is part of the outcome's value and crosses processes."""
    with_deadline = ask("Sure?", timeout_s=2.5)
    assert (2.5, False, with_deadline) == (
        with_deadline.timeout_s,
        with_deadline == ask("Sure?"),
        pickle.loads(pickle.dumps(with_deadline)),
    )
    assert "Ask(question='Sure?', detail=None, component_id=None)" == repr(ask("Sure?"))


async def test_the_pause_records_the_deadline_and_the_index_keeps_it() -> None:
    """``timeout_ms`` on ``pause.request``; ``deadline`` = its timestamp + that."""
    store = MemoryEventStore()
    out = await _agent(store, 1.5).run("Refund order 7")
    assert is_ask_pause(out)
    assert 1.5 == out.ask.timeout_s
    (pause,) = [
        e
        for e in (r.decode() for r in await store.read(out.checkpoint.session_id))
        if isinstance(e, PauseRequested)
    ]
    (pending,) = await store.pending_asks()
    assert (1500, pause.timestamp + 1500) == (pause.timeout_ms, pending.deadline)


async def test_an_ask_without_a_deadline_is_stored_as_before() -> None:
    """No deadline, no new field: the stored bytes are what older writers wrote."""
    store = MemoryEventStore()
    out = await _agent(store, None).run("Refund order 7")
    assert is_ask_pause(out)
    records = await store.read(out.checkpoint.session_id)
    (pending,) = await store.pending_asks()
    assert (False, None) == (
        any(b"timeout_ms" in r.data for r in records),
        pending.deadline,
    )
