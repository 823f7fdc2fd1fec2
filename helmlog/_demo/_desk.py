"""The refund desk's rules, its tool and its agent: one rule at each moment.

Pattern: five plain functions wrapped as links; ``build_agent`` attaches each
         at its moment with ``.act()``, on any provider.
Role:    the face; the scenario ``helmlog demo`` runs. A new user reads this.
Emits:   nothing itself; the agent records into the store it is given.

Laws it shows: G71 (every moment), G14 (the ceiling's deny stops the walk
before four-eyes), G15 (a denial is data), G59 (four-eyes pauses before the
call), G22 (the PII strip), G32–G34 (the SSN scrub before commit), G39 (the
codename scrub's verdict is the answer), G80 (the window's own records).

Why thresholds are module constants: a rule reads them when it runs, so a
test can move one and watch the demo refuse to pretend.
"""

from __future__ import annotations

import re
from typing import Any

from helmlog import (
    Agent,
    Allow,
    Ask,
    Deny,
    MessageContext,
    MessageMiddleware,
    ToolCallContext,
    ToolMiddleware,
    ToolResultContext,
    allow,
    ask,
    deny,
    sliding_window,
    tool,
)
from helmlog.events import EventStore

# -- the rules: one per moment ----------------------------------------------

REFUND_CEILING = 10_000
FOUR_EYES_ABOVE = 500
KEEP_RECENT_TURNS = 2

SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
CODENAME = re.compile(r"\bProject Bluebird\b", re.IGNORECASE)


def scrub_ssns(msg: MessageContext) -> Allow:
    """Input: mask social security numbers before the model or history sees them."""
    if not SSN.search(msg.content):
        return allow()
    masked = SSN.sub("[SSN removed]", msg.content)
    return allow(masked, "masked a social security number")


def cap_refunds(call: ToolCallContext) -> Allow | Deny:
    """Before-tool: refunds over $10,000 are refused; they go to the finance desk."""
    if float(call.args["amount"]) > REFUND_CEILING:
        return deny(f"refunds over ${REFUND_CEILING:,} go to the finance desk")
    return allow()


def needs_second_person(call: ToolCallContext) -> Allow | Ask:
    """Before-tool: refunds over $500 wait until a second person approves them."""
    amount = float(call.args["amount"])
    if amount <= FOUR_EYES_ABOVE:
        return allow()
    return ask(
        f"Refund ${amount:,.2f} on order {call.args['order']}? "
        f"Refunds over ${FOUR_EYES_ABOVE} need a second person.",
        detail={"order": call.args["order"], "amount": amount},
    )


def mask_emails(result: ToolResultContext) -> Allow:
    """After-tool: mask email addresses in a tool's result before the model reads it."""
    if not isinstance(result.result, str) or not EMAIL.search(result.result):
        return allow()
    return allow(EMAIL.sub("[email removed]", result.result), "masked an email address")


def hide_codenames(msg: MessageContext) -> Allow:
    """Output: internal project codenames never reach the customer."""
    if not CODENAME.search(msg.content):
        return allow()
    rewritten = CODENAME.sub("our goodwill programme", msg.content)
    return allow(rewritten, "rewrote an internal codename")


ssn_scrub = MessageMiddleware(name="ssn-scrub", on_message=scrub_ssns)
refund_ceiling = ToolMiddleware(name="refund-ceiling", on_tool_call=cap_refunds)
four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=needs_second_person)
pii_strip = ToolMiddleware(name="pii-strip", on_tool_result=mask_emails)
codename_scrub = MessageMiddleware(name="codename-scrub", on_message=hide_codenames)

# -- the tool and the agent -------------------------------------------------

CUSTOMER_EMAIL = "ana.ruiz@example.com"


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order to the customer's card and email them a receipt."""
    return f"Refunded ${amount:,.2f} on order {order}; receipt to {CUSTOMER_EMAIL}."


SYSTEM = "You run the refund desk: refund what the rules allow, explain the rest."


def build_agent(store: EventStore, provider: Any) -> Agent:
    """The refund-desk agent: every rule attached at its moment by ``.act()``."""
    return (
        Agent.create(provider=provider, model="scripted", store=store)
        .system(SYSTEM)
        .tool(refund)
        .act(
            input=[ssn_scrub],
            before_tool=[refund_ceiling, four_eyes],
            after_tool=[pii_strip],
            window=sliding_window(keep_recent_turns=KEEP_RECENT_TURNS),
            output=[codename_scrub],
        )
        .build()
    )
