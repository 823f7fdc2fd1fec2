"""A steered step's flush: durable at its end, and a lost append records nothing.

Pattern: two agents on one memory store (two hosts of one session, as two
         processes would be); the second's after-tool rule makes the first
         append to the session while the second's step is in flight, so the
         step's own flush (``Journal.flush_now``) loses the sequence.
Role:    unit tests for ``runtime/_steering.py``'s flushes.
Emits:   nothing.

Laws: R20 (a writer that lost a sequence conflict records nothing and its
cache re-folds), R21, issue 27 items 1 and 5 (one record: each step's rows
are in the store when the step returns).
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    DecisionFiled,
    FatalError,
    MemoryEventStore,
    SequenceConflictError,
    ToolDispatched,
    ToolEnded,
    ToolStarted,
)
from helmlog.runtime.lowlevel import Admitted, Steering
from helmlog.runtime.providers import ToolCallRequest, framework_model


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}"


def _agent(
    store: MemoryEventStore,
    before_tool: list[ToolMiddleware],
    after_tool: list[ToolMiddleware] | None = None,
) -> Agent:
    return (
        Agent.create(provider=framework_model("test-framework"), model="m", store=store)
        .tool(lookup)
        .act(before_tool=before_tool, after_tool=after_tool or [])
        .build()
    )


async def _types(store: MemoryEventStore, session_id: str) -> list[type[Any]]:
    return [type(r.decode()) for r in await store.read(session_id, 0)]


async def test_each_steered_step_is_in_the_store_when_it_returns() -> None:
    """Issue 27 items 1, 5: a step's events are appended by its own end (the
    flush is not left for a later step), so a second host reads them."""
    store = MemoryEventStore()
    steering = Steering(
        _agent(store, [ToolMiddleware(name="pass", on_tool_call=lambda c: allow())])
    )
    turn = await steering.open_turn("look it up")
    sid = turn.session_id
    call = ToolCallRequest(id="c1", name="lookup", args={"order_id": "7"})
    seen = len(await store.read(sid, 0))
    await turn.model_request()
    assert len(await store.read(sid, 0)) > seen
    seen = len(await store.read(sid, 0))
    await turn.model_reply("", [call])
    assert len(await store.read(sid, 0)) == seen + 2  # llm_end, the message
    admitted = await turn.before_tool(call, None)
    assert isinstance(admitted, Admitted)
    types = await _types(store, sid)
    assert types[-1] is ToolDispatched and ToolStarted in types[seen:]
    await turn.after_tool(call, None, lookup.execute(**admitted.args))
    reader = Steering(_agent(store, []))  # a second host reads the stream
    history = (await reader.turn(sid)).history
    assert [m.role for m in history][-2:] == ["assistant", "tool"]


async def test_a_steered_step_that_loses_its_append_records_nothing() -> None:
    """R20: the other host appended while this step's after-tool walk ran;
    the step's own flush loses the sequence, it raises, and none of its
    events (the row, ``stream.tool_end``, the tool's message) is in the
    store; the other host's append is."""
    store = MemoryEventStore()
    other = Steering(_agent(store, []))
    state: dict[str, str] = {}

    async def meddle(result: Any) -> Any:
        # Another host of the session records the turn's failure meanwhile.
        turn = await other.turn(state["sid"])
        await turn.fail(RuntimeError("the other host stopped the turn"))
        return allow()

    steering = Steering(
        _agent(store, [], [ToolMiddleware(name="meddle", on_tool_result=meddle)])
    )
    turn = await steering.open_turn("look it up")
    state["sid"] = sid = turn.session_id
    call = ToolCallRequest(id="c1", name="lookup", args={"order_id": "7"})
    await turn.model_request()
    await turn.model_reply("", [call])
    admitted = await turn.before_tool(call, None)
    assert isinstance(admitted, Admitted)
    before = await _types(store, sid)
    with pytest.raises(SequenceConflictError):
        await turn.after_tool(call, None, lookup.execute(**admitted.args))
    after = await _types(store, sid)
    assert after[: len(before)] == before
    added = after[len(before) :]
    assert added[-1] is FatalError
    assert ToolEnded not in added and DecisionFiled not in added
