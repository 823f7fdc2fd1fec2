"""The governance scenario every framework test and the native loop share.

Pattern: one table (a PII scrub at input, a refund ceiling that denies, an
         ask over a threshold, an after-tool card redaction, an output
         codename rule), two tools as plain functions each framework wraps
         in its own tool type, two scripted conversations, and the native
         loop's record of them (``expected_rows``) that every framework's
         steered session must equal, row for row.
Role:    test support for ``tests/integration/integrations``; also the
         module a second process imports to decide an ask
         (``helmlog approve --agent tests.integration.integrations.scenario:governance``
         for a steered session, ``...:native_agent`` for the native loop's).

Laws: issue 27 item 6 (one scenario, the same ledger rows in every framework
and in the native loop), G7, G15, G21, G33–G43, G59–G64.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from helmlog import (
    Agent,
    Message,
    MessageMiddleware,
    MiddlewareDecision,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import EventStore, MemoryEventStore, fold
from helmlog.integrations import Governance
from helmlog.rules import PiiScrub
from helmlog.runtime.providers import (
    Provider,
    ProviderRequest,
    Reply,
    ToolCallRequest,
    framework_model,
    scripted,
)

# -- the conversations ----------------------------------------------------------

APPROVER = "dana@ops"
"""Who approves the ask (``HELMLOG_APPROVER`` of the approving process)."""

REFUND_800 = "refund-800"
REFUND_20000 = "refund-20000"

MESSAGES: dict[str, str] = {
    REFUND_800: "Refund order 7 for $800, my SSN is 123-45-6789",
    REFUND_20000: "Refund order 9 for $20,000",
}
"""What the user sends, per conversation."""

ANSWERS: dict[str, str] = {
    REFUND_800: "Refunded $800.00 on order 7 (ticket BLUEBIRD-7).",
    REFUND_20000: "I cannot refund $20,000 here; the finance desk will follow up.",
}
"""The model's last reply (the draft the output rule walks), per conversation."""

FINAL: dict[str, str] = {
    REFUND_800: "Refunded $800.00 on order 7 (ticket [codename]-7).",
    REFUND_20000: ANSWERS[REFUND_20000],
}
"""The answer the user reads, after the output rule."""

SCRIPTS: dict[str, list[Reply]] = {
    REFUND_800: [
        Reply(
            tool_calls=[
                ToolCallRequest(id="c1", name="lookup_order", args={"order_id": "7"})
            ]
        ),
        Reply(
            tool_calls=[
                ToolCallRequest(
                    id="c2", name="refund", args={"order_id": "7", "amount": 800}
                )
            ]
        ),
        Reply(ANSWERS[REFUND_800]),
    ],
    REFUND_20000: [
        Reply(
            tool_calls=[
                ToolCallRequest(
                    id="c1", name="refund", args={"order_id": "9", "amount": 20000}
                )
            ]
        ),
        Reply(ANSWERS[REFUND_20000]),
    ],
}
"""The model's replies, in order: each framework's own fake model plays these
(its tool calls with these ids, names and arguments)."""

TOOL_RESULTS: dict[str, str] = {
    "lookup_order": "order 7: $800.00 paid with card [card]",
    "refund": "refunded $800.00 on order 7",
}
"""What the model reads of each tool in ``REFUND_800`` (after the redaction)."""

REFUSAL = "refunds over $10,000 go to the finance desk"
"""What the model reads of the refund in ``REFUND_20000`` (the ceiling's)."""

# -- the tools: plain functions each framework wraps ---------------------------

RUNS_ENV = "HELMLOG_SCENARIO_RUNS"
"""A file each tool execution appends its name to (across processes), if set."""


