"""R22: a starting host finishes its shard's open turns per R7 (no Ray here).

The host's sweep is ``finish_open_turns`` over the store's open-turns index;
these tests drive it on the in-memory store with in-process agents standing
for the host that died (its store goes dead mid-tool) and the host that
takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from helmlog import Agent, Tool, ask_human, tool
from helmlog.actors import host_for
from helmlog.actors._failover import finish_open_turns
from helmlog.events import MemoryEventStore
from helmlog.events._index import IndexDelta, MemoryIndex
from helmlog.runtime.testing import Reply, ToolCallRequest, scripted

UNKNOWN = (
    "The outcome of tool 'refund' (call c1) is unknown: it was dispatched, but the "
    "host running it stopped before its result was recorded. It was not run again; "
    "check whether it took effect before calling it again."
)


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


class LostUpdates(MemoryIndex):
    """Index writes after an append never land: their writer died first."""

    def apply(self, session_id: str, delta: IndexDelta) -> None:
        return None


class StaleMarks(DyingStore):
    """A store whose index kept the open mark of a turn that ended."""

    def __init__(self) -> None:
        super().__init__()
        self._index = LostUpdates()


def _refund(store: DyingStore, runs: list[int]) -> Tool:
    @tool
    def refund(order: int) -> str:
        """Refund an order; the first run kills its host."""
        runs.append(order)
        if len(runs) == 1:
            store.dead = True
            raise HostStopped
        return f"refunded order {order}"

    return refund


async def _die_mid_tool(store: DyingStore, the_tool: Tool, session_id: str) -> None:
    """A first host dispatches ``the_tool`` and dies while it runs."""
    call = ToolCallRequest(id="c1", name=the_tool.name, args={"order": 7})
    first = (
        Agent.create(
            provider=scripted([Reply(tool_calls=[call])]), model="m", store=store
        )
        .tool(the_tool)
        .build()
    )
    with pytest.raises(HostStopped):
        await first.run("refund order 7", session_id=session_id)
    store.dead = False  # the next host has a working connection


def _taking_over(store: DyingStore, *tools: Tool) -> Callable[[str], Any]:
    """The new host's ``recover``: an agent per session, built on the store."""

    def respond(request: Any) -> str:
        return f"the tool said: {request.messages[-1].content}"

    def recover(session_id: str) -> Any:
        agent = Agent.create(provider=scripted(respond=respond), model="m", store=store)
        return agent.tool(*tools).build().recover(session_id)

    return recover


async def _types(store: MemoryEventStore, session_id: str) -> list[str]:
    return [r.decode().type for r in await store.read(session_id)]


def _ids_on(host: int, n_hosts: int, count: int) -> list[str]:
    ids = (f"session-{i}" for i in range(1000))
    return [sid for sid in ids if host_for(sid, n_hosts) == host][:count]


async def test_r22_a_dispatched_call_without_result_is_finished_not_rerun() -> None:
    """R22, R7: the open turn ends; the tool ran once; the model read R7's text."""
    store, runs = DyingStore(), []
    refund = _refund(store, runs)
    (sid,) = _ids_on(0, 1, 1)
    await _die_mid_tool(store, refund, sid)
    assert [sid] == list(await store.open_turns())

    finished = await finish_open_turns(
        store, index=0, n_hosts=1, recover=_taking_over(store, refund)
    )

    assert 1 == finished
    assert [7] == runs
    events = [r.decode() for r in await store.read(sid)]
    assert ["c1"] == [
        e.tool_call_id for e in events if e.type == "tool.outcome_unknown"
    ]
    assert f"the tool said: {UNKNOWN}" == events[-1].final_content
    assert [] == list(await store.open_turns())


async def test_r22_an_idempotent_tool_runs_again_as_attempt_2() -> None:
    """R22, R7: an idempotent tool is dispatched again with the recorded args."""
    store, runs = DyingStore(), []

    @tool(idempotent=True)
    def lookup(order: int) -> str:
        """Look an order up; the first run kills its host."""
        runs.append(order)
        if len(runs) == 1:
            store.dead = True
            raise HostStopped
        return f"order {order} is shipped"

    (sid,) = _ids_on(0, 1, 1)
    await _die_mid_tool(store, lookup, sid)
    assert 1 == await finish_open_turns(
        store, index=0, n_hosts=1, recover=_taking_over(store, lookup)
    )
    events = [r.decode() for r in await store.read(sid)]
    assert [1, 2] == [e.attempt for e in events if e.type == "tool.dispatched"]
    assert [7, 7] == runs
    assert "the tool said: order 7 is shipped" == events[-1].final_content


