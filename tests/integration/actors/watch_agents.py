"""Agents for the cluster-watch tests, importable by Ray workers.

Each answers from what its model is sent (nothing kept between calls), so a
host that re-activates a session continues it as the first one would.
"""

from __future__ import annotations

from typing import Any

from helmlog import Agent, ToolMiddleware, allow, conversation_redaction, tool
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


@tool
def refund(order: int, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount} on order {order}"


def answer(request: Any) -> Reply | str:
    """One refund of 50 per turn; "Done." once its result is in view."""
    if request.messages[-1].role == "tool":
        return "Done."
    call = ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 50})
    return Reply(tool_calls=[call])


def cap(call: Any) -> Any:
    """A rewrite: refunds are capped at 25 (the row holds before and after)."""
    if call.args["amount"] > 25:
        return allow({**call.args, "amount": 25}, "capped at 25")
    return allow()


def capped(store: EventStore, *, redact: bool = False) -> Agent:
    """The refund desk with its cap, optionally redacting (G85)."""
    builder = Agent.create(
        provider=scripted(respond=answer),
        model="m",
        store=store,
        redact=conversation_redaction() if redact else None,
    )
    link = ToolMiddleware(name="cap", on_tool_call=cap)
    return builder.tool(refund).tool_middleware(link).build()


def redacted(store: EventStore) -> Agent:
    """``capped`` under ``conversation_redaction()``."""
    return capped(store, redact=True)


def gate_key(gate: str) -> str:
    """The Redis key a watcher sets to let ``gated``'s tool return."""
    return f"{gate}:open"


def gated(store: EventStore) -> Agent:
    """The cap, before a tool that returns only once a watcher has heard the
    cap's fact and opened the gate the message names (or after 30 s)."""
    url = store.url

    @tool
    async def wait_for_gate(gate: str) -> str:
        """Wait until the gate is open."""
        import asyncio

        import redis.asyncio as redis

        client = redis.from_url(url)
        try:
            loop = asyncio.get_running_loop()
            # The scenario, not a wait: a tool that blocks on a gate the test
            # opens; it answers "timed out" itself (the test checks which).
            deadline = loop.time() + 30
            while loop.time() < deadline:
                if await client.get(gate_key(gate)):
                    return "opened"
                await asyncio.sleep(0.05)
            return "timed out"
        finally:
            await client.aclose()

    def respond(request: Any) -> Reply | str:
        if request.messages[-1].role == "tool":
            return "Done."
        gate = request.messages[-1].content
        call = ToolCallRequest(id="c1", name="wait_for_gate", args={"gate": gate})
        return Reply(tool_calls=[call])

    link = ToolMiddleware(name="cap", on_tool_call=lambda call: allow())
    return (
        Agent.create(provider=scripted(respond=respond), model="m", store=store)
        .tool(wait_for_gate)
        .tool_middleware(link)
        .build()
    )
