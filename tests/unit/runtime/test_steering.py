"""Steering: a turn another framework drives files the native loop's record.

Pattern: one scripted conversation run twice, through ``Agent.run``/``resume``
         (the native loop, a scripted provider) and through ``Steering`` (a
         framework's loop played by a small driver, a ``framework_model``
         provider); the stored streams are folded and compared whole: the
         ledger rows, the event types in order, the committed history.
Role:    unit tests for ``runtime/_steering.py`` (``helmlog.runtime.lowlevel``).
Emits:   nothing.

Laws: issue 27 items 1–5 (one record: the rows the native loop files for the
same decisions), G7 (a raising rule is a denial), G33–G43, G51, G59–G64, G91,
R7, R9; issue 27 "bad input gets a clear, typed error".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from helmlog import (
    Agent,
    AskPause,
    CheckInDecision,
    DecisionRequiredError,
    MessageDeniedError,
    MessageMiddleware,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    deny,
    tool,
)
from helmlog.events import EventStore, MemoryEventStore, fold
from helmlog.runtime.lowlevel import (
    Admitted,
    FrameworkModelError,
    Ran,
    Refused,
    SteeredTurn,
    Steering,
    SteeringError,
)
from helmlog.runtime.providers import (
    Reply,
    ToolCallRequest,
    framework_model,
    scripted,
)
from helmlog.runtime.testing import counter_ids

# -- one governance table, used by both loops --------------------------------


def _scrub(msg: Any) -> Any:
    if msg.phase == "input" and "123-45-6789" in msg.content:
        return allow(msg.content.replace("123-45-6789", "[ssn]"), "masked an SSN")
    if msg.phase == "output" and "BLUEBIRD" in msg.content:
        return allow(msg.content.replace("BLUEBIRD", "[codename]"), "codename")
    if msg.phase == "output" and "FORBIDDEN" in msg.content:
        return deny("the answer names a forbidden project")
    if msg.phase == "input" and "shout" in msg.content:
        return deny("no shouting")
    return allow()


def _ceiling(call: Any) -> Any:
    if call.tool_name == "refund" and float(call.args["amount"]) > 10_000:
        return deny("refunds over $10,000 go to the finance desk")
    return allow()


def _four_eyes(call: Any) -> Any:
    if call.tool_name == "refund" and float(call.args["amount"]) > 500:
        return ask("Approve this refund?", {"amount": call.args["amount"]})
    return allow()


def _raises(call: Any) -> Any:
    if call.tool_name == "explode":
        raise RuntimeError("the rule's own bug")
    return allow()


def _redact_cards(result: Any) -> Any:
    text = str(result.result)
    if "4111" in text:
        return allow(text.replace("4111 1111 1111 1111", "[card]"), "masked a card")
    return allow()


RUNS: dict[str, int] = {}


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    RUNS["lookup_order"] = RUNS.get("lookup_order", 0) + 1
    return f"order {order_id}: paid with 4111 1111 1111 1111"


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    RUNS["refund"] = RUNS.get("refund", 0) + 1
    return f"refunded {amount} on order {order_id}"


@tool
def explode() -> str:
    """A tool a raising rule guards."""
    RUNS["explode"] = RUNS.get("explode", 0) + 1
    return "ran"


TOOLS = {t.name: t for t in (lookup_order, refund, explode)}


def build(provider: Any, store: EventStore | None = None) -> Agent:
    """The agent both loops use: the same rules, tools and ids."""
    return (
        Agent.create(
            provider=provider,
            model="m",
            store=store or MemoryEventStore(),
            ids=counter_ids(),
        )
        .tool(lookup_order, refund, explode)
        .act(
            input=[MessageMiddleware(name="pii-scrub", on_message=_scrub)],
            before_tool=[
                ToolMiddleware(name="buggy", on_tool_call=_raises),
                ToolMiddleware(name="refund-ceiling", on_tool_call=_ceiling),
                ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
            ],
            after_tool=[
                ToolMiddleware(name="card-redaction", on_tool_result=_redact_cards)
            ],
            output=[MessageMiddleware(name="codenames", on_message=_scrub)],
        )
        .build()
    )


def call(cid: str, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=cid, name=name, args=args)


Decide = Callable[[AskPause], CheckInDecision]


def approve(_: AskPause) -> CheckInDecision:
    return check_in_approved(by="dana@ops")


def decline(_: AskPause) -> CheckInDecision:
    return check_in_declined(by="dana@ops", note="too much")


# -- the two loops ------------------------------------------------------------


async def native(message: str, replies: Sequence[Reply], decide: Decide) -> Agent:
    """The native loop: ``run``, and ``resume`` at every pause."""
    agent = build(scripted(list(replies)))
    with pytest.raises(MessageDeniedError) if _denies(message, replies) else _none():
        out = await agent.run(message, session_id="s1")
        while isinstance(out, AskPause):
            out = await agent.resume(out.checkpoint, decide(out))
    return agent


async def steered(
    message: str,
    replies: Sequence[Reply],
    decide: Decide,
    *,
    given_tools: bool = True,
) -> Agent:
    """A framework's loop, played through ``Steering``: the model's replies
    are the framework's, each call runs through ``call_tool``."""
    agent = build(framework_model("test-framework"))
    steering = Steering(agent)
    with pytest.raises(MessageDeniedError) if _denies(message, replies) else _none():
        turn = await steering.open_turn(message, session_id="s1")
        for reply in replies:
            await turn.model_request()
            await turn.model_reply(reply.content, reply.tool_calls)
            if not reply.tool_calls:
                await turn.finish(reply.content)
                break
            for c in reply.tool_calls:
                t = TOOLS[c.name] if given_tools else None
                out = await turn.call_tool(c, t)
                while isinstance(out, AskPause):
                    out = await turn.resume_tool(out.checkpoint, decide(out), t)
    return agent


