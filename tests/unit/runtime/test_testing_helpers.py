"""The public test helpers make runs deterministic (G50, STYLE.md "testing.py")."""

from __future__ import annotations

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import ToolCallRequest
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import (
    FakeClock,
    Recorder,
    counter_ids,
    fold_of_last_session,
)


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _agent(recorder: Recorder) -> Agent:
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="echo", args={"text": "hi"})]
            ),
            "ok",
        ]
    )
    return (
        Agent.create(
            provider=model,
            model="m",
            clock=FakeClock(),
            ids=counter_ids(),
            traces=lambda: TRACEPARENT,
        )
        .tool(echo)
        .act(before_tool=[ToolMiddleware(name="pass", on_tool_call=lambda c: allow())])
        .watch(recorder)
        .build()
    )


async def test_g50_same_script_same_clock_gives_identical_streams() -> None:
    """G50: two agents with the same chains, script, clock, ids and trace source
    store equal bytes."""
    streams = []
    for _ in range(2):
        recorder = Recorder()
        agent = _agent(recorder)
        assert "ok" == await agent.run("go")
        assert agent.session_id is not None
        streams.append([r.data for r in await agent.store.read(agent.session_id)])
        assert ["session-1"] == [agent.session_id]
        state = await fold_of_last_session(agent)
        assert agent.last_snapshot() == state
        assert 1 == len(recorder.of_type("middleware.decision"))
    assert streams[0] == streams[1]


def test_fake_clock_advances_per_reading() -> None:
    """The fake clock ticks by its step on each reading and on ``advance``."""
    clock = FakeClock(now=10, step=5)
    assert [10, 15] == [clock(), clock()]
    clock.advance(100)
    assert 120 == clock()
