"""The refund desk of the what-if tests: record sessions, then judge them anew.

Pattern: one desk builder with the policy knobs the tests turn (the ceiling,
         the four-eyes threshold, the result mask, the window, redaction);
         ``record`` runs it live on a scripted model and returns the stores'
         records; ``sealed`` builds the same desk whose model and tools
         raise if touched, to judge them.
Role:    test helper for ``tests/unit/runtime/test_whatif*.py`` and the CLI
         tests (``tests.unit.runtime.whatif_agents:tight`` and friends are
         ``--agent`` factories: each takes the store and returns the agent).
Emits:   nothing itself.

Why ``TOUCHED``: a what-if calls no model and no tool (issue 13); the sealed
desk's model and tools append to it before raising, so a test can show
nothing was touched even if a raise were swallowed somewhere.
"""

from __future__ import annotations

import itertools
from typing import Any

from helmlog import (
    Agent,
    MessageMiddleware,
    RedactionPolicy,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    deny,
    is_ask_pause,
    sliding_window,
    tool,
)
from helmlog.events import EventStore, MemoryEventStore, StoredEvent
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

TOUCHED: list[str] = []
_RECORDED = itertools.count(1)
EMAIL = "jo@example.com"


class SealedModel:
    """A provider that must never be called."""

    async def call(self, request: ProviderRequest, on_token: Any = None) -> Reply:
        TOUCHED.append("model")
        raise AssertionError("a what-if called the model")


def desk(
    store: EventStore | None = None,
    *,
    ceiling: float = 1000,
    four_eyes: float | None = 500,
    mask: str | None = "[email]",
    window: int | None = None,
    codename: bool = False,
    redact: RedactionPolicy | None = None,
    sealed: bool = False,
    script: list[Any] | None = None,
    ids: str = "desk-",
) -> Agent:
    """The refund desk: a ceiling, a four-eyes ask, an after-tool mask."""

    @tool
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        if sealed:
            TOUCHED.append("refund")
            raise AssertionError("a what-if called a tool")
        return f"refunded {amount:.2f} on order {order} for {EMAIL}"

    links: list[Any] = [
        ToolMiddleware(
            name="ceiling",
            on_tool_call=lambda c: (
                deny("over the refund ceiling")
                if c.args["amount"] > ceiling
                else allow()
            ),
        )
    ]
    if four_eyes is not None:
        threshold = four_eyes
        links.append(
            ToolMiddleware(
                name="four-eyes",
                on_tool_call=lambda c: (
                    ask("Approve this refund?")
                    if c.args["amount"] > threshold
                    else allow()
                ),
            )
        )
    if mask is not None:
        shown = mask
        links.append(
            ToolMiddleware(
                name="mask-email",
                on_tool_result=lambda r: allow(
                    r.result.replace(EMAIL, shown), "masked an email"
                ),
            )
        )
    options: dict[str, Any] = {"ids": counter_ids(ids)}
    if store is not None:
        options["store"] = store
    if redact is not None:
        options["redact"] = redact
    provider: Any = SealedModel() if sealed else scripted(script or [])
    builder = Agent.create(provider=provider, model="m", **options).tool(refund)
    builder.tool_middleware(*links)
    if codename:
        builder.message_middleware(
            MessageMiddleware(
                name="no-codenames",
                on_message=lambda m: (
                    allow(m.content.replace("BLUEBIRD", "[codename]"), "scrubbed")
                    if "BLUEBIRD" in m.content
                    else allow()
                ),
            )
        )
    if window is not None:
        builder.window(sliding_window(keep_recent_turns=window))
    return builder.build()


def refund_reply(*amounts: float, first: int = 1) -> Reply:
    """One model reply proposing a refund per amount (calls c1, c2, ...)."""
    return Reply(
        tool_calls=[
            ToolCallRequest(
                id=f"c{first + i}",
                name="refund",
                args={"order": 7 + i, "amount": amount},
            )
            for i, amount in enumerate(amounts)
        ]
    )


async def record(
    store: EventStore,
    *batches: tuple[float, ...],
    approve: bool = True,
    answer: str = "Done.",
    follow_up: str | None = None,
    **knobs: Any,
) -> str:
    """Run one session of the live desk on ``store``: each batch of refunds
    is one turn (a follow-up after the first), every ask approved (or
    declined); returns the session id."""
    script: list[Any] = []
    for n, amounts in enumerate(batches):
        script += [refund_reply(*amounts, first=10 * n + 1), answer]
    agent = desk(store, script=script, ids=f"desk{next(_RECORDED)}-", **knobs)
    for n in range(len(batches)):
        out: Any = await (
            agent.run("Refund please")
            if n == 0
            else agent.follow_up(follow_up or "More")
        )
        while is_ask_pause(out):
            decide = check_in_approved if approve else check_in_declined
            out = await agent.resume(out.checkpoint, decide("dana@ops", "ok"))
    assert agent.session_id is not None
    return agent.session_id


async def records_of(store: EventStore, *session_ids: str) -> list[StoredEvent]:
    """The stored records of these sessions, one after the other."""
    out: list[StoredEvent] = []
    for sid in session_ids:
        out += await store.read(sid)
    return out


def new_store() -> MemoryEventStore:
    return MemoryEventStore()


# -- ``--agent`` factories (each takes the store, returns the sealed desk) ----


def same(store: EventStore) -> Agent:
    """The recorded desk's policy, unchanged."""
    return desk(store, sealed=True)


def tight(store: EventStore) -> Agent:
    """The ceiling tightened from 1,000 to 300."""
    return desk(store, ceiling=300, sealed=True)


def broken(store: EventStore) -> Agent:
    """A factory that fails."""
    raise RuntimeError("no agent today")
