"""Ask → pause → plain-JSON checkpoint → resume: a person decides, the record says so.

Pattern: behavioural tests over a scripted provider and counting tools: each
         test pauses a run with an ``ask``, carries the checkpoint (through a
         string, and through a fresh process), resumes it, and compares rows,
         events, what the model read and what ran with what the law says.
Role:    unit tests for ``helmlog.Agent.run``/``resume`` at the before-tool moment.
Emits:   nothing.

Laws: G59 (an ask pauses before anything executes), G60 (a person approves
what the chain produced), G61 (a consent gate needs a decision, refused
before anything is appended), G62 (approval continues from the next link,
through validation, check-in, execute and after-tool), G63 (decisions), G64
(one human question per call's chain; decline is a denial), G65 (two gates
are not one), G66 (no proposed call is ever dropped), G67 (rows and phases
across a pause), G68 (a pending question blocks continuation, not new
sessions).

Why a fresh process: "plain JSON" means a checkpoint written here is read by
any other Python process with helmlog installed and handed back unchanged.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    AskPause,
    CheckInDecision,
    Checkpoint,
    CheckpointError,
    DecisionRequiredError,
    Message,
    MessageMiddleware,
    MiddlewareAsk,
    NoConversationError,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    is_ask_pause,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from . import helpers

REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}


class Refunds:
    """A refund tool that records every execution."""

    def __init__(self, *, source: str | None = None, check_in: Any = None) -> None:
        self.ran: list[dict[str, Any]] = []
        self.tool = Tool(
            "refund",
            "Refund an order.",
            REFUND_SCHEMA,
            self.execute,
            source,
            check_in=check_in,
        )

    def execute(self, order: int, amount: float) -> str:
        self.ran.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"


def refund_call(
    cid: str = "c1", order: int = 7, amount: float = 250
) -> ToolCallRequest:
    return ToolCallRequest(
        id=cid, name="refund", args={"order": order, "amount": amount}
    )


def calls(*requests: ToolCallRequest) -> Reply:
    return Reply(tool_calls=list(requests))


class Links:
    """Counting links: who ran, with which arguments and source."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []

    def passing(self, name: str) -> ToolMiddleware:
        def hook(c: Any) -> Any:
            self.log.append((name, c.args, c.tool_source))
            return allow()

        return ToolMiddleware(name=name, on_tool_call=hook)

    def asking(
        self,
        name: str,
        question: str = "approve?",
        *,
        detail: Any = None,
        component_id: str | None = None,
        when: Any = None,
    ) -> ToolMiddleware:
        def hook(c: Any) -> Any:
            self.log.append((name, c.args, c.tool_source))
            if when is None or when(c):
                return ask(question, detail, component_id)
            return allow()

        return ToolMiddleware(name=name, on_tool_call=hook)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.log]


def build(
    model: Any,
    refunds: Refunds,
    *tool_links: Any,
    store: MemoryEventStore | None = None,
    message_links: tuple[Any, ...] = (),
) -> Agent:
    builder = (
        Agent.create(
            provider=model,
            model="m",
            ids=counter_ids(),
            store=store or MemoryEventStore(),
        )
        .system("You refund.")
        .tool(refunds.tool)
    )
    if tool_links:
        builder = builder.tool_middleware(*tool_links)
    if message_links:
        builder = builder.message_middleware(*message_links)
    return builder.build()


class Tape:
    """Every delivered event, in order."""

    def __init__(self, agent: Agent) -> None:
        self.events: list[Any] = []
        agent.on("*", self.events.append)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def tool_messages(messages: tuple[Message, ...]) -> list[tuple[str | None, str]]:
    return [(m.tool_call_id, m.content) for m in messages if m.role == "tool"]


def row_view(rows: Any) -> list[tuple[Any, ...]]:
    return [(r.middleware, r.moment, r.tool_call_id, r.outcome, r.why) for r in rows]


async def paused_run(agent: Agent, message: str = "refund order 7") -> AskPause:
    out = await agent.run(message)
    assert is_ask_pause(out), out
    return out


# -- G59 ----------------------------------------------------------------------


