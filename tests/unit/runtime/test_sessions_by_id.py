"""Sessions by id, one agent for many callers, each call its own result.

Issue 12 item 3.

``agent.run(m, session_id=existing)`` continues a stored session from its
stream where its conversation stands (R1: the stream is the truth, no
checkpoint from the caller); ``agent.turn``/``resume_turn`` return the call's
own ``TurnResult``, so concurrent callers never read each other's "last"
state.
"""

from __future__ import annotations

import asyncio

import pytest

from helmlog import (
    Agent,
    NoConversationError,
    ToolMiddleware,
    TurnResult,
    ask,
    check_in_approved,
    tool,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import ProviderRequest, Reply, scripted

from .helpers import call, calls


def history(request: ProviderRequest) -> Reply:
    """Answer with the user messages the model was sent, joined."""
    said = [m.content for m in request.messages if m.role == "user"]
    return Reply(content=" | ".join(said))


def _agent(store: MemoryEventStore) -> Agent:
    return Agent.create(
        provider=scripted(respond=history), model="m", store=store
    ).build()


async def test_r1_run_by_session_id_continues_the_stored_conversation() -> None:
    """R1: a stored session named by id continues from its stream."""
    store = MemoryEventStore()
    first = await _agent(store).turn("one")
    assert "one" == first.answer
    # Another agent on the same store (another process, in production).
    assert "one | two" == await _agent(store).run("two", session_id=first.session_id)
    assert "one | two | three" == await _agent(store).run(
        "three", session_id=first.session_id
    )


async def test_one_agent_serves_concurrent_sessions_each_its_own() -> None:
    """Concurrent sessions on one agent: each call's result and history are its own."""
    agent = _agent(MemoryEventStore())
    starts = await asyncio.gather(*(agent.turn(f"s{n}") for n in range(8)))
    assert [f"s{n}" for n in range(8)] == [r.answer for r in starts]
    assert 8 == len({r.session_id for r in starts})
    follow = await asyncio.gather(
        *(agent.turn(f"s{n}+", session_id=r.session_id) for n, r in enumerate(starts))
    )
    assert [f"s{n} | s{n}+" for n in range(8)] == [r.answer for r in follow]
    assert [r.session_id for r in starts] == [r.session_id for r in follow]
    again = await asyncio.gather(
        *(agent.turn("x", continue_from=r.checkpoint) for r in follow)
    )
    assert [f"s{n} | s{n}+ | x" for n in range(8)] == [r.answer for r in again]


async def test_a_turn_result_carries_its_session_and_checkpoint() -> None:
    """A ``TurnResult``: the answer, its session id, the checkpoint it left."""
    agent = _agent(MemoryEventStore())
    result = await agent.turn("hi")
    assert isinstance(result, TurnResult)
    assert (False, "hi") == (result.paused, result.value)
    assert result.checkpoint is not None
    assert result.session_id == result.checkpoint.session_id
    assert agent.checkpoint() == result.checkpoint  # the one-script convenience


async def test_a_paused_turn_result_resumes_and_continuing_by_id_waits_for_it() -> None:
    """G68: a session waiting on a person refuses a new message by id."""

    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded {order}"

    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    agent = (
        Agent.create(
            provider=scripted([calls(call("c1", "refund", order=1)), "done", "more"]),
            model="m",
        )
        .tool(refund)
        .tool_middleware(four_eyes)
        .build()
    )
    paused = await agent.turn("refund")
    assert paused.pause is not None and paused.checkpoint == paused.pause.checkpoint
    assert paused.session_id == paused.pause.session_id
    with pytest.raises(NoConversationError) as refused:
        await agent.run("anything else?", session_id=paused.session_id)
    assert "pending-question" == refused.value.reason
    done = await agent.resume_turn(paused.checkpoint, check_in_approved(by="d"))
    assert ("done", paused.session_id) == (done.answer, done.session_id)
    assert "more" == await agent.run("more?", session_id=paused.session_id)


async def test_session_id_and_a_checkpoint_of_another_session_are_refused() -> None:
    """Bad input: ``session_id`` naming another session than the checkpoint's."""
    agent = _agent(MemoryEventStore())
    result = await agent.turn("hi")
    with pytest.raises(ValueError, match="is not the checkpoint's session"):
        await agent.run("x", session_id="other", continue_from=result.checkpoint)
    with pytest.raises(ValueError, match="non-empty str"):
        await agent.run("x", session_id="")
