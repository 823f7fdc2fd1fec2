"""The "approve once" recipe: ask once per distinct call, then pass saying who.

Pattern: behavioural tests of ``examples/approve_once.py`` wired into a real
         agent over a scripted provider: the rows it files, what ran, what the
         model read, and when it must ask again.
Role:    unit tests for the documented recipe (loaded from its file; it is an
         example, not a package).
Emits:   nothing.

Laws: G17 (a remembered call is a pass-through with a reason: ``allow``,
``changed=False``, ``why="approved earlier this session by <by>"``), G46/G62
(it learns the approver from the resume-side row's ``why``), G5 (no rule
answers for a tool: a remembered call still executes and the model reads the
real result), G66 (a second identical call later in the same batch passes),
G86 (under redaction it cannot learn, so it asks again).

Why every "asks again" case matters: the recipe is only honest if nothing but
a person's approval, recorded by the library for this link's own ask in this
session, ever lets a call through without asking.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helmlog import (
    Agent,
    AskPause,
    ToolCallContext,
    ToolMiddleware,
    allow,
    check_in_approved,
    check_in_declined,
    conversation_redaction,
    tool,
)
from helmlog.events import MemoryEventStore, MiddlewareDecisionEvent
from helmlog.runtime import counter_ids
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "approve_once.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("approve_once_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


approve_once = load_example()
ApproveOnce = approve_once.ApproveOnce


class Ledger:
    """Refunds that really happened."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

        @tool
        def refund(order: int, amount: float) -> str:
            """Refund an order."""
            self.ran.append({"order": order, "amount": amount})
            return f"refunded {amount} on {order}"

        self.tool = refund


def refund_call(cid: str, order: int = 7, amount: float = 25.0) -> ToolCallRequest:
    return ToolCallRequest(
        id=cid, name="refund", args={"order": order, "amount": amount}
    )


def turn(*calls: ToolCallRequest) -> Reply:
    return Reply(tool_calls=list(calls))


def build(
    model: Any,
    ledger: Ledger,
    approvals: Any,
    *,
    watch: bool = True,
    **options: Any,
) -> Agent:
    builder = (
        Agent.create(
            provider=model,
            model="m",
            ids=counter_ids(),
            store=MemoryEventStore(),
            **options,
        )
        .system("You refund.")
        .tool(ledger.tool)
        .tool_middleware(approvals.link)
    )
    if watch:
        builder = builder.watch(approvals.watcher)
    return builder.build()


def rows(agent: Agent) -> list[tuple[Any, ...]]:
    return [
        (r.middleware, r.tool_call_id, r.outcome, r.changed, r.why)
        for r in agent.last_snapshot().middleware_decisions
    ]


QUESTION = 'Approve refund({"order": 7, "amount": 25.0})?'


async def approve(
    agent: Agent, out: Any, by: str = "dana@ops", note: Any = None
) -> Any:
    assert isinstance(out, AskPause)
    return await agent.resume(out.checkpoint, check_in_approved(by=by, note=note))


# -- remembering --------------------------------------------------------------


async def test_approve_once_asks_first_then_passes_saying_who_approved() -> None:
    """G17/G62: the first call asks; the same call later passes, naming who."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted(
        [turn(refund_call("c1")), "Refunded.", turn(refund_call("c2")), "Again."]
    )
    agent = build(model, ledger, approvals)
    first = await agent.run("refund order 7")
    assert isinstance(first, AskPause)
    assert (QUESTION, "approve-once") == (first.ask.question, first.ask.middleware)
    assert "Refunded." == await approve(agent, first)
    assert "Again." == await agent.follow_up("and again")
    assert [
        ("approve-once", "c1", "ask", False, QUESTION),
        ("approve-once", "c1", "allow", False, "approved by dana@ops"),
        (
            "approve-once",
            "c2",
            "allow",
            False,
            "approved earlier this session by dana@ops",
        ),
    ] == rows(agent)
    assert [{"order": 7, "amount": 25.0}] * 2 == ledger.ran


async def test_approve_once_a_note_is_not_part_of_the_approver() -> None:
    """G46: 'approved by <by>: <note>' teaches <by> only."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c2")), "Ok."])
    agent = build(model, ledger, approvals)
    await approve(agent, await agent.run("refund"), note="looks right: small amount")
    await agent.follow_up("again")
    assert "approved earlier this session by dana@ops" == rows(agent)[-1][-1]


