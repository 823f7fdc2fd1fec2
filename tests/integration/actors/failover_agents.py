"""Agents for the failover tests, importable by Ray workers and subprocesses.

Pattern: picklable module-level factories (``factory(store) -> Agent``) whose
         tools count their runs in Redis, the one place both the dying host
         and the test can see.
Role:    test support for ``test_failover.py`` and ``test_two_nodes.py``.
Emits:   through the agents they build; the tools write ``failover:*`` keys.

Laws: R7 (a tool dispatched when its host died is not run again unless it is
idempotent), R22 (nothing but the host's own start-up finishes the turn).

Why the tool blocks on its first run and records its pid (and node, by
order): the test kills the host only once the tool really runs, so "ran
exactly once" is never zero times; the model echoes the tool message.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis

from helmlog import Agent, Tool, ask_human, tool
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

RUNS_KEY = "failover:runs"
PID_KEY = "failover:pid"
HOLD_KEY = "failover:hold"
HELD_KEY = "failover:held"
ANSWER = "the tool said: "


def redis_url_of(store: EventStore) -> str:
    """The store's Redis URL without its options (``?max_connections=...``)."""
    parts = urlsplit(store.url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


async def count_run(url: str) -> int:
    """Count one run of the tool and say which process (and node) runs it."""
    client = aioredis.from_url(url)
    try:
        # The pid first: a test that sees the run counted finds the pid set.
        await client.set(PID_KEY, os.getpid())
        runs = int(await client.incr(RUNS_KEY))
    finally:
        await client.aclose()
    return runs


def _refund_tool(url: str, *, idempotent: bool) -> Tool:
    async def refund(order: int) -> str:
        """Refund an order (its first run never returns: its host dies)."""
        if await count_run(url) == 1:
            await asyncio.Event().wait()
        return f"refunded order {order}"

    return tool(refund, idempotent=idempotent)


def _echo_after_tool(request: Any) -> Reply | str:
    tool_messages = [m for m in request.messages if m.role == "tool"]
    if tool_messages:
        return ANSWER + str(tool_messages[-1].content)
    call = ToolCallRequest(id="c1", name="refund", args={"order": 7})
    return Reply(tool_calls=[call])


def _build(store: EventStore, *, idempotent: bool) -> Agent:
    the_tool = _refund_tool(redis_url_of(store), idempotent=idempotent)
    model = scripted(respond=_echo_after_tool)
    return Agent.create(provider=model, model="m", store=store).tool(the_tool).build()


def refund_agent(store: EventStore) -> Agent:
    """Calls a non-idempotent ``refund`` once; echoes what the tool said."""
    return _build(store, idempotent=False)


def idempotent_agent(store: EventStore) -> Agent:
    """The same turn with ``refund`` declared idempotent (runs again, R7)."""
    return _build(store, idempotent=True)


def _held_tool(url: str) -> Tool:
    async def refund(order: int) -> str:
        """Refund an order; hold it while the test's hold key exists."""
        import ray

        client = aioredis.from_url(url)
        try:
            node = ray.get_runtime_context().get_node_id()
            await client.hset(HELD_KEY, str(order), node)
            # The scenario, not a wait: the tool is held until the test lets go
            # (in a Ray worker, no deadline of its own; the test's bounds it).
            while await client.exists(HOLD_KEY):
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()
        return f"refunded order {order}"

    return tool(refund)


def _held_reply(request: Any) -> Reply | str:
    tool_messages = [m for m in request.messages if m.role == "tool"]
    if tool_messages:
        return ANSWER + str(tool_messages[-1].content)
    asked = next(m for m in request.messages if m.role == "user")
    order = int(str(asked.content).rsplit(" ", 1)[-1])
    call = ToolCallRequest(id="c1", name="refund", args={"order": order})
    return Reply(tool_calls=[call])


def held_agent(store: EventStore) -> Agent:
    """Refunds the order its first message names ("refund order N") with a
    non-idempotent tool that waits while ``HOLD_KEY`` exists and records, by
    order, the Ray node it runs on; echoes what the tool said."""
    model = scripted(respond=_held_reply)
    the_tool = _held_tool(redis_url_of(store))
    return Agent.create(provider=model, model="m", store=store).tool(the_tool).build()


@tool
def pick_card(order: int) -> str:
    """Ask the customer which card to refund to."""
    ask_human("Which card should the refund go to?", {"order": order})


def _card_reply(request: Any) -> Reply | str:
    tool_messages = [m for m in request.messages if m.role == "tool"]
    if tool_messages:
        return f"Refunded to {tool_messages[-1].content}."
    call = ToolCallRequest(id="c1", name="pick_card", args={"order": 7})
    return Reply(tool_calls=[call])


def card_agent(store: EventStore) -> Agent:
    """A session that pauses on ``ask_human``; its reply depends only on what
    it is sent, so any process's agent continues it correctly."""
    model = scripted(respond=_card_reply)
    return Agent.create(provider=model, model="m", store=store).tool(pick_card).build()
