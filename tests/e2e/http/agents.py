"""Agents that ``helmlog serve`` serves in the HTTP tests (``module:function``).

Each reads the store it is given and answers from the request alone
(``scripted(respond=...)``), so one agent serves any number of sessions:
"Refund order N for $X" proposes ``refund``; an amount over $500 asks
"four-eyes"; the tool's message is answered with what it said.
"""

from __future__ import annotations

import re
from typing import Any

from helmlog import Agent, ToolMiddleware, allow, ask, conversation_redaction, tool
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount:.2f} on order {order}"


def four_eyes_rule(call: Any) -> Any:
    if call.args["amount"] <= 500:
        return allow()
    return ask("Refund over $500?", {"amount": call.args["amount"]})


DEADLINE_S = 0.3


def hurried_rule(call: Any) -> Any:
    if call.args["amount"] <= 500:
        return allow()
    return ask("Refund over $500?", timeout_s=DEADLINE_S)


def respond(request: Any) -> Reply | str:
    last = request.messages[-1]
    if last.role == "tool":
        return f"Done: {last.content}"
    found = re.search(r"order (\d+) for \$(\d+)", last.content or "")
    if found is None:
        return f"You said: {last.content}"
    order, amount = int(found.group(1)), float(found.group(2))
    return Reply(
        tool_calls=[
            ToolCallRequest(
                id=f"c{order}", name="refund", args={"order": order, "amount": amount}
            )
        ]
    )


def build(store: EventStore, rule: Any = four_eyes_rule, **options: Any) -> Agent:
    """The refund desk: one tool, one four-eyes rule."""
    return (
        Agent.create(
            provider=scripted(respond=respond), model="m", store=store, **options
        )
        .tool(refund)
        .act(before_tool=[ToolMiddleware(name="four-eyes", on_tool_call=rule)])
        .build()
    )


def hurried(store: EventStore) -> Agent:
    """The refund desk whose four-eyes ask gives a person ``DEADLINE_S``."""
    return build(store, hurried_rule)


def redacted(store: EventStore) -> Agent:
    """The refund desk under ``conversation_redaction()`` (G85)."""
    return build(store, redact=conversation_redaction())