async def test_g59_ask_returns_an_ask_pause_before_the_tool_runs() -> None:
    """G59: run() returns an AskPause of kind "ask" before the tool runs."""
    refunds, links = Refunds(), Links()
    after_seen: list[Any] = []
    audit = ToolMiddleware(name="audit", on_tool_result=lambda r: after_seen.append(r))
    agent = build(
        scripted([calls(refund_call())]),
        refunds,
        links.asking(
            "four-eyes", "Refund $250?", detail={"limit": 100}, component_id="cmp"
        ),
        audit,
    )
    out = await paused_run(agent)
    assert ("ask", "refund", "c1") == (out.kind, out.tool_name, out.tool_call_id)
    assert MiddlewareAsk("Refund $250?", {"limit": 100}, "four-eyes", "cmp") == out.ask
    assert "pause" == out.checkpoint.kind
    assert ([], []) == (refunds.ran, after_seen)
    assert is_ask_pause(out) is True
    assert is_ask_pause("an answer") is False


async def test_g59_ask_files_its_row_and_one_pause_request() -> None:
    """G59: rows so far are committed, the ask row too; one pause.request fires."""
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call())]),
        refunds,
        links.passing("ceiling"),
        links.asking("four-eyes", "Refund $250?"),
    )
    tape = Tape(agent)
    await paused_run(agent)
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("ceiling", "allow", False, None, 1),
        ("four-eyes", "ask", False, "Refund $250?", 1),
    ] == [(r.middleware, r.outcome, r.changed, r.why, r.iteration) for r in rows]
    assert 1 == len(tape.of("pause.request"))
    assert "pause.request" == tape.types()[-1]
    assert [
        "ceiling",
        "four-eyes",
    ] == [e.middleware for e in tape.of("middleware.decision")]


async def test_g59_invalid_arguments_still_pause_before_validation() -> None:
    """G59: no validation has happened when the ask pauses the call."""
    refunds, links = Refunds(), Links()
    bad = ToolCallRequest(id="c1", name="refund", args={"order": "seven"})
    agent = build(scripted([calls(bad)]), refunds, links.asking("four-eyes"))
    out = await paused_run(agent)
    assert "c1" == out.tool_call_id
    assert [] == tool_messages(agent.last_snapshot().history)


async def test_g59_checkpoint_round_trips_through_a_string() -> None:
    """G59/R14: Checkpoint.from_json(cp.to_json()) == cp, and the JSON is plain."""
    refunds, links = Refunds(), Links()
    agent = build(scripted([calls(refund_call())]), refunds, links.asking("four-eyes"))
    out = await paused_run(agent)
    text = out.checkpoint.to_json()
    assert isinstance(msgspec.json.decode(text), dict)
    assert Checkpoint.from_json(text) == out.checkpoint


@pytest.mark.slow
async def test_g59_checkpoint_survives_a_fresh_process_and_resumes() -> None:
    """G59/R14: another process reads the JSON and writes it back equal; it resumes."""
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes"),
    )
    out = await paused_run(agent)
    program = (
        "import sys; from helmlog import Checkpoint; "
        "sys.stdout.write(Checkpoint.from_json(sys.stdin.read()).to_json())"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        input=out.checkpoint.to_json(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    carried = Checkpoint.from_json(done.stdout)
    assert carried == out.checkpoint
    answer = await agent.resume(done.stdout, check_in_approved(by="dana@ops"))
    assert "Refunded." == answer
    assert [{"order": 7, "amount": 250}] == refunds.ran


# -- G60 ----------------------------------------------------------------------


async def test_g60_pause_records_the_arguments_as_transformed_up_to_the_asker() -> None:
    """G60: resume goes on with the asker's arguments and position."""
    refunds, links = Refunds(source="crm"), Links()
    cap = ToolMiddleware(
        name="cap",
        on_tool_call=lambda c: allow({**c.args, "amount": 200}, "capped at 200"),
    )
    agent = build(
        scripted([calls(refund_call(amount=250)), "Refunded."]),
        refunds,
        links.passing("first"),
        cap,
        links.asking("four-eyes"),
        links.passing("last"),
    )
    out = await paused_run(agent)
    pending = agent.last_snapshot().pending
    assert pending is not None
    assert (
        {"order": 7, "amount": 200},
        "four-eyes",
        2,
    ) == (pending.args, pending.middleware, pending.link_index)
    await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    assert [
        ("first", {"order": 7, "amount": 250}, "crm"),
        ("four-eyes", {"order": 7, "amount": 200}, "crm"),
        ("last", {"order": 7, "amount": 200}, "crm"),
    ] == links.log
    assert [{"order": 7, "amount": 200}] == refunds.ran


# -- G61 ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "received"),
    [(None, "nothing"), ("yes", "a str"), (True, "a bool"), ({"ok": 1}, "a dict")],
)
async def test_g61_resume_without_a_decision_raises_before_anything_is_appended(
    decision: Any, received: str
) -> None:
    """G61: anything but a CheckInDecision is refused; nothing is appended."""
    store = MemoryEventStore()
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes"),
        store=store,
    )
    out = await paused_run(agent)
    sid = out.checkpoint.session_id
    stored = len(await store.read(sid))
    tape = Tape(agent)
    with pytest.raises(DecisionRequiredError) as caught:
        await agent.resume(out.checkpoint, decision)
    e = caught.value
    assert (
        "ERR_DECISION_REQUIRED",
        "ask",
        "four-eyes",
        "refund",
        received,
    ) == (e.code, e.gate, e.middleware, e.tool_name, e.received)
    assert "check_in_approved" in str(e)
    assert repr(decision) not in str(e) or decision is None
    assert len(await store.read(sid)) == stored
    assert [] == tape.events
    assert "Refunded." == await agent.resume(
        out.checkpoint, check_in_approved(by="dana")
    )
    assert [{"order": 7, "amount": 250}] == refunds.ran


