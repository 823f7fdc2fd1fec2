"""Turn limits: a runaway turn stops, typed and recorded; the session goes on.

Issue 12 item 1.

``max_model_calls`` (default 25), ``max_tool_calls`` (default 100) and
``max_turn_s`` (default none) bound one turn. A turn that reaches one raises
``TurnLimitError``, recorded as ``error.fatal`` with its code (G91); the
session continues from its last answer. The loop yields between its steps, so
a cancellation lands even when every tool is sync and the store never waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest

from helmlog import Agent, AgentBuildError, TurnLimitError, tool
from helmlog.events import FatalError, MemoryEventStore
from helmlog.runtime.providers import ProviderRequest, Reply, scripted
from helmlog.runtime.testing import FakeClock

from ...polling import until
from .helpers import call, calls, stored

SESSION = "runaway"


@tool
def ping(n: int) -> str:
    """A sync tool that returns at once."""
    return f"pong {n}"


def runaway(request: ProviderRequest) -> Reply:
    """Call the tool forever, unless the user says "stop"."""
    if request.messages[-1].role == "user" and request.messages[-1].content == "stop":
        return Reply(content="stopped")
    return calls(call(f"c{len(request.messages)}", "ping", n=len(request.messages)))


def _agent(**limits: Any) -> Agent:
    return (
        Agent.create(provider=scripted(respond=runaway), model="m", **limits)
        .tool(ping)
        .build()
    )


async def test_max_model_calls_stops_a_runaway_turn_recorded_and_continuable() -> None:
    """The default 25 model calls: typed error, ``error.fatal`` with its code."""
    agent = _agent()
    assert 25 == agent.config.max_model_calls
    with pytest.raises(TurnLimitError) as stopped:
        await agent.run("go", session_id=SESSION)
    assert ("max_model_calls", 25) == (stopped.value.limit, stopped.value.value)
    events = await stored(agent, SESSION)
    assert 25 == sum(e.type == "stream.llm_start" for e in events)
    (fatal,) = [e for e in events if isinstance(e, FatalError)]
    assert ("ERR_TURN_LIMIT", False) == (fatal.code, fatal.retryable)
    assert "stopped" == await agent.run("stop", session_id=SESSION)


async def test_max_tool_calls_stops_before_the_call_past_the_limit() -> None:
    """``max_tool_calls=3``: a reply proposing five calls runs three."""
    five = calls(*(call(f"c{n}", "ping", n=n) for n in range(5)))
    agent = (
        Agent.create(provider=scripted([five]), model="m", max_tool_calls=3)
        .tool(ping)
        .build()
    )
    with pytest.raises(TurnLimitError) as stopped:
        await agent.run("go", session_id=SESSION)
    assert ("max_tool_calls", 3) == (stopped.value.limit, stopped.value.value)
    events = await stored(agent, SESSION)
    assert 3 == sum(e.type == "stream.tool_end" for e in events)
    assert "error.fatal" == events[-1].type


async def test_max_turn_s_stops_a_turn_on_the_agents_clock() -> None:
    """``max_turn_s=1`` on a clock that moves 100 ms a reading."""
    agent = (
        Agent.create(
            provider=scripted(respond=runaway),
            model="m",
            clock=FakeClock(step=100),
            max_turn_s=1,
        )
        .tool(ping)
        .build()
    )
    with pytest.raises(TurnLimitError) as stopped:
        await agent.run("go", session_id=SESSION)
    assert ("max_turn_s", 1) == (stopped.value.limit, stopped.value.value)
    assert "stopped" == await agent.run("stop", session_id=SESSION)


async def test_wait_for_cancels_a_runaway_turn_of_sync_tools() -> None:
    """The loop yields between steps: ``asyncio.wait_for`` can stop it."""
    agent = _agent(max_model_calls=10**9, max_tool_calls=10**9)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.run("go", session_id=SESSION), timeout=0.2)
    events = await stored(agent, SESSION)
    assert "error.fatal" == events[-1].type
    assert "stopped" == await agent.run("stop", session_id=SESSION)


async def test_a_stream_stopped_early_cancels_its_run() -> None:
    """Leaving ``agent.stream`` early (closed, as ``aclosing`` does) cancels
    the turn; it is recorded."""
    agent = _agent(max_model_calls=10**9, max_tool_calls=10**9)
    async with contextlib.aclosing(agent.stream("go", session_id=SESSION)) as events:
        async for event in events:
            if event.type == "stream.tool_end":
                break
    events = await stored(agent, SESSION)
    assert "error.fatal" == events[-1].type
    assert "stopped" == await agent.run("stop", session_id=SESSION)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_model_calls": 0},
        {"max_model_calls": True},
        {"max_tool_calls": "5"},
        {"max_turn_s": 0},
        {"max_turn_s": -1.5},
    ],
)
def test_bad_limits_are_refused_at_build(limits: dict[str, Any]) -> None:
    """Bad input: each limit is checked when the agent is built."""
    with pytest.raises(AgentBuildError):
        Agent.create(provider=scripted(reply="x"), model="m", **limits)


def test_the_default_limits_are_documented_values() -> None:
    """25 model calls, 100 tool calls, no time limit."""
    config = Agent.create(provider=scripted(reply="x"), model="m").build().config
    assert (25, 100, None) == (
        config.max_model_calls,
        config.max_tool_calls,
        config.max_turn_ms,
    )
    assert MemoryEventStore is type(config.store)


async def test_a_cancel_during_a_threaded_tool_waits_and_records_its_result() -> None:
    """R7/R23: a sync tool runs in a worker thread; a cancellation that arrives
    meanwhile lands at the next step boundary, after the result is recorded,
    so the session needs no recovery."""
    started, release = threading.Event(), threading.Event()

    @tool
    def slow(n: int) -> str:
        """A blocking sync tool."""
        started.set()
        release.wait(timeout=30)
        return f"slow {n}"

    agent = (
        Agent.create(
            provider=scripted(
                respond=lambda r: (
                    Reply(content="stopped")
                    if r.messages[-1].role == "user"
                    and r.messages[-1].content == "stop"
                    else calls(call("c1", "slow", n=1))
                )
            ),
            model="m",
        )
        .tool(slow)
        .build()
    )
    assert slow.threaded
    run = asyncio.ensure_future(agent.run("go", session_id=SESSION))
    await until("the tool starts", started.is_set, 30)
    run.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await run
    events = await stored(agent, SESSION)
    assert ["stream.tool_end", "error.fatal"] == [
        e.type for e in events if e.type in ("stream.tool_end", "error.fatal")
    ]
    assert "stopped" == await agent.run("stop", session_id=SESSION)


def test_async_and_inline_tools_run_on_the_loop_sync_ones_in_a_thread() -> None:
    """R23: only a sync execute not declared ``inline`` runs in a worker thread."""

    @tool(inline=True)
    def quick(n: int) -> str:
        """Returns at once."""
        return str(n)

    @tool
    async def awaited(n: int) -> str:
        """Async."""
        return str(n)

    assert (True, False, False) == (ping.threaded, quick.threaded, awaited.threaded)
