"""The "approve once" example: ask once per distinct call, then pass saying who.

Pattern: behavioural tests of ``examples/approve_once.py`` (an agent built on
         ``helmlog.rules.approve_once``) over a scripted provider: the rows it
         files, what ran, what the model read, and when it must ask again.
Role:    unit tests for the documented example (loaded from its file; it is
         an example, not a package). The rule's own tests, eviction and a
         fresh agent included, are ``tests/unit/helmlog/test_approve_once_rule.py``.
Emits:   nothing.

Laws: G17 (a remembered call is a pass-through with a reason: ``allow``,
``changed=False``, ``why="approved earlier this session by <by>"``), G46/G62
(the approval files ``approved by <by>[: <note>]``; the remembered row names
``<by>`` only), G5 (no rule answers for a tool: a remembered call still
executes and the model reads the real result), G66 (a second identical call
later in the same batch passes), G86 (under redaction it still remembers:
its memory is the stream's approvals, not the rows' redacted ``why``).

Why every "asks again" case matters: the example is only honest if nothing
but a person's approval, recorded by the library for this link's own ask in
this session, ever lets a call through without asking.
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
    ToolMiddleware,
    allow,
    check_in_approved,
    check_in_declined,
    conversation_redaction,
    tool,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "approve_once.py"
QUESTION = (
    "Approve this call to 'refund'? The same call, with the same arguments, "
    "will not be asked about again in this session."
)
REMEMBERED = "approved earlier this session by dana@ops"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("approve_once_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


example = load_example()


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


def build(model: Any, ledger: Ledger, **options: Any) -> Agent:
    agent: Agent = example.refund_desk(
        model,
        refund_tool=ledger.tool,
        ids=counter_ids(),
        store=MemoryEventStore(),
        **options,
    )
    return agent


def rows(agent: Agent) -> list[tuple[Any, ...]]:
    return [
        (r.middleware, r.tool_call_id, r.outcome, r.changed, r.why)
        for r in agent.last_snapshot().middleware_decisions
    ]


async def approve(
    agent: Agent, out: Any, by: str = "dana@ops", note: Any = None
) -> Any:
    assert isinstance(out, AskPause)
    return await agent.resume(out.checkpoint, check_in_approved(by=by, note=note))


def two_turns(second: ToolCallRequest | None = None) -> Any:
    return scripted(
        [turn(refund_call("c1")), "Ok.", turn(second or refund_call("c2")), "Ok."]
    )


# -- remembering --------------------------------------------------------------


async def test_g17_approve_once_asks_first_then_passes_saying_who_approved() -> None:
    """G17/G62: the first call asks; the same call later passes, naming who."""
    ledger = Ledger()
    agent = build(two_turns(), ledger)
    first = await agent.run("refund order 7")
    assert isinstance(first, AskPause)
    assert (QUESTION, "approve-once") == (first.ask.question, first.ask.middleware)
    assert "Ok." == await approve(agent, first)
    assert "Ok." == await agent.follow_up("and again")
    assert [
        ("approve-once", "c1", "ask", False, QUESTION),
        ("approve-once", "c1", "allow", False, "approved by dana@ops"),
        ("approve-once", "c2", "allow", False, REMEMBERED),
    ] == rows(agent)
    assert [{"order": 7, "amount": 25.0}] * 2 == ledger.ran


async def test_g46_a_note_is_not_part_of_the_approver() -> None:
    """G46: 'approved by <by>: <note>' remembers <by> only."""
    ledger = Ledger()
    agent = build(two_turns(), ledger)
    await approve(agent, await agent.run("refund"), note="looks right: small amount")
    await agent.follow_up("again")
    assert "approved by dana@ops: looks right: small amount" == rows(agent)[1][-1]
    assert REMEMBERED == rows(agent)[-1][-1]


async def test_g5_a_remembered_call_still_runs_the_real_tool() -> None:
    """G5: the rule never answers for the tool; the model reads the real result."""
    ledger = Ledger()
    seen: list[Any] = []
    audit = ToolMiddleware(
        name="audit", on_tool_result=lambda r: seen.append(r.result) or allow()
    )
    model = two_turns()
    agent = build(model, ledger, links=(audit,))
    await approve(agent, await agent.run("refund"))
    await agent.follow_up("again")
    assert ["refunded 25.0 on 7"] * 2 == seen
    reads = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert reads == ["refunded 25.0 on 7"] * 2


async def test_g66_a_second_identical_call_in_the_batch_passes() -> None:
    """G66: after the approval, the batch's next identical call passes remembered."""
    ledger = Ledger()
    model = scripted([turn(refund_call("c1"), refund_call("c2")), "Both done."])
    agent = build(model, ledger)
    assert "Both done." == await approve(agent, await agent.run("refund twice"))
    assert [
        ("c1", "ask", QUESTION),
        ("c1", "allow", "approved by dana@ops"),
        ("c2", "allow", REMEMBERED),
    ] == [(r[1], r[2], r[4]) for r in rows(agent)]
    assert 2 == len(ledger.ran)