async def test_g61_decision_required_message_never_holds_the_value() -> None:
    """G61: the error names the shape of what was passed, never the value."""
    refunds, links = Refunds(), Links()
    agent = build(scripted([calls(refund_call())]), refunds, links.asking("four-eyes"))
    out = await paused_run(agent)
    with pytest.raises(DecisionRequiredError) as caught:
        await agent.resume(out.checkpoint, "approve it, signed SECRET-TOKEN-42")
    assert "SECRET-TOKEN-42" not in str(caught.value)
    assert "SECRET-TOKEN-42" not in repr(vars(caught.value))


async def test_g61_check_in_pause_gate_is_check_in() -> None:
    """G61: on a check-in pause the error's gate is "check-in" and middleware None."""
    refunds = Refunds(check_in=True)
    agent = build(scripted([calls(refund_call())]), refunds)
    out = await paused_run(agent)
    assert "check-in" == out.kind
    with pytest.raises(DecisionRequiredError) as caught:
        await agent.resume(out.checkpoint, None)
    assert (
        "check-in",
        None,
        "refund",
    ) == (caught.value.gate, caught.value.middleware, caught.value.tool_name)


async def test_g61_the_checkpoint_is_validated_before_the_decision() -> None:
    """G61/R9: a replayed checkpoint with no decision is a CheckpointError first."""
    from helmlog import CheckpointError

    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes"),
    )
    out = await paused_run(agent)
    await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    with pytest.raises(CheckpointError) as caught:
        await agent.resume(out.checkpoint, None)
    assert "replayed" == caught.value.reason


# -- G62 ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("note", "why"),
    [(None, "approved by dana@ops"), ("ok", "approved by dana@ops: ok")],
)
async def test_g62_approval_files_the_resume_row(note: str | None, why: str) -> None:
    """G62: approval files the asker's allow row: approved by <by>[: <note>]."""
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes"),
    )
    out = await paused_run(agent)
    await agent.resume(out.checkpoint, check_in_approved(by="dana@ops", note=note))
    row = agent.last_snapshot().middleware_decisions[-1]
    expected = {
        "middleware": "four-eyes",
        "moment": "before-tool",
        "at": "tool",
        "tool_name": "refund",
        "tool_call_id": "c1",
        "iteration": 1,
        "outcome": "allow",
        "changed": False,
        "why": why,
    }
    assert expected == msgspec.to_builtins(row)


async def test_g62_component_id_rides_only_on_the_resume_row() -> None:
    """G62/G45: component_id is on the resume-side row, never on the asking row."""
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes", component_id="approve-card"),
    )
    tape = Tape(agent)
    out = await paused_run(agent)
    await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("ask", None),
        ("allow", "approve-card"),
    ] == [(r.outcome, r.component_id) for r in rows]
    assert [
        None,
        "approve-card",
    ] == [e.component_id for e in tape.of("middleware.decision")]


