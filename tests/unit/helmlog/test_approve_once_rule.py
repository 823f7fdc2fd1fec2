"""``helmlog.rules.approve_once``: session trust, remembered from the stream.

Pattern: behavioural tests of the rule wired into real agents over scripted
         providers and a real in-process store: the rows it files, what ran,
         when it must ask again, and that its memory is the session's own
         record (eviction, a fresh agent on the same store, redaction).
Role:    unit tests for ``helmlog/rules/_trust.py`` and the approvals the fold
         projects (``events/_fold.py``, ``ToolCallContext.approvals``).
Emits:   nothing.

Laws: G17 (a remembered call is a pass-through with a reason), G62 (the
approval continues at the next link), G66 (a second identical call in the
batch passes), G5 (the tool still runs), G49 (the question quotes no
argument), G86 (redaction does not make it forget), R21 (eviction does not),
R1 (a fresh agent folding the stream does not), issue 22.

Why every "asks again" case matters: the rule is only honest if nothing but a
person's approval, recorded by the library for this link's own ask in this
session, ever lets a call through without asking.
"""

from __future__ import annotations

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
from helmlog.events import Approval, MemoryEventStore, fold
from helmlog.events.lowlevel import digest
from helmlog.rules import ApproveOnce, approve_once
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest
from helmlog.runtime.providers import scripted as scripted_provider
from helmlog.runtime.testing import FakeClock

REMEMBERED = "approved earlier this session by dana@ops"
QUESTION = (
    "Approve this call to 'refund'? The same call, with the same arguments, "
    "will not be asked about again in this session."
)


def desk(request: ProviderRequest) -> Reply | str:
    """``refund <order> <amount> [twice]`` proposes the refund (twice in one
    batch); after the tool messages it answers ``done``."""
    last = request.messages[-1]
    if last.role == "tool":
        return "done"
    words = str(last.content).split()
    users = sum(1 for m in request.messages if m.role == "user")
    args = {"order": int(words[1]), "amount": float(words[2])}
    count = 2 if words[-1] == "twice" else 1
    return Reply(
        tool_calls=[
            ToolCallRequest(id=f"t{users}c{n}", name="refund", args=args)
            for n in range(1, count + 1)
        ]
    )


class Desk:
    """Refunds that really ran, and agents that share one store."""

    def __init__(self, *, clock: FakeClock | None = None) -> None:
        self.ran: list[dict[str, Any]] = []
        self.store = MemoryEventStore()
        self.clock = clock

        @tool
        def refund(order: int, amount: float) -> str:
            """Refund an order."""
            self.ran.append({"order": order, "amount": amount})
            return f"refunded {amount} on {order}"

        self.tool = refund

    def agent(self, *links: Any, **options: Any) -> Agent:
        if self.clock is not None:
            options["clock"] = self.clock
        return (
            Agent.create(
                provider=scripted_provider(respond=desk),
                model="m",
                store=self.store,
                **options,
            )
            .system("You refund.")
            .tool(self.tool)
            .tool_middleware(*(links or (approve_once(),)))
            .build()
        )


def rows(agent: Agent, name: str = "approve-once") -> list[tuple[Any, ...]]:
    return [
        (r.tool_call_id, r.outcome, r.changed, r.why)
        for r in agent.last_snapshot().middleware_decisions
        if r.middleware == name
    ]


async def approve(agent: Agent, out: Any, by: str = "dana@ops") -> Any:
    assert isinstance(out, AskPause), out
    return await agent.resume(out.checkpoint, check_in_approved(by=by))


# -- remembering ------------------------------------------------------------


async def test_g17_it_asks_once_then_passes_naming_who_approved() -> None:
    """G17/G62: the first call asks; the same call later passes, naming who."""
    desk_ = Desk()
    agent = desk_.agent()
    first = await agent.run("refund 7 25")
    assert isinstance(first, AskPause)
    assert (QUESTION, "approve-once") == (first.ask.question, first.ask.middleware)
    assert "done" == await approve(agent, first)
    assert "done" == await agent.follow_up("refund 7 25")
    assert [
        ("t1c1", "ask", False, QUESTION),
        ("t1c1", "allow", False, "approved by dana@ops"),
        ("t2c1", "allow", False, REMEMBERED),
    ] == rows(agent)
    # G5: the remembered call still ran the real tool.
    assert [{"order": 7, "amount": 25.0}] * 2 == desk_.ran


async def test_g66_a_second_identical_call_in_the_batch_passes_remembered() -> None:
    """G66: after the approval, the batch's next identical call passes."""
    desk_ = Desk()
    agent = desk_.agent()
    assert "done" == await approve(agent, await agent.run("refund 7 25 twice"))
    assert [
        ("t1c1", "ask", False, QUESTION),
        ("t1c1", "allow", False, "approved by dana@ops"),
        ("t1c2", "allow", False, REMEMBERED),
    ] == rows(agent)
    assert 2 == len(desk_.ran)


