"""R20: one writer per session, in one process, on the in-memory store.

A run that loses a sequence conflict appends nothing more; a turn holding a
dispatched call without its result is not continued until it is recovered;
a turn's dispatch bookkeeping is its own, so call ids reused across turns are
new calls. (The same race on a real Redis, in process and across processes,
is in ``tests/integration/runtime/test_one_writer.py``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from helmlog import (
    Agent,
    LedgerAppendError,
    RecoveryRequiredError,
    SequenceConflictError,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    is_ask_pause,
    tool,
)
from helmlog.events import (
    HelmlogError,
    MemoryEventStore,
    StoredEvent,
    ToolCallRequest,
    fold,
    verify_chain,
)
from helmlog.runtime.providers import ProviderRequest, Reply, scripted

from .helpers import stored_types

ROUNDS = 50


class NetworkStore(MemoryEventStore):
    """The in-memory store with a round trip's yield before each read and append.

    Two writers then interleave as they would over a network: both read the
    same head, and the second append is the one that conflicts.
    """

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        await asyncio.sleep(0)
        return await super().read(session_id, after_seq)

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        await asyncio.sleep(0)
        return await super().append_sealed(session_id, records, expected_seq)


class Refunds:
    """A refund tool whose every execution is counted."""

    def __init__(self) -> None:
        self.runs: list[int] = []

        @tool
        def refund(order: int, amount: float) -> str:
            """Refund an order."""
            self.runs.append(order)
            return f"refunded {amount:.2f} on order {order}"

        self.tool = refund


def four_eyes(call: Any) -> Any:
    return ask("Refund over $500?", call.args) if call.args["amount"] > 500 else allow()


def desk_model(request: ProviderRequest) -> Reply:
    """Propose the refund after the user speaks; answer after the tool does."""
    if request.messages[-1].role == "user":
        call = ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 900})
        return Reply(tool_calls=[call])
    return Reply(content="Refunded order 7.")


def desk(store: MemoryEventStore, refunds: Refunds) -> Agent:
    """The same governed agent on every host: one refund rule, one tool."""
    return (
        Agent.create(provider=scripted(respond=desk_model), model="m", store=store)
        .tool(refunds.tool)
        .tool_middleware(ToolMiddleware(name="four-eyes", on_tool_call=four_eyes))
        .build()
    )


async def _outcome(coro: Any) -> Any:
    try:
        return await coro
    except HelmlogError as exc:
        return exc


async def test_r20_of_two_concurrent_resumes_the_loser_appends_nothing() -> None:
    """R20/R9: 50 rounds: one proceeds, the other gets "replayed"; no error.fatal."""
    store, refunds = NetworkStore(), Refunds()
    first, second = desk(store, refunds), desk(store, refunds)
    lost_at_append = 0
    for _ in range(ROUNDS):
        paused = await first.run("Refund order 7 for $900")
        assert is_ask_pause(paused)
        cp = paused.checkpoint
        # Both hosts hold the paused session, so both pass the checkpoint check
        # and only the store's seq check can tell them apart.
        assert await second.recover(cp.session_id) is None
        decision = check_in_approved(by="dana@ops")
        outcomes = await asyncio.gather(
            _outcome(first.resume(cp, decision)), _outcome(second.resume(cp, decision))
        )
        answers = [o for o in outcomes if isinstance(o, str)]
        losses = [o for o in outcomes if not isinstance(o, str)]
        assert ["Refunded order 7."] == answers
        assert [("ERR_CHECKPOINT", "replayed")] == [
            (e.code, getattr(e, "reason", None)) for e in losses
        ]
        if isinstance(losses[0].__cause__, SequenceConflictError):
            lost_at_append += 1
        records = await store.read(cp.session_id)
        types = [r.decode().type for r in records]
        assert verify_chain(records) is None
        assert "error.fatal" not in types
        assert "agent.turn_end" == types[-1]
        assert 1 == types.count("pause.resume")
        assert 1 == types.count("tool.dispatched")
        state = fold(r.decode() for r in records)
        assert "refunded 900.00 on order 7" == state.history[2].content
        for host in (first, second):
            # Each host's cache is the stream as the store holds it (R1).
            live = host._sessions[cp.session_id].journal
            assert fold(r.decode() for r in records[: live.flushed_seq]) == (
                live.folder.state()
            )
    assert [7] * ROUNDS == refunds.runs
    # Both resumes passed the checkpoint check every round; the store's seq
    # check, not the cache, decided who proceeded.
    assert ROUNDS == lost_at_append


async def test_r20_a_lost_conflict_outside_a_resume_is_a_sequence_conflict() -> None:
    """R20: two hosts continue one checkpoint; the loser gets SequenceConflictError."""
    store = NetworkStore()
    one = Agent.create(provider=scripted(reply="one"), model="m", store=store).build()
    two = Agent.create(provider=scripted(reply="two"), model="m", store=store).build()
    assert "one" == await one.run("hi")
    cp = one.checkpoint()
    assert cp is not None
    before = await store.read(cp.session_id)
    outcomes = await asyncio.gather(
        _outcome(one.run("again", continue_from=cp)),
        _outcome(two.run("again", continue_from=cp)),
    )
    (conflict,) = [o for o in outcomes if isinstance(o, SequenceConflictError)]
    assert cp.session_id == conflict.session_id
    records = await store.read(cp.session_id)
    types = [r.decode().type for r in records[len(before) :]]
    assert "error.fatal" not in types
    assert 1 == types.count("agent.turn_start")
    assert "agent.turn_end" == types[-1]
    assert verify_chain(records) is None


class DownStore(MemoryEventStore):
    """A store whose server stopped answering."""

    down = False

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if self.down:
            raise ConnectionError("connection refused")
        return await super().append_sealed(session_id, records, expected_seq)


async def test_r5_a_store_outage_is_still_a_ledger_append_error() -> None:
    """R5/R20: an outage is LedgerAppendError, not a sequence conflict."""
    store = DownStore()
    agent = Agent.create(provider=scripted(reply="hi"), model="m", store=store).build()
    store.down = True
    with pytest.raises(LedgerAppendError) as info:
        await agent.run("hello")
    assert not isinstance(info.value, SequenceConflictError)


class OutageWhileAnotherWrites(MemoryEventStore):
    """An append that fails as an outage (not a conflict) — and, when
    ``lands``, landed after all; when ``other`` is set, another writer's turn
    lands first, so the stream is no longer where the failed run left it."""

    armed = False
    lands = False
    other: Agent | None = None

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if not self.armed:
            return await super().append_sealed(session_id, records, expected_seq)
        self.armed = False
        if self.other is not None:
            cp = self.other.checkpoint()
            assert cp is not None
            await self.other.recover(session_id)  # activate it on the other host
            await self.other.run("the other host's turn", continue_from=cp)
        if self.lands:
            await super().append_sealed(session_id, records, expected_seq)
        raise ConnectionError("the reply was lost")


async def test_r20_after_an_outage_a_run_appends_nothing_after_another_writer() -> None:
    """R20/R5/R24: after an outage, a run records nothing after another
    writer's events; an append of its own that landed despite the error is
    read back and the run goes on."""
    store = OutageWhileAnotherWrites()
    here = Agent.create(provider=scripted(reply="here"), model="m", store=store).build()
    there = Agent.create(
        provider=scripted(reply="there"), model="m", store=store
    ).build()
    assert "here" == await here.run("hi")
    cp = here.checkpoint()
    assert cp is not None
    await there.run("x", continue_from=cp)  # the other host holds the session
    cp = there.checkpoint()
    assert cp is not None
    store.armed, store.other = True, there
    with pytest.raises(LedgerAppendError):
        await here.run("again", continue_from=cp)
    records = await store.read(cp.session_id)
    types = [r.decode().type for r in records]
    assert "error.fatal" not in types
    assert "agent.turn_end" == types[-1]
    assert verify_chain(records) is None
    # An append that raised but landed is this run's own, and R24 reads it
    # back: the run goes on as a success, one writer throughout.
    store.armed, store.other, store.lands = True, None, True
    cp = there.checkpoint()
    assert cp is not None
    assert "here" == await here.run("once more", continue_from=cp)
    tail = [r.decode().type for r in await store.read(cp.session_id, cp.seq)]
    assert "error.fatal" not in tail
    assert "agent.turn_end" == tail[-1]
    assert verify_chain(await store.read(cp.session_id)) is None


class StopsAfterDispatch(MemoryEventStore):
    """The host stops right after it records a dispatch: nothing more lands."""

    armed = False
    dead = False

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if self.dead:
            raise ConnectionError("the host is gone")
        seq = await super().append_sealed(session_id, records, expected_seq)
        if self.armed and any(b'"tool.dispatched"' in r.data for r in records):
            self.dead = True
        return seq


class HostStopped(BaseException):
    """Stands in for the host process dying while a tool runs."""


def _lookup_tool(stop: list[bool]) -> Any:
    @tool
    def lookup(order: int) -> str:
        """Look an order up."""
        if stop and stop.pop():
            raise HostStopped
        return f"order {order} shipped"

    return lookup


def _turn(call_id: str, answer: str) -> list[Reply | str]:
    call = ToolCallRequest(id=call_id, name="lookup", args={"order": 7})
    return [Reply(tool_calls=[call]), answer]


async def test_r20_a_turn_with_a_dispatched_call_cannot_be_continued() -> None:
    """R20: follow_up and run(continue_from=) refuse until recover; nothing appended."""
    store, stop = StopsAfterDispatch(), [False]
    model = scripted(["Hello.", *_turn("c1", "Checked."), "Anything else?"])
    agent = (
        Agent.create(provider=model, model="m", store=store)
        .tool(_lookup_tool(stop))
        .build()
    )
    assert "Hello." == await agent.run("hi")
    cp = agent.checkpoint()
    assert cp is not None
    store.armed, stop[:] = True, [True]
    with pytest.raises(HostStopped):
        await agent.follow_up("where is 7?")
    store.dead = False  # the store answers again; the turn is left mid-call
    sid = cp.session_id
    before = await stored_types(agent, sid)
    for attempt in (agent.follow_up("and 8?"), agent.run("and 8?", continue_from=cp)):
        with pytest.raises(RecoveryRequiredError) as info:
            await attempt
        assert (sid, ("c1",)) == (info.value.session_id, info.value.call_ids)
        assert "ERR_RECOVERY_REQUIRED" == info.value.code
        assert f"agent.recover('{sid}')" in str(info.value)
    assert before == await stored_types(agent, sid)
    assert "Checked." == await agent.recover(sid)
    assert "Anything else?" == await agent.follow_up("and 8?")


async def test_r20_recover_settles_a_turn_that_ended_with_error_fatal() -> None:
    """R20/R7: error.fatal ends a turn; recover records its dispatched call unknown."""
    stop = [True]
    model = scripted([*_turn("c1", "unused"), "Next."])
    agent = (
        Agent.create(provider=model, model="m", store=MemoryEventStore())
        .tool(_lookup_tool(stop))
        .build()
    )
    with pytest.raises(HostStopped):
        await agent.run("where is 7?")
    sid = agent.session_id
    assert sid is not None
    assert ["tool.dispatched", "error.fatal"] == [
        t
        for t in await stored_types(agent, sid)
        if t in ("tool.dispatched", "error.fatal")
    ]
    calls_before = len(model.requests)
    assert await agent.recover(sid) is None
    assert calls_before == len(model.requests)  # the ended turn is not continued
    assert "tool.outcome_unknown" == (await stored_types(agent, sid))[-1]
    assert await agent.recover(sid) is None  # nothing left to settle
    assert "tool.outcome_unknown" == (await stored_types(agent, sid))[-1]


async def test_r20_call_ids_reused_across_turns_are_new_calls() -> None:
    """R20: a provider saying call_0 every turn gets each turn's call run and filed."""
    runs: list[int] = []
    seen: list[str] = []

    @tool
    def lookup(order: int) -> str:
        """Look an order up."""
        runs.append(order)
        return f"order {order} shipped"

    def audit(call: Any) -> Any:
        seen.append(call.tool_call_id)
        return allow()

    script: list[Reply | str] = []
    for order in (1, 2, 3):
        call = ToolCallRequest(id="call_0", name="lookup", args={"order": order})
        script += [Reply(tool_calls=[call]), f"done {order}"]
    agent = (
        Agent.create(provider=scripted(script), model="m")
        .tool(lookup)
        .tool_middleware(ToolMiddleware(name="audit", on_tool_call=audit))
        .build()
    )
    assert "done 1" == await agent.run("one")
    assert "done 2" == await agent.follow_up("two")
    assert "done 3" == await agent.follow_up("three")
    assert [1, 2, 3] == runs
    assert ["call_0"] * 3 == seen
    types = await stored_types(agent)
    assert 3 == types.count("tool.dispatched")
    assert 0 == types.count("tool.outcome_unknown")
    rows = agent.last_snapshot().middleware_decisions
    assert [("audit", "allow", "call_0")] * 3 == [
        (r.middleware, r.outcome, r.tool_call_id) for r in rows
    ]