async def test_g62_the_asker_is_not_rerun_and_the_walk_continues_after_it() -> None:
    """G62: resume walks from the link after the asker; the asker runs once."""
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.passing("before"),
        links.asking("four-eyes"),
        links.passing("after"),
    )
    out = await paused_run(agent)
    assert ["before", "four-eyes"] == links.names()
    await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    assert ["before", "four-eyes", "after"] == links.names()
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("before", "allow", None),
        ("four-eyes", "ask", "approve?"),
        ("four-eyes", "allow", "approved by dana"),
        ("after", "allow", None),
    ] == [(r.middleware, r.outcome, r.why) for r in rows]


async def test_g62_approved_call_runs_and_the_model_reads_the_walked_result() -> None:
    """G62: the call executes, after-tool runs, the model reads the real result."""
    refunds, links = Refunds(), Links()
    shout = ToolMiddleware(
        name="shout", on_tool_result=lambda r: allow(r.result.upper(), "house style")
    )
    model = scripted([calls(refund_call()), "Refunded."])
    agent = build(model, refunds, links.asking("four-eyes"), shout)
    out = await paused_run(agent)
    await agent.resume(out.checkpoint, check_in_approved(by="dana", note="fine by me"))
    assert [{"order": 7, "amount": 250}] == refunds.ran
    assert [("c1", "REFUNDED 250 ON 7")] == tool_messages(model.requests[-1].messages)


async def test_g62_approved_arguments_still_pass_validation() -> None:
    """G62: on the approve path validation still refuses broken arguments."""
    refunds, links = Refunds(), Links()
    breaker = ToolMiddleware(
        name="breaker", on_tool_call=lambda c: allow({"order": 7}, "dropped amount")
    )
    model = scripted([calls(refund_call()), "Could not."])
    agent = build(model, refunds, links.asking("four-eyes"), breaker)
    out = await paused_run(agent)
    assert "Could not." == await agent.resume(
        out.checkpoint, check_in_approved(by="dana")
    )
    assert [] == refunds.ran
    assert [
        (
            "c1",
            "Invalid arguments for tool 'refund' — the call was not executed.\n"
            "- 'amount' is required but missing\n"
            "Fix the arguments to match the tool's input schema and call it again.",
        )
    ] == tool_messages(model.requests[-1].messages)


# -- G63 ----------------------------------------------------------------------


def test_g63_decisions_are_frozen_and_stamped_now() -> None:
    """G63: check_in_approved/declined return a frozen CheckInDecision with at = now."""
    before = int(time.time() * 1000)
    yes = check_in_approved(by="dana", note="fine")
    no = check_in_declined(by="lee")
    after = int(time.time() * 1000)
    assert (True, "dana", "fine") == (yes.approved, yes.by, yes.note)
    assert (False, "lee", None) == (no.approved, no.by, no.note)
    assert before <= yes.at <= after
    assert isinstance(yes, CheckInDecision)
    with pytest.raises(AttributeError):
        yes.approved = False  # type: ignore[misc]


@pytest.mark.parametrize("by", ["", None, 7])
def test_g63_by_must_be_a_non_empty_str(by: Any) -> None:
    """G63: a missing or non-str 'by' raises ValueError."""
    with pytest.raises(ValueError):
        check_in_approved(by=by)
    with pytest.raises(ValueError):
        check_in_declined(by=by)


def test_g63_an_empty_note_is_stored_as_none() -> None:
    """G63: note="" is stored as None."""
    assert check_in_approved(by="dana", note="").note is None
    assert check_in_declined(by="dana", note="").note is None


# -- G64 ----------------------------------------------------------------------