async def test_the_default_key_asks_again_for_other_arguments() -> None:
    """key="call": tool + source + arguments; another amount is another approval."""
    desk_ = Desk()
    agent = desk_.agent()
    await approve(agent, await agent.run("refund 7 25"))
    again = await agent.follow_up("refund 7 9000")
    assert isinstance(again, AskPause)
    assert "t2c1" == again.tool_call_id
    assert [{"order": 7, "amount": 25.0}] == desk_.ran


async def test_key_tool_remembers_the_tool_whatever_its_arguments() -> None:
    """key="tool": one approval covers every call of the tool this session."""
    desk_ = Desk()
    agent = desk_.agent(approve_once(key="tool"))
    first = await agent.run("refund 7 25")
    assert isinstance(first, AskPause)
    assert first.ask.question.startswith("Approve calls to 'refund'?")
    await approve(agent, first)
    assert "done" == await agent.follow_up("refund 8 9000")
    assert ("t2c1", "allow", False, REMEMBERED) == rows(agent)[-1]
    assert [25.0, 9000.0] == [r["amount"] for r in desk_.ran]


async def test_a_decline_teaches_nothing() -> None:
    """A decline is not remembered: the same call asks again."""
    desk_ = Desk()
    agent = desk_.agent()
    out = await agent.run("refund 7 25")
    assert isinstance(out, AskPause)
    await agent.resume(out.checkpoint, check_in_declined(by="dana@ops"))
    assert isinstance(await agent.follow_up("refund 7 25"), AskPause)
    assert [] == desk_.ran


async def test_a_new_session_starts_with_no_approvals() -> None:
    """The memory is the session's: a fresh run asks again."""
    desk_ = Desk()
    agent = desk_.agent()
    await approve(agent, await agent.run("refund 7 25"))
    again = await agent.run("refund 7 25")
    assert isinstance(again, AskPause)


async def test_g86_under_redaction_it_still_remembers() -> None:
    """G86/G87: the key is the recorded digest, never a redacted value."""
    desk_ = Desk()
    agent = desk_.agent(redact=conversation_redaction())
    await approve(agent, await agent.run("refund 7 25"))
    assert "done" == await agent.follow_up("refund 7 25")
    assert ("t2c1", "allow", False, "[redacted]") == rows(agent)[-1]
    assert 2 == len(desk_.ran)
    # And another amount still asks: redaction loosened nothing.
    assert isinstance(await agent.follow_up("refund 7 26"), AskPause)


async def test_r21_an_evicted_session_remembers_from_its_stream() -> None:
    """R21/R6: dropped and re-activated, the session folds its approvals back."""
    clock = FakeClock()
    desk_ = Desk(clock=clock)
    agent = desk_.agent(idle_s=60)
    await approve(agent, await agent.run("refund 7 25"))
    clock.advance(60_001)
    assert 1 == agent.evict_idle()
    assert 0 == agent.resident_count
    assert "done" == await agent.follow_up("refund 7 25")
    assert ("t2c1", "allow", False, REMEMBERED) == rows(agent)[-1]


async def test_r1_a_fresh_agent_on_the_same_store_remembers() -> None:
    """R1: another agent (another process) continuing the session by id
    folds its approvals from the stream: the pause is answered by a second
    agent and the later call passes on a third."""
    desk_ = Desk()
    first = await desk_.agent().turn("refund 7 25")
    assert first.paused
    assert first.checkpoint is not None
    assert "done" == await desk_.agent().resume(
        first.checkpoint, check_in_approved(by="dana@ops")
    )
    third = desk_.agent()
    assert "done" == await third.run("refund 7 25", session_id=first.session_id)
    assert ("t2c1", "allow", False, REMEMBERED) == rows(third)[-1]
    assert 2 == len(desk_.ran)


async def test_the_approval_is_keyed_on_the_arguments_at_the_asking_link() -> None:
    """G60: an earlier rewrite is part of what was approved, and is applied
    again to the later call, so the digests agree and it is remembered."""
    desk_ = Desk()
    cap = ToolMiddleware(
        name="cap",
        on_tool_call=lambda c: allow({**c.args, "amount": 20.0}, "capped at 20"),
    )
    agent = desk_.agent(cap, approve_once())
    first = await agent.run("refund 7 25")
    assert isinstance(first, AskPause)
    await approve(agent, first)
    assert "done" == await agent.follow_up("refund 7 25")
    assert [20.0, 20.0] == [r["amount"] for r in desk_.ran]
    assert REMEMBERED == rows(agent)[-1][-1]


# -- only this link's approvals count -----------------------------------------


