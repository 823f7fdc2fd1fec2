"""A small governed agent two processes can both build (for cross-process tests).

Run as a script, it resumes a paused session: ``python -m
tests.integration.runtime.refund_agent <store-url>`` reads a checkpoint's JSON on
stdin, approves it as ``dana@ops`` and prints the answer.
"""

from __future__ import annotations

import asyncio
import sys

from helmlog import Agent, ToolMiddleware, allow, ask, check_in_approved, tool
from helmlog.events import EventStore, open_event_store
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount:.2f} on order {order}"


def four_eyes_rule(call: object) -> object:
    args = getattr(call, "args", {})
    return ask("Refund over $500?", args) if args["amount"] > 500 else allow()


FIRST_LEG: list[Reply | str] = [
    Reply(
        tool_calls=[
            ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 900})
        ]
    ),
]
SECOND_LEG: list[Reply | str] = ["Refunded order 7."]


def build(store: EventStore, replies: list[Reply | str] | None = None) -> Agent:
    """The same agent in every process: same tools, same rules.

    ``replies`` is what the model will say from here on; a process that only
    resumes never sees the first leg's model call, which the stream recorded.
    """
    model = scripted(replies if replies is not None else FIRST_LEG + SECOND_LEG)
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(refund)
        .act(
            before_tool=[ToolMiddleware(name="four-eyes", on_tool_call=four_eyes_rule)]
        )
        .build()
    )


async def _resume(url: str, checkpoint_json: str) -> str:
    store = open_event_store(url)
    try:
        agent = build(store, SECOND_LEG)
        out = await agent.resume(checkpoint_json, check_in_approved(by="dana@ops"))
        assert isinstance(out, str)
        return out
    finally:
        await store.close()


if __name__ == "__main__":
    print(asyncio.run(_resume(sys.argv[1], sys.stdin.read())))


def resumer(store: EventStore) -> Agent:
    """The agent a person's approval resumes (for ``helmlog approve --agent``)."""
    return build(store, SECOND_LEG)