async def test_g64_a_later_link_asking_after_approval_is_a_denial() -> None:
    """G64: a second ask in the same call's chain is a deny; the tool does not run."""
    refunds, links = Refunds(), Links()
    model = scripted([calls(refund_call()), "Stopped."])
    agent = build(
        model,
        refunds,
        links.asking("four-eyes", "first?"),
        links.asking("compliance", "second?"),
    )
    out = await paused_run(agent)
    assert "Stopped." == await agent.resume(
        out.checkpoint, check_in_approved(by="dana")
    )
    reason = (
        "middleware 'compliance' asked a person to decide, and there is no pause "
        "here to carry that ask: second?"
    )
    last = agent.last_snapshot().middleware_decisions[-1]
    assert (
        "compliance",
        "deny",
        False,
        reason,
    ) == (last.middleware, last.outcome, last.changed, last.why)
    assert [] == refunds.ran
    assert [("c1", reason)] == tool_messages(model.requests[-1].messages)


@pytest.mark.parametrize(
    ("note", "why", "reads"),
    [
        (None, "declined by lee", "declined by human"),
        ("too much", "declined by lee: too much", "declined by human: too much"),
    ],
)
async def test_g64_decline_is_a_denial_the_model_reads(
    note: str | None, why: str, reads: str
) -> None:
    """G64: a decline files a deny row; the model reads 'declined by human[: note]'."""
    refunds, links = Refunds(), Links()
    after_seen: list[Any] = []
    audit = ToolMiddleware(
        name="audit", on_tool_result=lambda r: after_seen.append(r) or allow()
    )
    model = scripted([calls(refund_call()), "Okay, not refunded."])
    agent = build(
        model, refunds, links.asking("four-eyes"), links.passing("later"), audit
    )
    out = await paused_run(agent)
    answer = await agent.resume(out.checkpoint, check_in_declined(by="lee", note=note))
    assert "Okay, not refunded." == answer
    last = agent.last_snapshot().middleware_decisions[-1]
    assert (
        "four-eyes",
        "deny",
        False,
        why,
    ) == (last.middleware, last.outcome, last.changed, last.why)
    assert ([], []) == (refunds.ran, after_seen)
    assert ["four-eyes"] == links.names()
    assert [("c1", reads)] == tool_messages(model.requests[-1].messages)


# -- G65 ----------------------------------------------------------------------


async def test_g65_two_gates_are_not_one() -> None:
    """G65: after an approved ask, a tripping check-in refuses the call."""
    refunds, links = Refunds(check_in=lambda args: args["amount"] > 100), Links()
    model = scripted([calls(refund_call()), "Could not."])
    agent = build(model, refunds, links.asking("four-eyes"))
    out = await paused_run(agent)
    assert "ask" == out.kind
    result = await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    assert "Could not." == result
    assert [] == refunds.ran
    assert [
        (
            "c1",
            "Tool 'refund' was not executed and cannot be retried this turn: it "
            "declares its own check-in consent gate, which trips for these arguments, "
            "and middleware 'four-eyes' already asked a person about this call. Ask "
            "through one gate, not two.",
        )
    ] == tool_messages(model.requests[-1].messages)


async def test_g65_a_check_in_that_does_not_trip_lets_the_approved_call_run() -> None:
    """G65: a check-in that does not trip for the final arguments is no second gate."""
    refunds, links = Refunds(check_in=lambda args: args["amount"] > 1000), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes"),
    )
    out = await paused_run(agent)
    assert "Refunded." == await agent.resume(
        out.checkpoint, check_in_approved(by="dana")
    )
    assert [{"order": 7, "amount": 250}] == refunds.ran


# -- G66 ----------------------------------------------------------------------


async def test_g66_no_call_of_a_batch_is_dropped_and_a_later_ask_is_a_new_pause() -> (
    None
):
    """G66: the rest of the batch runs in order; a later ask pauses anew."""
    refunds, links = Refunds(), Links()
    model = scripted(
        [
            calls(
                refund_call("c1", 1, 500),
                refund_call("c2", 2, 20),
                refund_call("c3", 3, 900),
            ),
            "All handled.",
        ]
    )
    big = links.asking(
        "four-eyes", "big refund?", when=lambda c: c.args["amount"] > 100
    )
    agent = build(model, refunds, big)
    first = await paused_run(agent)
    assert "c1" == first.tool_call_id
    second = await agent.resume(first.checkpoint, check_in_approved(by="dana"))
    assert isinstance(second, AskPause)
    assert "c3" == second.tool_call_id
    assert second.checkpoint != first.checkpoint
    assert second.checkpoint.seq > first.checkpoint.seq
    assert [1, 2] == [r["order"] for r in refunds.ran]
    answer = await agent.resume(second.checkpoint, check_in_declined(by="dana"))
    assert "All handled." == answer
    assert [
        ("c1", "refunded 500 on 1"),
        ("c2", "refunded 20 on 2"),
        ("c3", "declined by human"),
    ] == tool_messages(model.requests[-1].messages)
    assert 2 == len(model.requests)