async def test_approve_once_a_remembered_call_still_runs_the_real_tool() -> None:
    """G5: the rule never answers for the tool; the model reads the real result."""
    ledger, approvals = Ledger(), ApproveOnce()
    seen: list[Any] = []
    audit = ToolMiddleware(
        name="audit", on_tool_result=lambda r: seen.append(r.result) or allow()
    )
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c2")), "Ok."])
    agent = (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .tool(ledger.tool)
        .tool_middleware(approvals.link, audit)
        .watch(approvals.watcher)
        .build()
    )
    await approve(agent, await agent.run("refund"))
    await agent.follow_up("again")
    assert ["refunded 25.0 on 7"] * 2 == seen
    reads = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert reads == ["refunded 25.0 on 7"] * 2


async def test_approve_once_a_second_identical_call_in_the_batch_passes() -> None:
    """G66: after the approval, the batch's next identical call passes remembered."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1"), refund_call("c2")), "Both done."])
    agent = build(model, ledger, approvals)
    assert "Both done." == await approve(agent, await agent.run("refund twice"))
    assert [
        ("c1", "ask", QUESTION),
        ("c1", "allow", "approved by dana@ops"),
        ("c2", "allow", "approved earlier this session by dana@ops"),
    ] == [(r[1], r[2], r[4]) for r in rows(agent)]
    assert 2 == len(ledger.ran)


# -- asking again -------------------------------------------------------------


async def test_approve_once_different_arguments_ask_again() -> None:
    """The key is tool + source + args: another amount is another approval."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted(
        [turn(refund_call("c1")), "Ok.", turn(refund_call("c2", amount=9000.0))]
    )
    agent = build(model, ledger, approvals)
    await approve(agent, await agent.run("refund"))
    second = await agent.follow_up("refund a lot")
    assert isinstance(second, AskPause)
    assert "c2" == second.tool_call_id
    assert [{"order": 7, "amount": 25.0}] == ledger.ran


def test_approve_once_the_source_is_part_of_the_key() -> None:
    """Two servers' tools sharing a name are approved separately."""
    approvals = ApproveOnce()

    def ctx(source: str | None, cid: str) -> ToolCallContext:
        return ToolCallContext(
            "refund", source, cid, 1, {"order": 7}, (), {"session_id": "s1"}
        )

    assert approvals.link.on_tool_call(ctx("crm", "c1")).question.startswith("Approve")
    approvals.learn(
        "s1",
        MiddlewareDecisionEvent(
            middleware="approve-once",
            moment="before-tool",
            at="tool",
            iteration=1,
            outcome="allow",
            changed=False,
            tool_name="refund",
            tool_call_id="c1",
            why="approved by dana",
        ),
    )
    assert approvals.link.on_tool_call(ctx("crm", "c2")) == allow(
        None, "approved earlier this session by dana"
    )
    assert approvals.link.on_tool_call(ctx("billing", "c3")).question.startswith(
        "Approve"
    )


async def test_approve_once_a_decline_is_not_remembered() -> None:
    """A decline teaches nothing: the same call asks again."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1")), "Not done.", turn(refund_call("c2"))])
    agent = build(model, ledger, approvals)
    out = await agent.run("refund")
    assert isinstance(out, AskPause)
    await agent.resume(out.checkpoint, check_in_declined(by="dana@ops"))
    assert isinstance(await agent.follow_up("please"), AskPause)
    assert [] == ledger.ran


async def test_approve_once_is_scoped_to_the_session() -> None:
    """A fresh run is a new session: it asks again."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c1"))])
    agent = build(model, ledger, approvals)
    await approve(agent, await agent.run("refund"))
    first_session = agent.last_snapshot().session_id
    again = await agent.run("refund, new session")
    assert isinstance(again, AskPause)
    assert again.checkpoint.session_id != first_session
    assert 1 == len(ledger.ran)