async def test_g86_under_redaction_it_still_remembers() -> None:
    """G86: served rows hide 'why', but the memory is the stream's approvals."""
    ledger = Ledger()
    agent = build(two_turns(), ledger, redact=conversation_redaction())
    await approve(agent, await agent.run("refund"))
    assert "Ok." == await agent.follow_up("again")
    assert ("approve-once", "c2", "allow", False, "[redacted]") == rows(agent)[-1]
    assert 2 == len(ledger.ran)


async def test_key_tool_covers_other_arguments() -> None:
    """key="tool": one approval covers every refund this session."""
    ledger = Ledger()
    model = two_turns(refund_call("c2", amount=9000.0))
    agent = example.refund_desk(model, refund_tool=ledger.tool, key="tool")
    await approve(agent, await agent.run("refund"))
    assert "Ok." == await agent.follow_up("refund a lot")
    assert [25.0, 9000.0] == [r["amount"] for r in ledger.ran]


# -- asking again -------------------------------------------------------------


async def test_approve_once_different_arguments_ask_again() -> None:
    """The key is tool + source + args: another amount is another approval."""
    ledger = Ledger()
    agent = build(two_turns(refund_call("c2", amount=9000.0)), ledger)
    await approve(agent, await agent.run("refund"))
    second = await agent.follow_up("refund a lot")
    assert isinstance(second, AskPause)
    assert "c2" == second.tool_call_id
    assert [{"order": 7, "amount": 25.0}] == ledger.ran


async def test_approve_once_a_decline_is_not_remembered() -> None:
    """A decline teaches nothing: the same call asks again."""
    ledger = Ledger()
    agent = build(two_turns(), ledger)
    out = await agent.run("refund")
    assert isinstance(out, AskPause)
    await agent.resume(out.checkpoint, check_in_declined(by="dana@ops"))
    assert isinstance(await agent.follow_up("please"), AskPause)
    assert [] == ledger.ran


async def test_approve_once_is_scoped_to_the_session() -> None:
    """A fresh run is a new session: it asks again."""
    ledger = Ledger()
    model = scripted([turn(refund_call("c1")), "Ok.", turn(refund_call("c1"))])
    agent = build(model, ledger)
    await approve(agent, await agent.run("refund"))
    first_session = agent.last_snapshot().session_id
    again = await agent.run("refund, new session")
    assert isinstance(again, AskPause)
    assert again.checkpoint.session_id != first_session
    assert 1 == len(ledger.ran)


async def test_approve_once_another_links_words_approve_nothing() -> None:
    """Only this link's own approval counts; a look-alike row does not."""
    ledger = Ledger()
    imposter = ToolMiddleware(
        name="imposter", on_tool_call=lambda c: allow(None, "approved by mallory")
    )
    agent = build(two_turns(), ledger, links=(imposter,))
    out = await agent.run("refund")
    assert isinstance(out, AskPause)
    assert "approve-once" == out.ask.middleware
    await agent.resume(out.checkpoint, check_in_declined(by="dana@ops"))
    again = await agent.follow_up("please")
    assert isinstance(again, AskPause)
    assert "approve-once" == again.ask.middleware
    assert [] == ledger.ran


def test_the_example_runs_and_prints_its_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The example's ``main`` runs as documented."""
    import asyncio

    asyncio.run(example.main())
    out = capsys.readouterr().out.splitlines()
    assert f"asked: {QUESTION}" == out[0]
    assert f"  approve-once c2 allow: {REMEMBERED}" == out[-1]
