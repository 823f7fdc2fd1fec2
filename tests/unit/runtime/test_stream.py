"""``async for event in agent.stream(message)``: the callbacks' events, as an iterator.

The iterator is an ordinary listener (G82–G84): it yields what an
``on("*")`` callback is handed for its session, in the same order, then the
call's ``TurnResult``; a failure is raised after the events it recorded; an
iteration stopped early cancels the run at a step boundary.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, TurnResult, allow, ask, tool
from helmlog.events import MiddlewareDecisionEvent, StreamToken
from helmlog.runtime import ProviderError
from helmlog.runtime.providers import scripted

from .helpers import call, calls


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def _agent(*links: ToolMiddleware, **script: Any) -> Agent:
    provider = scripted(
        [calls(call("c1", "refund", order=1)), "done"], stream=True, **script
    )
    return (
        Agent.create(provider=provider, model="m")
        .tool(refund)
        .tool_middleware(*links)
        .build()
    )


async def test_the_stream_yields_what_the_callbacks_see_then_the_result() -> None:
    """One delivery path: the iterator's events are the callback's, in order."""
    agent = _agent(ToolMiddleware(name="pass", on_tool_call=lambda c: allow()))
    seen: list[Any] = []
    agent.on("*", seen.append)
    items = [item async for item in agent.stream("refund it")]
    *events, result = items
    assert isinstance(result, TurnResult) and "done" == result.answer
    assert [(e.type, e.seq) for e in seen] == [(e.type, e.seq) for e in events]
    types = [e.type for e in events]
    for expected in (
        "agent.turn_start",
        "stream.tool_start",
        "middleware.decision",
        "stream.tool_end",
        "stream.token",
        "agent.turn_end",
    ):
        assert expected in types
    assert {result.session_id} == {e.session_id for e in events}
    assert any(isinstance(e, StreamToken) for e in events)
    assert any(isinstance(e, MiddlewareDecisionEvent) for e in events)


async def test_a_paused_stream_ends_with_the_pause_then_its_result() -> None:
    """G59: the pause is yielded, and the result carries it."""
    agent = _agent(ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?")))
    *events, result = [item async for item in agent.stream("refund it")]
    assert "pause.request" == events[-1].type
    assert result.pause is not None and "c1" == result.pause.tool_call_id


async def test_a_failed_run_is_raised_from_the_stream_after_its_events() -> None:
    """A provider failure: the recorded events come first, then the error."""

    def broken(request: Any) -> Any:
        raise ProviderError("the model is down")

    agent = Agent.create(provider=scripted(respond=broken), model="m").build()
    seen: list[str] = []
    with pytest.raises(ProviderError):
        async for event in agent.stream("hi"):
            seen.append(event.type)
    assert "agent.turn_start" == seen[0]
    assert "error.fatal" == seen[-1]


async def test_streams_of_two_sessions_do_not_mix() -> None:
    """Each iterator yields only its own session's events."""
    agent = Agent.create(provider=scripted(reply="ok"), model="m").build()
    first = [e async for e in agent.stream("a")]
    second = [e async for e in agent.stream("b")]
    ids_first = {e.session_id for e in first[:-1]}
    ids_second = {e.session_id for e in second[:-1]}
    assert 1 == len(ids_first) == len(ids_second)
    assert ids_first != ids_second