class Halt(BaseException):
    """A signal no permission gate may swallow: the run stops by raising."""


async def test_g66_a_run_that_stops_mid_batch_answers_every_undispatched_call() -> None:
    """G66: calls left without a tool message get the 'was not run' text."""
    refunds = Refunds()

    def gate(c: Any) -> Any:
        if c.tool_call_id == "c2":
            raise Halt()
        return allow()

    agent = (
        Agent.create(
            provider=scripted(
                [
                    calls(
                        refund_call("c1", 1, 5),
                        refund_call("c2", 2, 5),
                        refund_call("c3", 3, 5),
                    )
                ]
            ),
            model="m",
            ids=counter_ids(),
        )
        .tool(refunds.tool)
        .permissions(gate)
        .build()
    )
    with pytest.raises(Halt):
        await agent.run("refund three")
    assert [
        ("c1", "refunded 5 on 1"),
        (
            "c2",
            "Tool 'refund' (call c2) was not run: the run stopped before it was "
            "dispatched.",
        ),
        (
            "c3",
            "Tool 'refund' (call c3) was not run: the run stopped before it was "
            "dispatched.",
        ),
    ] == tool_messages(agent.last_snapshot().history)


# -- G67 ----------------------------------------------------------------------


async def test_g67_rows_and_facts_across_a_pause() -> None:
    """G67: rows are pre-pause rows then resume rows, with one fact per row."""
    refunds, links = Refunds(), Links()
    watch_in: list[str] = []

    def words(m: Any) -> Any:
        watch_in.append(m.phase)
        return allow()

    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.passing("ceiling"),
        links.asking("four-eyes"),
        message_links=(MessageMiddleware(name="words", on_message=words),),
    )
    tape = Tape(agent)
    out = await paused_run(agent)
    pre = agent.last_snapshot().middleware_decisions
    await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    rows = agent.last_snapshot().middleware_decisions
    assert rows[: len(pre)] == pre
    assert [
        ("words", "input", None, "allow", None),
        ("ceiling", "before-tool", "c1", "allow", None),
        ("four-eyes", "before-tool", "c1", "ask", "approve?"),
        ("four-eyes", "before-tool", "c1", "allow", "approved by dana"),
        ("words", "output", None, "allow", None),
    ] == row_view(rows)
    facts = tape.of("middleware.decision")
    assert [(f.middleware, f.moment, f.outcome, f.why) for f in facts] == [
        (r.middleware, r.moment, r.outcome, r.why) for r in rows
    ]
    assert ["input", "output"] == watch_in
    assert 1 == len(tape.of("pause.resume"))
    resumed = tape.of("pause.resume")[0]
    assert (
        "ask",
        "c1",
        True,
        "dana",
    ) == (resumed.kind, resumed.tool_call_id, resumed.approved, resumed.by)


async def test_g67_resume_continues_the_iteration_numbering() -> None:
    """G67/G48: the resumed run's model call is iteration 2; its rows say so."""
    refunds, links = Refunds(), Links()
    agent = build(
        scripted([calls(refund_call()), "Refunded."]),
        refunds,
        links.asking("four-eyes"),
        message_links=(MessageMiddleware(name="words", on_message=lambda m: allow()),),
    )
    tape = Tape(agent)
    out = await paused_run(agent)
    await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    assert [1, 2] == [e.iteration for e in tape.of("stream.llm_start")]
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("input", 0),
        ("before-tool", 1),
        ("before-tool", 1),
        ("output", 2),
    ] == [(r.moment, r.iteration) for r in rows]


# -- G68 ----------------------------------------------------------------------


async def test_g68_after_a_pause_checkpoint_is_the_pause_checkpoint() -> None:
    """G68: checkpoint() is the pause's, its history ending with the calls."""
    refunds, links = Refunds(), Links()
    agent = build(scripted([calls(refund_call())]), refunds, links.asking("four-eyes"))
    out = await paused_run(agent)
    cp = agent.checkpoint()
    assert cp == out.checkpoint
    assert cp is not None
    assert cp.history[-1] == Message(
        role="assistant", content="", tool_calls=(refund_call(),)
    )