def _ran(name: str) -> None:
    path = os.environ.get(RUNS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(name + "\n")


def runs(path: str | Path) -> list[str]:
    """The tool executions recorded in ``path`` (``RUNS_ENV``), in order."""
    p = Path(path)
    return p.read_text(encoding="utf-8").split() if p.exists() else []


def lookup_order(order_id: str) -> str:
    """Look an order up: its amount and how it was paid."""
    _ran("lookup_order")
    return f"order {order_id}: $800.00 paid with card 4111 1111 1111 1111"


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    _ran("refund")
    return f"refunded ${float(amount):,.2f} on order {order_id}"


def native_tools() -> list[Tool]:
    """The two tools as helmlog's own (``@tool``)."""
    return [tool(lookup_order), tool(refund)]


# -- the governance table ---------------------------------------------------------


CEILING = 10_000


def _ceiling(limit: float) -> Any:
    def judge(call: Any) -> Any:
        if call.tool_name == "refund" and float(call.args["amount"]) > limit:
            return deny(REFUSAL if limit == CEILING else f"refunds over ${limit:,.0f}")
        return allow()

    return judge


def _four_eyes(call: Any) -> Any:
    if call.tool_name == "refund" and float(call.args["amount"]) > 500:
        return ask("Refund over $500?", {"amount": call.args["amount"]})
    return allow()


CARD = "4111 1111 1111 1111"


def _cards(result: Any) -> Any:
    text = result.result if isinstance(result.result, str) else str(result.result)
    if CARD in text:
        return allow(text.replace(CARD, "[card]"), "masked a card number")
    return allow()


def _codenames(msg: Any) -> Any:
    if "BLUEBIRD" in msg.content:
        return allow(msg.content.replace("BLUEBIRD", "[codename]"), "masked a codename")
    if "PROJECT-X" in msg.content:
        return deny("the answer names a project under embargo")
    return allow()


def rules(ceiling: float = CEILING) -> dict[str, Any]:
    """The act-table, fresh links each call: ``.act(**rules())``; a lower
    ``ceiling`` is the changed table ``helmlog whatif`` re-judges with."""
    return {
        "input": [PiiScrub("pii-scrub", results=False)],
        "before_tool": [
            ToolMiddleware(name="refund-ceiling", on_tool_call=_ceiling(ceiling)),
            ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
        ],
        "after_tool": [ToolMiddleware(name="card-redaction", on_tool_result=_cards)],
        "output": [MessageMiddleware(name="codenames", on_message=_codenames)],
    }


# -- agents --------------------------------------------------------------------------


def scenario_model() -> Provider:
    """The native loop's model: answers from the history, so any process can
    take the conversation on (a resume in the approver's process calls it)."""

    def respond(request: ProviderRequest) -> Reply:
        return next_reply(request.messages)

    return scripted(respond=respond)


def next_reply(history: Sequence[Message]) -> Reply:
    """The scripted reply that follows ``history`` in its conversation."""
    first = next(m.content for m in history if m.role == "user")
    name = REFUND_20000 if "20,000" in first else REFUND_800
    made = sum(1 for m in history if m.role == "assistant")
    return SCRIPTS[name][made]


def build_agent(
    store: EventStore | None = None,
    provider: Provider | None = None,
    *,
    tools: Iterable[Tool] | None = None,
    ceiling: float = CEILING,
) -> Agent:
    """The scenario's agent: the table, the tools, on ``store``.

    ``provider`` defaults to ``scenario_model()`` (the native loop); a
    framework's governance passes ``framework_model(name)``. ``tools``
    default to ``native_tools()``; a framework test registers its own
    (``Tool.from_langchain(...)``) so an approver runs the real tool.
    """
    return (
        Agent.create(
            provider=provider if provider is not None else scenario_model(),
            model="scenario-model",
            store=store if store is not None else MemoryEventStore(),
        )
        .tool(*(tools if tools is not None else native_tools()))
        .act(**rules(ceiling))
        .build()
    )


def native_agent(store: EventStore) -> Agent:
    """``--agent`` for the native loop's approver: the agent on ``store``."""
    return build_agent(store)


def stricter_agent(store: EventStore) -> Agent:
    """``helmlog whatif --agent`` for a changed table: refunds over $500 are
    denied (the approved $800 refund flips from ask to deny)."""
    return build_agent(store, ceiling=500)


def governance(store: EventStore, *, tools: Iterable[Tool] | None = None) -> Governance:
    """``--agent`` for a steered session's approver: the scenario's
    governance on ``store`` (its tools registered, so the approving process
    runs the real tool)."""
    return Governance(build_agent(store, framework_model("scenario"), tools=tools))


# -- the native loop's record ---------------------------------------------------------


async def native_record(name: str, store: EventStore | None = None) -> Any:
    """Run conversation ``name`` through ``Agent.run``/``resume`` (approved by
    ``APPROVER``); the session's ``SessionState`` as its stream folds."""
    store = store if store is not None else MemoryEventStore()
    agent = build_agent(store)
    out = await agent.run(MESSAGES[name], session_id=name)
    while is_ask_pause(out):
        out = await agent.resume(out.checkpoint, check_in_approved(by=APPROVER))
    assert FINAL[name] == out
    return fold(r.decode() for r in await store.read(name))


async def expected_rows(name: str) -> tuple[MiddlewareDecision, ...]:
    """The ledger rows the native loop files for conversation ``name``: what
    every framework's session must hold, row for row."""
    return tuple((await native_record(name)).middleware_decisions)


async def expected_types(name: str) -> list[str]:
    """The event types the native loop records for ``name``, in order."""
    store = MemoryEventStore()
    await native_record(name, store)
    return [r.decode().type for r in await store.read(name)]


async def session_rows(
    store: EventStore, session_id: str
) -> tuple[MiddlewareDecision, ...]:
    """A session's ledger rows, as its stored stream folds."""
    return tuple(
        fold(r.decode() for r in await store.read(session_id)).middleware_decisions
    )