async def test_approve_once_without_its_hook_never_remembers() -> None:
    """Without the watcher it cannot read the resume-side row, so it asks again."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c2"))])
    agent = build(model, ledger, approvals, watch=False)
    await approve(agent, await agent.run("refund"))
    assert isinstance(await agent.follow_up("again"), AskPause)


async def test_approve_once_an_identity_without_a_session_never_remembers() -> None:
    """A run under an identity that names no session asks every time."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c2"))])
    agent = build(model, ledger, approvals)
    out = await agent.run("refund", identity={"user": "u-1"})
    await approve(agent, out)
    assert isinstance(await agent.follow_up("again"), AskPause)


async def test_approve_once_under_redaction_cannot_learn_and_asks_again() -> None:
    """G86: served facts hide 'why', so no approver can be read: it asks again."""
    ledger, approvals = Ledger(), ApproveOnce()
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c2"))])
    agent = build(model, ledger, approvals, redact=conversation_redaction())
    await approve(agent, await agent.run("refund"))
    assert isinstance(await agent.follow_up("again"), AskPause)


async def test_approve_once_another_links_words_approve_nothing() -> None:
    """Only this link's own resume-side row teaches; a look-alike row does not."""
    ledger, approvals = Ledger(), ApproveOnce()
    imposter = ToolMiddleware(
        name="imposter", on_tool_call=lambda c: allow(None, "approved by mallory")
    )
    model = scripted([turn(refund_call("c1")), "Not done.", turn(refund_call("c2"))])
    agent = (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .tool(ledger.tool)
        .tool_middleware(imposter, approvals.link)
        .watch(approvals.watcher)
        .build()
    )
    out = await agent.run("refund")
    assert isinstance(out, AskPause)
    assert "approve-once" == out.ask.middleware
    await agent.resume(out.checkpoint, check_in_declined(by="dana@ops"))
    again = await agent.follow_up("please")
    assert isinstance(again, AskPause)
    assert "approve-once" == again.ask.middleware
    assert [] == ledger.ran


def test_approve_once_reads_a_fact_once_by_session_and_seq() -> None:
    """R4: a fact delivered twice has the effect of one."""
    approvals = ApproveOnce()
    ctx = ToolCallContext(
        "refund", None, "c1", 1, {"order": 7}, (), {"session_id": "s"}
    )
    approvals.link.on_tool_call(ctx)
    fact = MiddlewareDecisionEvent(
        session_id="s",
        seq=9,
        middleware="approve-once",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=False,
        tool_name="refund",
        tool_call_id="c1",
        why="approved by dana",
    )
    approvals.watcher.on_event(fact)
    assert "dana" == approvals.approved_by("s", ctx)
    # A later turn reuses the call id for another refund; the old fact arrives again.
    other = ToolCallContext(
        "refund", None, "c1", 1, {"order": 8}, (), {"session_id": "s"}
    )
    assert approvals.link.on_tool_call(other).question.startswith("Approve")
    approvals.watcher.on_event(fact)
    assert approvals.approved_by("s", other) is None


@pytest.mark.parametrize(
    ("why", "by"),
    [
        ("approved by dana", "dana"),
        ("approved by dana@ops: fine", "dana@ops"),
        ("declined by dana", None),
        ("approved earlier this session by dana", None),
        (None, None),
        ("[redacted]", None),
    ],
)
def test_approve_once_reads_the_approver_from_the_rows_why(why: Any, by: Any) -> None:
    """G46: 'approved by <by>[: <note>]' names <by>; anything else names no one."""
    assert by == approve_once.approver(why)