def _denies(message: str, replies: Sequence[Reply]) -> bool:
    return "shout" in message or any("FORBIDDEN" in r.content for r in replies)


class _none:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def record(agent: Agent) -> tuple[Any, list[str], Any]:
    """The stored stream of session s1: its rows, its event types, its history."""
    events = [r.decode() for r in await agent.store.read("s1")]
    state = fold(events)
    return state.middleware_decisions, [e.type for e in events], state.history


CONVERSATIONS: dict[str, tuple[str, list[Reply], Decide]] = {
    "input-transform-after-tool-transform-output-transform": (
        "Look up order 7, my SSN is 123-45-6789",
        [
            Reply(tool_calls=[call("c1", "lookup_order", order_id="7")]),
            Reply("Order 7 is paid (project BLUEBIRD)."),
        ],
        approve,
    ),
    "deny-the-model-reads-the-refusal": (
        "Refund order 7 for $20,000",
        [
            Reply(tool_calls=[call("c1", "refund", order_id="7", amount=20_000)]),
            Reply("I cannot refund that much."),
        ],
        approve,
    ),
    "ask-approved": (
        "Refund order 7 for $800",
        [
            Reply(tool_calls=[call("c1", "lookup_order", order_id="7")]),
            Reply(tool_calls=[call("c2", "refund", order_id="7", amount=800)]),
            Reply("Refunded."),
        ],
        approve,
    ),
    "ask-declined": (
        "Refund order 7 for $800",
        [
            Reply(tool_calls=[call("c2", "refund", order_id="7", amount=800)]),
            Reply("It was declined."),
        ],
        decline,
    ),
    "two-calls-in-one-reply": (
        "Look up 7 and refund 9 for $20",
        [
            Reply(
                tool_calls=[
                    call("c1", "lookup_order", order_id="7"),
                    call("c2", "refund", order_id="9", amount=20),
                ]
            ),
            Reply("Done."),
        ],
        approve,
    ),
    "a-raising-rule-is-a-denial": (
        "Explode",
        [Reply(tool_calls=[call("c1", "explode")]), Reply("It was refused.")],
        approve,
    ),
    "unknown-tool-refused": (
        "Use a tool you lack",
        [Reply(tool_calls=[call("c1", "teleport")]), Reply("No such tool.")],
        approve,
    ),
    "output-deny": (
        "Tell me the plan",
        [Reply("The FORBIDDEN plan.")],
        approve,
    ),
    "input-deny": ("shout at me", [Reply("never reached")], approve),
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
async def test_steered_record_equals_the_native_loops_row_for_row(name: str) -> None:
    """Issue 27 item 5: a steered turn's rows, events and history are the
    native loop's for the same conversation and decisions (G7, G33–G43,
    G51, G59–G64)."""
    message, replies, decide = CONVERSATIONS[name]
    given = name != "unknown-tool-refused"
    expected = await record(await native(message, replies, decide))
    actual = await record(await steered(message, replies, decide, given_tools=given))
    assert expected[0] == actual[0]
    assert expected[1] == actual[1]
    assert expected[2] == actual[2]


async def test_the_record_names_the_frameworks_provider() -> None:
    """Issue 27 item 5: ``agent.turn_start`` and ``stream.llm_start`` name the
    framework's provider; the native loop calling it is a typed error."""
    agent = await steered(*CONVERSATIONS["deny-the-model-reads-the-refusal"])
    events = [r.decode() for r in await agent.store.read("s1")]
    providers = {e.provider for e in events if e.type == "stream.llm_start"}
    assert {"test-framework"} == providers
    with pytest.raises(FrameworkModelError) as caught:
        await agent.run("hello")
    assert "ERR_FRAMEWORK_MODEL" == caught.value.code


# -- re-entrancy ----------------------------------------------------------------


async def _proposed(
    steering: Steering, *calls: ToolCallRequest, message: str = "Refund 7 for $800"
) -> SteeredTurn:
    turn = await steering.open_turn(message, session_id="s1")
    await turn.model_request()
    await turn.model_reply("", list(calls))
    return turn


async def test_call_tool_twice_for_one_id_appends_nothing_twice() -> None:
    """Issue 27 (re-entrancy): a call the record holds is read back; the tool
    ran once, the stream did not grow, the same text comes back."""
    RUNS.clear()
    agent = build(framework_model("fw"))
    turn = await _proposed(Steering(agent), call("c1", "lookup_order", order_id="7"))
    first = await turn.call_tool(call("c1", "lookup_order", order_id="7"), lookup_order)
    length = len(await agent.store.read("s1"))
    again = await turn.call_tool(call("c1", "lookup_order", order_id="7"), lookup_order)
    assert isinstance(first, Ran)
    assert first == again
    assert length == len(await agent.store.read("s1"))
    assert {"lookup_order": 1} == RUNS


async def test_a_pending_ask_is_returned_again_not_asked_twice() -> None:
    """G59 + re-entrancy: a re-executed node gets the same pause; one
    ``pause.request`` is recorded."""
    agent = build(framework_model("fw"))
    c2 = call("c2", "refund", order_id="7", amount=800)
    turn = await _proposed(Steering(agent), c2)
    first = await turn.call_tool(c2, refund)
    again = await turn.call_tool(c2, refund)
    assert isinstance(first, AskPause)
    assert first == again
    types = [r.decode().type for r in await agent.store.read("s1")]
    assert 1 == types.count("pause.request")


async def test_a_refusal_is_returned_again_as_a_refusal() -> None:
    """G15 + re-entrancy: a denied call read back is still a ``Refused``."""
    agent = build(framework_model("fw"))
    c = call("c1", "refund", order_id="7", amount=20_000)
    turn = await _proposed(Steering(agent), c)
    first = await turn.call_tool(c, refund)
    again = await turn.call_tool(c, refund)
    assert isinstance(first, Refused)
    assert (Refused, first.text) == (type(again), again.text)


async def test_an_approval_from_another_process_is_read_back_and_run_once() -> None:
    """Issue 27 item 1/2: a person approves with another agent on the same
    store (another process's view); the framework's re-entered call gets
    the recorded result, and the tool ran exactly once."""
    RUNS.clear()
    store = MemoryEventStore()
    here = Steering(build(framework_model("fw"), store))
    c2 = call("c2", "refund", order_id="7", amount=800)
    turn = await _proposed(here, c2)
    pause = await turn.call_tool(c2, refund)
    assert isinstance(pause, AskPause)
    there = Steering(build(framework_model("fw"), store))
    decided = await there.resume_tool(pause.checkpoint, approve(pause))
    assert isinstance(decided, Ran)
    again = await turn.call_tool(c2, refund)
    resumed = await turn.resume_tool(pause.checkpoint, approve(pause), refund)
    assert decided.text == getattr(again, "text", None)
    assert decided.text == getattr(resumed, "text", None)
    assert {"refund": 1} == RUNS
    types = [r.decode().type for r in await store.read("s1")]
    assert (1, 1, 1) == (
        types.count("pause.resume"),
        types.count("tool.dispatched"),
        types.count("stream.tool_end"),
    )


async def test_before_and_after_tool_file_call_tools_rows() -> None:
    """Issue 27 (the split for tool guardrails): ``before_tool`` + the
    framework's run + ``after_tool`` record what ``call_tool`` records."""
    c1 = call("c1", "lookup_order", order_id="7")
    whole = build(framework_model("fw"))
    turn = await _proposed(Steering(whole), c1)
    await turn.call_tool(c1, lookup_order)
    split = build(framework_model("fw"))
    turn = await _proposed(Steering(split), c1)
    admitted = await turn.before_tool(c1, lookup_order)
    assert Admitted({"order_id": "7"}) == admitted
    result = lookup_order.execute(**admitted.args)
    ran = await turn.after_tool(c1, lookup_order, result, duration_ms=3)
    assert isinstance(ran, Ran)
    assert "order 7: paid with [card]" == ran.text
    a, b = await record(whole), await record(split)
    assert (a[0], a[1], a[2]) == (b[0], b[1], b[2])


async def test_before_tool_refuses_and_asks_as_call_tool_does() -> None:
    """G15, G59: ``before_tool`` refuses over the ceiling and pauses over
    the threshold; nothing is dispatched."""
    agent = build(framework_model("fw"))
    big = call("c1", "refund", order_id="7", amount=20_000)
    mid = call("c2", "refund", order_id="7", amount=800)
    turn = await _proposed(Steering(agent), big, mid)
    assert isinstance(await turn.before_tool(big, refund), Refused)
    assert isinstance(await turn.before_tool(mid, refund), AskPause)
    types = [r.decode().type for r in await agent.store.read("s1")]
    assert 0 == types.count("tool.dispatched")


async def test_turn_reattaches_to_an_open_turn() -> None:
    """Issue 27: ``turn(session_id)`` re-attaches (a restart: a new agent on
    the same store) and the turn goes on to its answer."""
    store = MemoryEventStore()
    c1 = call("c1", "lookup_order", order_id="7")
    turn = await _proposed(Steering(build(framework_model("fw"), store)), c1)
    again = await Steering(build(framework_model("fw"), store)).turn("s1")
    assert turn.admitted == again.admitted
    assert isinstance(await again.call_tool(c1, lookup_order), Ran)
    await again.model_request()
    await again.model_reply("Done.")
    assert "Done." == await again.finish("Done.")
    with pytest.raises(SteeringError) as caught:
        await again.model_request()
    assert "no-open-turn" == caught.value.reason


# -- verify, replay, what-if on a steered session ------------------------------


# -- bad input -------------------------------------------------------------------


async def test_open_turn_with_a_non_str_names_the_problem() -> None:
    """Bad input: the message must be a str; nothing is recorded."""
    agent = build(framework_model("fw"))
    with pytest.raises(TypeError, match="open_turn\\(\\) takes the message as a str"):
        await Steering(agent).open_turn(42, session_id="s1")  # type: ignore[arg-type]
    assert [] == await agent.store.read("s1")


async def test_call_tool_with_no_open_turn_is_a_typed_error() -> None:
    """Bad input: a session with no open turn (none, or one that ended)."""
    agent = build(framework_model("fw"))
    steering = Steering(agent)
    c1 = call("c1", "lookup_order", order_id="7")
    with pytest.raises(SteeringError) as caught:
        await SteeredTurn(steering, "nowhere", "").call_tool(c1, lookup_order)
    assert ("no-open-turn", "ERR_STEERING") == (caught.value.reason, caught.value.code)


async def test_call_tool_for_a_call_the_model_did_not_propose() -> None:
    """Bad input: a call id the reply did not hold; nothing is appended."""
    agent = build(framework_model("fw"))
    turn = await _proposed(Steering(agent), call("c1", "lookup_order", order_id="7"))
    length = len(await agent.store.read("s1"))
    with pytest.raises(SteeringError) as caught:
        await turn.call_tool(call("c9", "lookup_order", order_id="7"), lookup_order)
    assert ("unknown-call", "c9") == (caught.value.reason, caught.value.tool_call_id)
    assert length == len(await agent.store.read("s1"))


async def test_resume_tool_with_a_non_decision_is_decision_required() -> None:
    """G61: a consent gate takes a ``CheckInDecision``; nothing is appended."""
    agent = build(framework_model("fw"))
    c2 = call("c2", "refund", order_id="7", amount=800)
    turn = await _proposed(Steering(agent), c2)
    pause = await turn.call_tool(c2, refund)
    assert isinstance(pause, AskPause)
    length = len(await agent.store.read("s1"))
    with pytest.raises(DecisionRequiredError) as caught:
        await turn.resume_tool(pause.checkpoint, "yes", refund)
    assert "str" in caught.value.received
    assert length == len(await agent.store.read("s1"))


async def test_a_tool_of_another_name_is_refused() -> None:
    """Bad input: the tool given is not the call's."""
    agent = build(framework_model("fw"))
    c1 = call("c1", "lookup_order", order_id="7")
    turn = await _proposed(Steering(agent), c1)
    with pytest.raises(SteeringError, match="not to the tool given"):
        await turn.call_tool(c1, refund)
    with pytest.raises(TypeError, match="ToolCallRequest"):
        await turn.call_tool({"id": "c1"}, lookup_order)  # type: ignore[arg-type]


async def test_model_request_with_calls_outstanding_is_refused() -> None:
    """G66: no proposed call is dropped: the model is not called again
    before every call of its reply has an outcome."""
    agent = build(framework_model("fw"))
    turn = await _proposed(Steering(agent), call("c1", "lookup_order", order_id="7"))
    with pytest.raises(SteeringError, match="c1"):
        await turn.model_request()


async def test_fail_records_error_fatal_as_the_native_loop_does() -> None:
    """G66, G91: a framework run that raised is ``error.fatal``; its calls
    without an outcome get the native loop's "not run" message."""
    agent = build(framework_model("fw"))
    turn = await _proposed(Steering(agent), call("c1", "lookup_order", order_id="7"))
    await turn.fail(RuntimeError("the framework broke"))
    state = fold(r.decode() for r in await agent.store.read("s1"))
    types = [r.decode().type for r in await agent.store.read("s1")]
    assert "error.fatal" == types[-1]
    assert "tool" == state.history[-1].role
    await turn.fail(RuntimeError("again"))  # the turn is over: nothing more
    assert len(types) == len(await agent.store.read("s1"))


def test_steering_takes_an_agent() -> None:
    """Bad input: ``Steering`` takes a built ``Agent``."""
    with pytest.raises(TypeError, match="built Agent"):
        Steering(object())  # type: ignore[arg-type]


def test_framework_model_needs_a_name() -> None:
    """Bad input: ``framework_model`` names its provider."""
    with pytest.raises(ValueError, match="provider's name"):
        framework_model("")


_ = Tool


def test_an_agent_with_an_output_type_is_not_steered() -> None:
    """Bad input: the framework parses its own output (``"unsupported"``)."""
    import msgspec

    class Answer(msgspec.Struct):
        text: str

    agent = Agent.create(
        provider=framework_model("fw"), model="m", output_type=Answer
    ).build()
    with pytest.raises(SteeringError, match=r"^an agent with an output_type") as caught:
        Steering(agent)
    assert "unsupported" == caught.value.reason


async def test_after_tool_for_a_call_not_admitted_is_refused() -> None:
    """Bad input: ``after_tool`` for a call ``before_tool`` paused (or never
    saw) names the problem; nothing is appended."""
    agent = build(framework_model("fw"))
    mid = call("c2", "refund", order_id="7", amount=800)
    turn = await _proposed(Steering(agent), mid)
    assert isinstance(await turn.before_tool(mid, refund), AskPause)
    length = len(await agent.store.read("s1"))
    with pytest.raises(SteeringError) as caught:
        await turn.after_tool(mid, refund, "refunded")
    assert ("not-admitted", "c2") == (caught.value.reason, caught.value.tool_call_id)
    assert length == len(await agent.store.read("s1"))


async def test_history_survives_eviction_and_reactivation_follows_the_stream() -> None:
    """R6, R21 and issue 27 (a step keeps the fold by reference, not a copy):
    a handle whose session was dropped between steps reads the history of its
    last step; its next step re-activates the session from the stream, and a
    step taken through another handle meanwhile is in what it reads."""
    agent = build(framework_model("fw"))
    steering = Steering(agent)
    turn = await _proposed(steering, call("c1", "lookup_order", order_id="7"))
    await turn.call_tool(call("c1", "lookup_order", order_id="7"), lookup_order)
    seen = turn.history
    assert [m.role for m in seen] == ["user", "assistant", "tool"]
    assert agent.forget("s1") is True
    assert agent.resident_count == 0
    assert turn.history == seen  # the last step's fold, though dropped
    other = await steering.turn("s1")  # re-activated from the stream
    await other.model_request()
    await other.model_reply("Order 7 is paid.")
    await other.finish("Order 7 is paid.")
    assert [m.role for m in turn.history] == ["user", "assistant", "tool", "assistant"]
    stored = fold([r.decode() for r in await agent.store.read("s1")])
    assert turn.history == tuple(stored.history)


async def test_a_step_folds_what_another_writer_appended_since_the_last() -> None:
    """Issue 27 (a step's catch-up), R1, R2: two agents on one memory store
    (two hosts' views) take turns on one steered session; each step folds
    what the other appended since its own last step, though a step skips
    the read when the store's head is still its own; a journal with a
    stale head then appends after the other's records, never over them."""
    RUNS.clear()
    store = MemoryEventStore()
    one = Steering(build(framework_model("fw"), store))
    two = Steering(build(framework_model("fw"), store))
    c1 = call("c1", "lookup_order", order_id="7")
    first = await _proposed(one, c1)  # opened and the reply recorded by one
    second = await two.turn("s1")
    ran = await second.call_tool(c1, lookup_order)  # two runs the call
    again = await first.call_tool(c1, lookup_order)  # one reads it back
    assert isinstance(ran, Ran)
    assert (Ran, ran.text) == (type(again), getattr(again, "text", None))
    await first.model_request()  # one appends after two's records
    await first.model_reply("Order 7 is paid.")
    answer = await second.finish("Order 7 is paid.")  # two folds them
    assert "Order 7 is paid." == answer
    assert {"lookup_order": 1} == RUNS  # the tool ran once
    events = [r.decode() for r in await store.read("s1")]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert ["user", "assistant", "tool", "assistant"] == [
        m.role for m in fold(events).history
    ]
    assert second.history == tuple(fold(events).history)
