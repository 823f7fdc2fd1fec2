"""The refund desk's conversation, written in advance, and the model that plays it.

Pattern: a script: three ``Turn``s, the approval a second person gives, and
         ``DemoModel``, a provider answering each request from the script.
Role:    the face; ``demo_agent`` is the agent ``helmlog demo``, the cluster
         tests and ``bench/cluster.py`` run.
Emits:   nothing itself.

Laws it shows: G59–G62 (turn 3 pauses; ``dana@ops`` approves), G14/G15 (turn
2 is over the ceiling), R21/R22 (the model keeps nothing between calls, so a
session a host dropped hears the script where it left off).

Why the script checks itself: a silent demo would still exit 0, so a request
with no turn for it raises ``DemoError``, as does a turn that ends otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from helmlog import Agent, CheckInDecision, check_in_approved
from helmlog.events import EventStore
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest

from ._desk import SSN, build_agent


class DemoError(RuntimeError):
    """The scripted conversation did not go the way it is written."""


def refund_call(call_id: str, order: int, amount: float) -> Reply:
    """A model reply that calls ``refund`` once."""
    args = {"order": order, "amount": amount}
    return Reply(tool_calls=[ToolCallRequest(id=call_id, name="refund", args=args)])


@dataclasses.dataclass(frozen=True)
class Turn:
    """What the customer says, what the scripted model replies, what must happen."""

    customer: str
    model: tuple[Reply | str, ...]
    pauses: bool = False


TURNS = (
    # The SSN scrub rewrites the message; $120 passes both before-tool rules;
    # the PII strip masks the receipt's email address.
    Turn(
        customer="Hi, Ana Ruiz here (SSN 123-45-6789). Order 1001 arrived "
        "broken: please refund the $120.",
        model=(
            refund_call("call-1", order=1001, amount=120),
            "Done: $120.00 is back on your card for order 1001.",
        ),
    ),
    # Over the ceiling: refused before four-eyes is even asked. The window
    # engages from here on: the history now holds more than two turns.
    Turn(
        customer="Thanks! Order 1002 too: the $25,000 espresso machine never came.",
        model=(
            refund_call("call-2", order=1002, amount=25_000),
            "I can't refund $25,000 here: that goes to the finance desk, and "
            "I've flagged order 1002 for them.",
        ),
    ),
    # $800 pauses for a second person; dana@ops approves and the refund runs.
    # The codename scrub rewrites the answer.
    Turn(
        customer="OK. And order 1003, the $800 grinder, came without its burrs.",
        model=(
            refund_call("call-3", order=1003, amount=800),
            "Refunded $800.00 on order 1003 under Project Bluebird; a second "
            "person signed it off.",
        ),
        pauses=True,
    ),
)

APPROVER = "dana@ops"
APPROVAL_NOTE = "customer verified by phone"


def the_approval() -> CheckInDecision:
    """What the second person decides when four-eyes asks."""
    return check_in_approved(by=APPROVER, note=APPROVAL_NOTE)


def reply_for(request: ProviderRequest) -> Reply | str:
    """The script's reply for what the model is sent: the turn is the last
    customer message, the step whether a tool result follows it."""
    messages = request.messages
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    said = messages[last_user].content
    for turn in TURNS:
        if SSN.sub("[SSN removed]", turn.customer) == said:
            answered = any(m.role == "tool" for m in messages[last_user:])
            return turn.model[1 if answered else 0]
    raise DemoError(f"no turn of the demo says {said!r}")


class DemoModel:
    """The script as a model that answers from what it is sent, keeping
    nothing between calls.

    Why not ``scripted(replies)``: that pops its replies in order, so a
    session whose host dropped it (R21) or died (R22) would hear the script
    from the start; and it keeps a copy of every request (for tests), which
    a host holding thousands of idle sessions would pay for. A real provider
    keeps neither.
    """

    provider_name = "helmlog.scripted"  # gen_ai.provider.name (no vendor)

    async def call(self, request: ProviderRequest, on_token: Any = None) -> Reply:
        out = reply_for(request)
        return out if isinstance(out, Reply) else Reply(content=out)


def demo_agent(store: EventStore) -> Agent:
    """The refund-desk agent with the whole script, on ``store``.

    Module-level so a cluster can ship it to its session hosts (R17).
    """
    return build_agent(store, DemoModel())