async def test_r22_a_turn_waiting_on_a_person_is_left_alone() -> None:
    """R22: a pending pause is not a crash; nothing is appended to it."""
    store = DyingStore()

    @tool
    def pick_card(order: int) -> str:
        """Ask which card to refund to."""
        ask_human("Which card?", {"order": order})

    call = ToolCallRequest(id="c1", name="pick_card", args={"order": 7})
    agent = (
        Agent.create(
            provider=scripted([Reply(tool_calls=[call])]), model="m", store=store
        )
        .tool(pick_card)
        .build()
    )
    (sid,) = _ids_on(0, 1, 1)
    await agent.run("refund order 7", session_id=sid)
    before = await _types(store, sid)
    assert "pause.request" == before[-1]

    finished = await finish_open_turns(
        store, index=0, n_hosts=1, recover=_taking_over(store, pick_card)
    )

    assert 0 == finished
    assert before == await _types(store, sid)


async def test_r22_a_host_finishes_only_the_sessions_of_its_shard() -> None:
    """R8, R22: host 1 of 2 recovers its own sessions, not host 0's."""
    store, runs = DyingStore(), []
    refund = _refund(store, runs)
    mine, theirs = _ids_on(1, 2, 1)[0], _ids_on(0, 2, 1)[0]
    await _die_mid_tool(store, refund, mine)
    runs.clear()
    await _die_mid_tool(store, refund, theirs)

    finished = await finish_open_turns(
        store, index=1, n_hosts=2, recover=_taking_over(store, refund)
    )

    assert 1 == finished
    assert "agent.turn_end" == (await _types(store, mine))[-1]
    assert "tool.dispatched" == (await _types(store, theirs))[-1]
    assert [theirs] == list(await store.open_turns())


async def test_r22_one_session_failing_never_stops_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R22: a session whose model fails is logged with its id; the rest finish."""
    store, runs = DyingStore(), []
    refund = _refund(store, runs)
    ids = _ids_on(0, 1, 3)
    for sid in ids:
        runs.clear()
        await _die_mid_tool(store, refund, sid)
    bad = ids[1]
    good = _taking_over(store, refund)

    def recover(session_id: str) -> Any:
        if session_id != bad:
            return good(session_id)
        # This host's model has nothing left to say: the recovery raises.
        agent = Agent.create(provider=scripted([]), model="m", store=store)
        return agent.tool(refund).build().recover(session_id)

    with caplog.at_level(logging.ERROR, logger="helmlog.actors"):
        finished = await finish_open_turns(
            store, index=0, n_hosts=1, recover=recover, concurrency=2
        )

    assert 2 == finished
    for sid in ids:
        done = "agent.turn_end" == (await _types(store, sid))[-1]
        assert (sid != bad) == done
    failed = [r for r in caplog.records if getattr(r, "session_id", None) == bad]
    assert 1 == len(failed)
    assert bad in failed[0].getMessage()


async def test_r22_a_stale_open_turn_mark_is_removed() -> None:
    """R22, R1: a mark whose turn ended goes; the stream is the truth."""
    store = StaleMarks()
    agent = Agent.create(provider=scripted(["hi"]), model="m", store=store).build()
    (sid,) = _ids_on(0, 1, 1)
    assert "hi" == await agent.run("hello", session_id=sid)
    assert [sid] == list(await store.open_turns())  # the update after it was lost

    finished = await finish_open_turns(
        store, index=0, n_hosts=1, recover=_taking_over(store)
    )

    assert 0 == finished
    assert [] == list(await store.open_turns())


async def test_r22_failover_refuses_a_host_index_outside_the_cluster() -> None:
    """A host index must name one of ``n_hosts`` hosts."""
    with pytest.raises(ValueError):
        await finish_open_turns(
            MemoryEventStore(), index=2, n_hosts=2, recover=_taking_over(DyingStore())
        )
