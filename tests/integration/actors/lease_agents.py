"""Agents for the lease test (R27), importable by Ray workers.

Pattern: a picklable module-level factory (``factory(store) -> Agent``)
         whose tools count their runs in Redis, per tool and order.
Role:    test support for ``test_lease.py``.
Emits:   through the agents it builds; the tools write ``lease:*`` keys.

Laws: R27 (a stopped host's shard is taken over when its lease expires),
R7 (the taker re-runs an idempotent tool, records a non-idempotent one as
``tool.outcome_unknown``), R20 (the woken host appends nothing).

Why each call's first run holds until the test lets it go: the host is
stopped only once its tools really run, and the held runs finish only after
the takeover and the wake-up, so the woken host really tries to append.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis.asyncio as aioredis

from helmlog import Agent, Tool, tool
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

from .failover_agents import redis_url_of

HOLD_KEY = "lease:hold"
PID_KEY = "lease:pid"
ANSWER = "the tool said: "


def runs_key(tool_name: str, order: int) -> str:
    """Where the runs of ``tool_name`` for ``order`` are counted."""
    return f"lease:runs:{tool_name}:{order}"


def returned_key(tool_name: str, order: int) -> str:
    """Where the returns of ``tool_name`` for ``order`` are counted."""
    return f"lease:returned:{tool_name}:{order}"


def _held_tool(url: str, name: str, *, idempotent: bool) -> Tool:
    async def run(order: int) -> str:
        client = aioredis.from_url(url)
        try:
            # The pid first: a test that sees the run counted finds it set.
            await client.hset(PID_KEY, str(order), os.getpid())
            if int(await client.incr(runs_key(name, order))) == 1:
                # The scenario, not a wait: the first run is held until the
                # test lets go (in a Ray worker; the test's timeout bounds it).
                while await client.exists(HOLD_KEY):
                    await asyncio.sleep(0.05)
            await client.incr(returned_key(name, order))
        finally:
            await client.aclose()
        return f"{name} done for order {order}"

    return tool(
        run,
        name=name,
        description=f"{name.capitalize()} an order (its first run holds).",
        idempotent=idempotent,
    )


def _reply(request: Any) -> Reply | str:
    tool_messages = [m for m in request.messages if m.role == "tool"]
    if tool_messages:
        return ANSWER + str(tool_messages[-1].content)
    asked = next(m for m in request.messages if m.role == "user")
    verb, _, order = str(asked.content).split(" ")
    call = ToolCallRequest(id="c1", name=verb, args={"order": int(order)})
    return Reply(tool_calls=[call])


def lease_agent(store: EventStore) -> Agent:
    """Runs "<refund|reserve> order N": ``refund`` is not idempotent,
    ``reserve`` is; echoes what the tool said."""
    url = redis_url_of(store)
    return (
        Agent.create(provider=scripted(respond=_reply), model="m", store=store)
        .tool(_held_tool(url, "refund", idempotent=False))
        .tool(_held_tool(url, "reserve", idempotent=True))
        .build()
    )
