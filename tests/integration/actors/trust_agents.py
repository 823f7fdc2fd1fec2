"""An agent whose refunds a person approves once, importable by Ray workers.

Pattern: a picklable module-level factory (``factory(store) -> Agent``) that
         guards ``refund`` with ``helmlog.rules.approve_once()``; the tool
         answers its process's pid and the model echoes it.
Role:    test support for ``test_approve_once_cluster.py``.
Emits:   through the agent it builds.

Laws: issue 22 (session trust is folded from the session's own stream, so a
session a host dropped (R21) or rebuilt after a kill (R22) remembers it).

Why the model derives its calls from what it is sent: each activation builds
a fresh provider, so a reply computed from the request is the same on every
host, where a script by position would restart.
"""

from __future__ import annotations

import os
from typing import Any

from helmlog import Agent, tool
from helmlog.events import EventStore
from helmlog.rules import approve_once
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

ANSWER = "the tool said: "


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order; say which process ran it."""
    return f"refunded {amount:g} on order {order} in process {os.getpid()}"


def _desk(request: Any) -> Reply | str:
    last = request.messages[-1]
    if last.role == "tool":
        return ANSWER + str(last.content)
    users = sum(1 for m in request.messages if m.role == "user")
    args = {"order": 7, "amount": 25.0}
    return Reply(tool_calls=[ToolCallRequest(id=f"c{users}", name="refund", args=args)])


def trust_agent(store: EventStore) -> Agent:
    """Refunds order 7 for 25 on every message, behind ``approve_once()``."""
    return (
        Agent.create(provider=scripted(respond=_desk), model="m", store=store)
        .tool(refund)
        .act(before_tool=[approve_once(tools={"refund"})])
        .build()
    )
