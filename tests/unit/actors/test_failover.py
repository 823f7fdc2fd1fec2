"""R22: a starting host finishes its shard's open turns per R7 (no Ray here).

The host's sweep is ``finish_open_turns`` over the store's open-turns index;
these tests drive it on the in-memory store with in-process agents standing
for the host that died (its store goes dead mid-tool) and the host that
takes over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from helmlog import Agent, Tool, ask_human, is_ask_pause, tool
from helmlog.actors import host_for
from helmlog.actors._failover import finish_open_turns
from helmlog.events import MemoryEventStore, ToolCallRequest
from helmlog.events._index import IndexDelta, MemoryIndex
from helmlog.runtime.providers import Reply, scripted

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
    """Index writes after an append never land while ``losing``: their writer
    died between the append and the index update."""

    losing = True

    def apply(self, session_id: str, delta: IndexDelta) -> None:
        if not self.losing:
            super().apply(session_id, delta)


class StaleMarks(DyingStore):
    """A store whose index misses the updates made while ``losing``."""

    def __init__(self) -> None:
        super().__init__()
        self._lost = LostUpdates()
        self._index = self._lost

    @property
    def losing(self) -> bool:
        return self._lost.losing

    @losing.setter
    def losing(self, value: bool) -> None:
        self._lost.losing = value


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


def _card_then_refund(store: DyingStore, runs: list[int]) -> tuple[Tool, Tool]:
    """``pick_card`` asks a person; ``refund`` kills its host on its first run."""

    @tool
    def pick_card(order: int) -> str:
        """Ask which card to refund to."""
        ask_human("Which card?", {"order": order})

    return pick_card, _refund(store, runs)


def _card_model() -> Any:
    """Asks for the card, then refunds (c2), then answers with what it read."""

    def respond(request: Any) -> Reply | str:
        tools = [m for m in request.messages if m.role == "tool"]
        if not tools:
            call = ToolCallRequest(id="c1", name="pick_card", args={"order": 7})
            return Reply(tool_calls=[call])
        if len(tools) == 1:
            call = ToolCallRequest(id="c2", name="refund", args={"order": 7})
            return Reply(tool_calls=[call])
        return f"the tool said: {tools[-1].content}"

    return scripted(respond=respond)


class Recovering:
    """A host's ``recover`` that also notes which sessions it was asked for."""

    def __init__(self, store: DyingStore, *tools: Tool) -> None:
        self.asked: list[str] = []
        self._recover = _taking_over(store, *tools)

    def __call__(self, session_id: str) -> Any:
        self.asked.append(session_id)
        return self._recover(session_id)


async def test_r22_a_turn_waiting_on_a_person_is_left_alone() -> None:
    """R22: a pending pause is not a crash: not even read, nothing appended."""
    store, runs = DyingStore(), []
    tools = _card_then_refund(store, runs)
    agent = Agent.create(provider=_card_model(), model="m", store=store)
    (sid,) = _ids_on(0, 1, 1)
    await agent.tool(*tools).build().run("refund order 7", session_id=sid)
    before = await _types(store, sid)
    assert "pause.request" == before[-1]
    assert [sid] == list(await store.open_turns())
    recover = Recovering(store, *tools)

    finished = await finish_open_turns(store, index=0, n_hosts=1, recover=recover)

    assert 0 == finished
    assert [] == recover.asked
    assert before == await _types(store, sid)
    assert [sid] == [a.session_id for a in await store.pending_asks()]


async def test_r22_an_ask_that_outlived_its_resume_does_not_hide_an_open_turn() -> None:
    """R22, R1: resumed, then the host died mid-tool before the index heard of
    the resume: the stale ask is not trusted; the turn is finished."""
    store, runs = StaleMarks(), []
    tools = _card_then_refund(store, runs)
    agent = (
        Agent.create(provider=_card_model(), model="m", store=store)
        .tool(*tools)
        .build()
    )
    (sid,) = _ids_on(0, 1, 1)
    store.losing = False
    pause = await agent.run("refund order 7", session_id=sid)
    assert is_ask_pause(pause)
    assert [sid] == [a.session_id for a in await store.pending_asks()]
    store.losing = True  # the index never hears of the resume
    with pytest.raises(HostStopped):
        await agent.resume(pause.checkpoint, "the visa card")
    store.dead = False

    finished = await finish_open_turns(
        store, index=0, n_hosts=1, recover=_taking_over(store, *tools)
    )

    assert 1 == finished
    assert [7] == runs
    events = [r.decode() for r in await store.read(sid)]
    assert ["c2"] == [
        e.tool_call_id for e in events if e.type == "tool.outcome_unknown"
    ]
    assert "agent.turn_end" == events[-1].type
    assert [] == await store.pending_asks()
    assert [] == list(await store.open_turns())


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


async def test_r22_failover_recovers_at_most_concurrency_sessions_at_once() -> None:
    """R22: a bounded sweep: never more than ``concurrency`` recoveries at once."""
    store, runs = DyingStore(), []
    refund = _refund(store, runs)
    ids = _ids_on(0, 1, 6)
    for sid in ids:
        runs.clear()
        await _die_mid_tool(store, refund, sid)
    real = _taking_over(store, refund)
    in_flight: list[int] = [0]
    most: list[int] = [0]

    async def recover(session_id: str) -> Any:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        try:
            await asyncio.sleep(0)  # let the others in, if the gate allows
            return await real(session_id)
        finally:
            in_flight[0] -= 1

    finished = await finish_open_turns(
        store, index=0, n_hosts=1, recover=recover, concurrency=2
    )

    assert (6, 2) == (finished, most[0])


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
