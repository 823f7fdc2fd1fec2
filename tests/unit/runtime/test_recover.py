"""R7: failover never silently re-runs a tool; ``agent.recover`` finishes the turn."""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import Agent, CheckpointError, Tool, tool
from helmlog.events import MemoryEventStore, ToolCallRequest
from helmlog.runtime.providers import Reply, scripted


class HostStopped(BaseException):
    """Stands for the host process dying while a tool runs."""


class DyingStore(MemoryEventStore):
    """A store the dying host can no longer write to (its process is gone)."""

    dead = False

    async def append_sealed(
        self, session_id: str, records: Any, expected_seq: int
    ) -> int:
        if self.dead:
            raise ConnectionError("the host is gone")
        return await super().append_sealed(session_id, records, expected_seq)


async def _crash(store: DyingStore, the_tool: Tool) -> str:
    calls = [
        ToolCallRequest(id="c1", name=the_tool.name, args={"order": 7}),
        ToolCallRequest(id="c2", name=the_tool.name, args={"order": 8}),
    ]
    agent = (
        Agent.create(
            provider=scripted([Reply(tool_calls=calls)]), model="m", store=store
        )
        .tool(the_tool)
        .build()
    )
    with pytest.raises(HostStopped):
        await agent.run("refund 7 and 8")
    assert agent.session_id is not None
    store.dead = False  # another host, with a working connection, takes over
    return agent.session_id


def _second_host(store: DyingStore, the_tool: Tool) -> tuple[Agent, object]:
    model = scripted(["Checked what I could."])
    agent = Agent.create(provider=model, model="m", store=store).tool(the_tool).build()
    return agent, model


async def test_r7_a_dispatched_call_is_not_run_again_and_the_turn_goes_on() -> None:
    """R7: outcome recorded unknown; the rest of the batch runs; then the model."""
    runs: list[int] = []

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        runs.append(order)
        if order == 7 and len(runs) == 1:
            store.dead = True
            raise HostStopped
        return f"refunded {order}"

    store = DyingStore()
    sid = await _crash(store, refund)
    second, model = _second_host(store, refund)
    assert "Checked what I could." == await second.recover(sid)
    assert [7, 8] == runs  # 7 once (the crash), 8 once (the rest of the batch)
    sent = model.requests[0].messages  # type: ignore[attr-defined]
    assert (
        "The outcome of tool 'refund' (call c1) is unknown: it was dispatched, but the "
        "host running it stopped before its result was recorded. It was not run again; "
        "check whether it took effect before calling it again."
    ) == sent[2].content
    assert "refunded 8" == sent[3].content
    types = [r.decode().type for r in await store.read(sid)]
    assert 1 == types.count("tool.outcome_unknown")


async def test_r7_an_idempotent_tool_is_run_again_with_the_recorded_arguments() -> None:
    """R7: only ``idempotent=True`` tools run again, as a new dispatch (attempt 2)."""
    runs: list[int] = []

    @tool(idempotent=True)
    def lookup(order: int) -> str:
        """Look an order up."""
        runs.append(order)
        if len(runs) == 1:
            store.dead = True
            raise HostStopped
        return f"order {order} is shipped"

    store = DyingStore()
    sid = await _crash(store, lookup)
    second, _model = _second_host(store, lookup)
    assert "Checked what I could." == await second.recover(sid)
    assert [7, 7, 8] == runs
    attempts = [
        (e.tool_call_id, e.attempt)
        for e in (r.decode() for r in await store.read(sid))
        if e.type == "tool.dispatched"
    ]
    assert [("c1", 1), ("c1", 2), ("c2", 1)] == attempts


async def test_r7_recover_has_nothing_to_do_for_a_finished_session() -> None:
    """A finished turn is not re-run; an unknown session is refused."""
    store = MemoryEventStore()
    agent = Agent.create(provider=scripted(["hi"]), model="m", store=store).build()
    assert "hi" == await agent.run("hello")
    assert agent.session_id is not None
    assert await agent.recover(agent.session_id) is None
    with pytest.raises(CheckpointError) as info:
        await agent.recover("nope")
    assert "unknown-session" == info.value.reason
