"""R21: an agent keeps a bounded set of sessions resident, and drops idle ones.

At most ``max_resident`` sessions; those idle longer than ``idle_s`` (on the
agent's clock) are dropped; a session with an operation in flight never is; a
dropped session re-activates from its stream on next use, silently (R6).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helmlog import Agent, AgentBuildError, is_ask_pause, tool
from helmlog.events import MemoryEventStore, ToolCallRequest, fold
from helmlog.runtime import ToolMiddleware, ask, check_in_approved
from helmlog.runtime.providers import ProviderRequest, Reply, scripted
from helmlog.runtime.testing import FakeClock

MINUTE_MS = 60_000


def echo(request: ProviderRequest) -> Reply:
    """Answer with how many user messages the conversation holds."""
    users = sum(1 for m in request.messages if m.role == "user")
    return Reply(content=f"turn {users}")


def agent_on(store: MemoryEventStore, clock: FakeClock, **options: Any) -> Agent:
    return Agent.create(
        provider=scripted(respond=echo), model="m", store=store, clock=clock, **options
    ).build()


def test_r21_the_defaults_are_ten_thousand_sessions_and_ten_minutes() -> None:
    """R21: defaults documented on Agent.create: max_resident=10_000, idle_s=600."""
    agent = Agent.create(provider=scripted(reply="x"), model="m").build()
    assert (10_000, 600.0) == (agent.config.max_resident, agent.config.idle_s)


@pytest.mark.parametrize(
    "options",
    [{"max_resident": 0}, {"max_resident": "9"}, {"idle_s": -1}, {"idle_s": True}],
)
def test_r21_bad_bounds_are_refused_at_build(options: dict[str, Any]) -> None:
    """R21: max_resident is an int ≥ 1, idle_s a number ≥ 0; else AgentBuildError."""
    with pytest.raises(AgentBuildError):
        Agent.create(provider=scripted(reply="x"), model="m", **options)


async def test_r21_an_evicted_session_reactivates_silently_and_continues() -> None:
    """R21/R6: evict idle, then the next turn folds the stream and goes on."""
    store, clock = MemoryEventStore(), FakeClock()
    agent = agent_on(store, clock, idle_s=60)
    assert "turn 1" == await agent.run("one")
    sid = agent.session_id
    assert sid is not None
    before = agent.last_snapshot()
    stream = await store.read(sid)
    assert 0 == agent.evict_idle()  # used just now
    clock.advance(MINUTE_MS + 1)
    assert 1 == agent.evict_idle()
    assert 0 == agent.resident_count
    # The last run's session still answers for itself while not resident.
    assert (sid, before) == (agent.session_id, agent.last_snapshot())
    assert agent.checkpoint() is not None
    assert stream == await store.read(sid)  # dropping appended nothing
    assert "turn 2" == await agent.follow_up("two")
    assert 1 == agent.resident_count
    records = await store.read(sid)
    assert stream == records[: len(stream)]  # activation appended nothing
    assert fold(r.decode() for r in records) == agent.last_snapshot()
    assert ["user", "assistant"] * 2 == [m.role for m in agent.last_snapshot().history]


async def test_r21_a_dropped_paused_session_resumes_from_its_stream() -> None:
    """R21/R6: a pause held by no cache is resumed from the stream alone."""
    store, clock = MemoryEventStore(), FakeClock()

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded {order}"

    call = ToolCallRequest(id="c1", name="refund", args={"order": 7})
    agent = (
        Agent.create(
            provider=scripted([Reply(tool_calls=[call]), "Refunded."]),
            model="m",
            store=store,
            clock=clock,
        )
        .tool(refund)
        .tool_middleware(
            ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("Refund?"))
        )
        .build()
    )
    paused = await agent.run("refund 7")
    assert is_ask_pause(paused)
    assert agent.forget(paused.checkpoint.session_id)
    assert not agent.forget(paused.checkpoint.session_id)  # already gone
    answer = await agent.resume(paused.checkpoint, check_in_approved(by="dana"))
    assert "Refunded." == answer


async def test_r21_a_session_in_the_middle_of_an_operation_is_never_dropped() -> None:
    """R21: while a tool runs, neither evict_idle, forget nor the cap drops it."""
    store, clock = MemoryEventStore(), FakeClock()
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow(order: int) -> str:
        """Take a while."""
        started.set()
        await release.wait()
        return "done"

    def model(request: ProviderRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and last.content == "go":
            call = ToolCallRequest(id="c1", name="slow", args={"order": 1})
            return Reply(tool_calls=[call])
        return Reply(content="finished") if last.role == "tool" else echo(request)

    agent = (
        Agent.create(
            provider=scripted(respond=model),
            model="m",
            store=store,
            clock=clock,
            idle_s=1,
            max_resident=1,
        )
        .tool(slow)
        .build()
    )
    other = agent_on(store, clock)
    assert "turn 1" == await other.run("elsewhere")
    running = asyncio.ensure_future(agent.run("go"))
    await asyncio.wait_for(started.wait(), timeout=10)
    sid = agent.session_id
    assert sid is not None
    clock.advance(10 * MINUTE_MS)
    assert 0 == agent.evict_idle()
    assert not agent.forget(sid)
    # The cap cannot drop it either: a second session is admitted beside it.
    cp = other.checkpoint()
    assert cp is not None
    assert "turn 2" == await agent.run("here too", continue_from=cp)
    assert sid in agent._sessions
    release.set()
    assert "finished" == await asyncio.wait_for(running, timeout=10)
    clock.advance(10 * MINUTE_MS)
    assert 1 == agent.evict_idle()
    assert 0 == agent.resident_count


async def test_r21_the_cap_holds_and_dropped_sessions_continue() -> None:
    """R21: max_resident=3 over 10 sessions: 3 resident; the first still continues."""
    store, clock = MemoryEventStore(), FakeClock()
    agent = agent_on(store, clock, max_resident=3)
    checkpoints = []
    for n in range(10):
        assert "turn 1" == await agent.run(f"hello {n}")
        checkpoints.append(agent.checkpoint())
        assert min(n + 1, 3) == agent.resident_count
    assert [cp.session_id for cp in checkpoints[-3:] if cp] == list(agent._sessions)
    first = checkpoints[0]
    assert first is not None
    assert "turn 2" == await agent.run("again", continue_from=first)
    assert 3 == agent.resident_count
    assert first.session_id in agent._sessions


async def test_r21_idle_sessions_are_collected_as_new_ones_arrive() -> None:
    """R21: admitting a session drops those idle longer than idle_s, oldest first."""
    store, clock = MemoryEventStore(), FakeClock()
    agent = agent_on(store, clock, idle_s=60)
    await agent.run("one")
    await agent.run("two")
    clock.advance(MINUTE_MS + 1)
    await agent.run("three")
    assert 1 == agent.resident_count


class FlakyReads(MemoryEventStore):
    """A store whose reads fail while ``down`` (its server is unreachable)."""

    down = False

    async def read(self, session_id: str, after_seq: int = 0) -> list[Any]:
        if self.down:
            raise ConnectionError("connection refused")
        return await super().read(session_id, after_seq)


async def test_r21_a_failed_activation_leaves_nothing_resident() -> None:
    """R21/R6: a session whose stream could not be read is not cached as empty."""
    store, clock = FlakyReads(), FakeClock()
    assert "turn 1" == await agent_on(store, clock).run("one")
    (sid,) = await store.sessions()
    host = agent_on(store, clock)
    store.down = True
    with pytest.raises(ConnectionError):
        await host.recover(sid)
    with pytest.raises(ConnectionError):
        await host.run("hi", session_id="fresh")
    assert 0 == host.resident_count
    store.down = False
    assert "turn 1" == await host.run("hi", session_id="fresh")
    # Named by id, the stored session activates and continues from its stream.
    assert "turn 2" == await host.run("hello", session_id=sid)
    assert await host.recover(sid) is None
    assert 2 == host.resident_count