async def test_another_links_approval_or_words_approve_nothing() -> None:
    """Only an approval of this link's own ask counts; a look-alike row does not."""
    desk_ = Desk()
    imposter = ToolMiddleware(
        name="imposter",
        on_tool_call=lambda c: allow(None, "approved by mallory"),
    )
    other = approve_once("other-desk")
    agent = desk_.agent(imposter, other)
    await approve(agent, await agent.run("refund 7 25"))
    # Same session, same call, a second agent whose gate has another name.
    mine = approve_once()
    agent2 = desk_.agent(imposter, mine)
    sid = agent.last_snapshot().session_id
    again = await agent2.run("refund 7 25", session_id=sid)
    assert isinstance(again, AskPause)
    assert "approve-once" == again.ask.middleware


def test_the_fold_projects_only_approved_asks() -> None:
    """Approvals are folded from pause.request (kind ask) + pause.resume
    approved by someone; a decline or a check-in approves no ask."""
    from helmlog.events import (
        PauseRequested,
        PauseResumed,
        TurnStarted,
    )

    def pause(seq: int, cid: str, kind: str = "ask", mw: str | None = "g") -> Any:
        return PauseRequested(
            session_id="s",
            seq=seq,
            kind=kind,
            tool_name="refund",
            tool_call_id=cid,
            middleware=mw,
            args={"order": 7},
            args_digest=digest({"order": 7}),
            tool_source="crm",
        )

    def resumed(seq: int, cid: str, approved: bool, kind: str = "ask") -> Any:
        return PauseResumed(
            session_id="s",
            seq=seq,
            kind=kind,
            tool_call_id=cid,
            approved=approved,
            by="dana",
        )

    events = [
        TurnStarted(session_id="s", seq=1, turn=1),
        pause(2, "c1"),
        resumed(3, "c1", False),
        pause(4, "c2", kind="check-in", mw=None),
        resumed(5, "c2", True, kind="check-in"),
        pause(6, "c3"),
        resumed(7, "c3", True),
    ]
    from helmlog.events import Folder

    folder = Folder()
    for event in events:
        folder.apply(event)
    assert (
        Approval(
            middleware="g",
            tool_name="refund",
            tool_source="crm",
            args_digest=digest({"order": 7}),
            by="dana",
            tool_call_id="c3",
            seq=6,
        ),
    ) == folder.approvals
    # The state a fold yields is unchanged by the projection (golden states).
    assert fold(events).middleware_decisions == ()


# -- the rule alone -------------------------------------------------------------


def context(source: str | None, args: Any, *approvals: Approval) -> ToolCallContext:
    return ToolCallContext(
        "refund", source, "c9", 1, args, (), {"session_id": "s"}, approvals
    )


def approval(source: str | None, args: Any, name: str = "approve-once") -> Approval:
    return Approval(
        middleware=name,
        tool_name="refund",
        tool_source=source,
        args_digest=digest(args),
        by="dana",
        tool_call_id="c1",
        seq=4,
    )


def test_the_source_is_part_of_the_key() -> None:
    """Two servers' tools sharing a name are approved apart."""
    rule = ApproveOnce()
    args = {"order": 7}
    seen = approval("crm", args)
    assert allow(None, "approved earlier this session by dana") == rule.on_tool_call(
        context("crm", args, seen)
    )
    assert is_ask(rule.on_tool_call(context("billing", args, seen)))
    assert is_ask(rule.on_tool_call(context(None, args, seen)))
    assert is_ask(ApproveOnce(key="tool").on_tool_call(context("billing", {}, seen)))


def test_g49_the_question_quotes_no_argument_and_the_detail_carries_them() -> None:
    """G49: the ask's question is a fact; the arguments ride its detail."""
    out = approve_once().on_tool_call(context("crm", {"card": "4111 1111"}))
    assert is_ask(out)
    assert "4111" not in out.question
    assert {
        "tool": "refund",
        "tool_source": "crm",
        "args": {"card": "4111 1111"},
        "key": "call",
    } == out.detail


def test_tools_it_does_not_guard_pass_plainly() -> None:
    """``tools=`` names what it guards; other tools pass with a plain allow()."""
    assert allow() == approve_once(tools={"wire"}).on_tool_call(context(None, {}))
    assert is_ask(approve_once(tools=["refund"]).on_tool_call(context(None, {})))


@pytest.mark.parametrize(
    "options",
    [{"key": "args"}, {"tools": "refund"}, {"question": ""}],
)
def test_bad_options_are_refused_when_the_rule_is_made(options: Any) -> None:
    """A key other than "call"/"tool", a bare str of tools or an empty question."""
    with pytest.raises(ValueError):
        approve_once(**options)


def is_ask(out: Any) -> bool:
    from helmlog import Ask

    return isinstance(out, Ask)


def test_a_custom_question_names_the_tool() -> None:
    """``question=`` replaces ``{tool}`` with the tool's name."""
    out = approve_once(question="Let {tool} run?").on_tool_call(context(None, {}))
    assert is_ask(out)
    assert "Let refund run?" == out.question