async def test_g68_a_pending_question_blocks_follow_up() -> None:
    """G68: follow_up while a pause is pending raises pending-question."""
    refunds, links = Refunds(), Links()
    agent = build(scripted([calls(refund_call())]), refunds, links.asking("four-eyes"))
    await paused_run(agent)
    with pytest.raises(NoConversationError) as caught:
        await agent.follow_up("and another")
    assert (
        "pending-question",
        "ERR_NO_CONVERSATION",
    ) == (caught.value.reason, caught.value.code)


async def test_g68_continue_from_any_checkpoint_of_a_paused_session_is_blocked() -> (
    None
):
    """G68: continue_from any checkpoint of it raises pending-question."""
    refunds, links = Refunds(), Links()
    model = scripted(["Hello.", calls(refund_call())])
    agent = build(model, refunds, links.asking("four-eyes"))
    await agent.run("hi")
    earlier = agent.checkpoint()
    assert earlier is not None
    out = await agent.follow_up("refund order 7")
    assert is_ask_pause(out)
    for cp in (earlier, out.checkpoint):
        with pytest.raises(NoConversationError) as caught:
            await agent.run("something else", continue_from=cp)
        assert "pending-question" == caught.value.reason
    assert 2 == len(model.requests)


async def test_g68_a_fresh_run_starts_a_new_session_and_the_pause_stays_resumable() -> (
    None
):
    """G68: run(m) while paused starts a new session; the pause still resumes."""
    refunds, links = Refunds(), Links()
    model = scripted([calls(refund_call()), "Other answer.", "Refunded."])
    agent = build(model, refunds, links.asking("four-eyes"))
    out = await paused_run(agent)
    assert "Other answer." == await agent.run("unrelated question")
    other = agent.checkpoint()
    assert other is not None
    assert other.session_id != out.checkpoint.session_id
    assert (Message(role="user", content="unrelated question"),) == model.requests[
        1
    ].messages
    answer = await agent.resume(out.checkpoint, check_in_approved(by="dana"))
    assert "Refunded." == answer
    assert [{"order": 7, "amount": 250}] == refunds.ran


async def test_g60_resume_runs_the_recorded_arguments_whatever_a_listener_mutates() -> (
    None
):
    """G60: resume continues from exactly that state."""
    refund, ran = helpers.refund_recorder()
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    agent = (
        Agent.create(
            provider=scripted(
                [helpers.calls(helpers.call("c1", "refund", order=1, amount=5)), "done"]
            ),
            model="m",
        )
        .tool(refund)
        .tool_middleware(four_eyes)
        .build()
    )

    def meddle(event: Any) -> None:
        if event.type == "pause.request":
            event.args["amount"] = 777

    agent.on("*", meddle)
    paused = await agent.run("refund")
    assert is_ask_pause(paused)
    assert "done" == await agent.resume(paused.checkpoint, check_in_approved(by="d"))
    assert [5] == ran


async def test_g91_a_checkpoint_refused_on_resume_emits_nothing() -> None:
    """G91: refusals raised before anything runs (`CheckpointError`) emit nothing."""
    refund, _ran = helpers.refund_recorder()
    store = MemoryEventStore()
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    first = (
        Agent.create(
            provider=scripted(
                [helpers.calls(helpers.call("c1", "refund", order=1, amount=5)), "done"]
            ),
            model="m",
            store=store,
        )
        .tool(refund)
        .tool_middleware(four_eyes)
        .build()
    )
    paused = await first.run("refund")
    assert is_ask_pause(paused)
    before = await helpers.stored_types(first)
    toolless = (
        Agent.create(provider=scripted(["done"]), model="m", store=store)
        .tool_middleware(four_eyes)
        .build()
    )
    seen: list[str] = []
    toolless.on("*", lambda e: seen.append(e.type))
    with pytest.raises(CheckpointError):
        await toolless.resume(paused.checkpoint, check_in_approved(by="d"))
    assert ([], before) == (seen, await helpers.stored_types(first))
