"""Fail closed on the ledger, against a real Redis stopped mid-run (R5).

When an append fails, the governed action does not happen — the tool is not
executed, the answer is not released — and the run raises a retryable
``LedgerAppendError`` naming the store. Nothing already recorded is lost: once
Redis is back, the stream holds every event appended before the failure, its
chain verifies, and it folds.
"""

from __future__ import annotations

import pytest

from helmlog import (
    Agent,
    LedgerAppendError,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    tool,
)
from helmlog.events import EventStore, fold, open_event_store, verify_chain
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from tests.fixtures_redis import RedisServer

pytestmark = pytest.mark.redis


def _agent(store: EventStore, executed: list[int], **links: list[object]) -> Agent:
    @tool
    def refund(order: int) -> str:
        """Refund an order."""
        executed.append(order)
        return f"refunded {order}"

    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": 7})]
            ),
            "Refunded.",
        ]
    )
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(refund)
        .act(**links)  # type: ignore[arg-type]
        .build()
    )


async def test_r5_tool_not_executed_when_the_dispatch_record_fails(
    private_redis: RedisServer,
) -> None:
    """Redis stops during the before-tool walk: the tool never runs; the run raises."""
    store = open_event_store(private_redis.url)
    executed: list[int] = []

    def stop_redis(call: object) -> object:
        private_redis.stop()
        return allow()

    agent = _agent(
        store,
        executed,
        before_tool=[ToolMiddleware(name="stopper", on_tool_call=stop_redis)],
    )
    with pytest.raises(LedgerAppendError) as info:
        await agent.run("Refund order 7")
    assert [] == executed
    err = info.value
    assert (True, "ERR_LEDGER_APPEND") == (err.retryable, err.code)
    assert private_redis.url.split("/0")[0] in str(err)
    assert agent.session_id == err.session_id

    private_redis.start()
    records = await store.read(err.session_id)
    assert verify_chain(records) is None
    types = [r.decode().type for r in records]
    assert "tool.dispatched" not in types
    assert ["agent.turn_start", "message.committed", "stream.llm_start"] == types[:3]
    state = fold(r.decode() for r in records)
    assert ("user",) == tuple(
        m.role for m in state.history
    )  # the reply was never recorded
    await store.close()


async def test_r5_answer_not_released_when_the_output_record_fails(
    private_redis: RedisServer,
) -> None:
    """Redis stops during the output walk: no token, no turn_end, the run raises."""
    store = open_event_store(private_redis.url)
    executed: list[int] = []
    tokens: list[str] = []

    def stop_at_output(msg: object) -> object:
        if getattr(msg, "phase", "") == "output":
            private_redis.stop()
        return allow()

    agent = _agent(
        store,
        executed,
        output=[MessageMiddleware(name="stopper", on_message=stop_at_output)],
    )
    agent.on("stream.token", lambda ev: tokens.append(ev.content))
    with pytest.raises(LedgerAppendError):
        await agent.run("Refund order 7")
    assert [7] == executed
    assert [] == tokens

    private_redis.start()
    records = await store.read(agent.session_id or "")
    assert verify_chain(records) is None
    types = [r.decode().type for r in records]
    assert "agent.turn_end" not in types
    assert "stream.tool_end" in types  # what was recorded before the failure stays
    await store.close()
