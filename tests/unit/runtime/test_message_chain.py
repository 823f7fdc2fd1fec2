"""G.5 — the message chain: one list walked at input and again at output.

Pattern: law-named unit tests on whole runs with the scripted provider; each
         message link records the context it was handed.
Role:    unit tests for ``walk_messages`` in ``runtime/_chain.py`` as the
         agent (input) and the loop (output) drive it.
Emits:   nothing.

Laws: G26 (one list, two phases; phase-restricted links pass through at the
other phase), G27 (message rows), G28 (the message context), G29 (a denial
stops the walk and raises), G30 (no ask at the message boundary), G31 (a
message is text), G32 (a string rewrite).

Why rows are compared encoded: G45's "absent fields are omitted" is part of
what a message row is, so the tests read the row the way a store holds it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    AgentBuilder,
    Allow,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    allow,
    ask,
    deny,
    tool,
)
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} shipped"


def tool_round(answer: str = "It shipped.") -> ScriptedProvider:
    call = ToolCallRequest(id="c1", name="lookup", args={"order": 7})
    return scripted([Reply(tool_calls=[call]), answer])


def builder(model: ScriptedProvider) -> AgentBuilder:
    return Agent.create(provider=model, model="m", ids=counter_ids()).tool(lookup)


def ledger(agent: Agent) -> list[dict[str, Any]]:
    return [
        msgspec.json.decode(msgspec.json.encode(r))
        for r in agent.last_snapshot().middleware_decisions
    ]


def recording(name: str, seen: list[tuple[str, str, str]], verdict: Any = None) -> Any:
    """A message link recording (name, phase, content) and returning ``verdict``."""

    def hook(msg: Any) -> Any:
        seen.append((name, msg.phase, msg.content))
        return allow() if verdict is None else verdict

    return MessageMiddleware(name=name, on_message=hook)


# -- G26 --------------------------------------------------------------------


async def test_g26_every_link_runs_at_both_phases_in_order() -> None:
    """G26: the chain is walked in declaration order at input and at output."""
    seen: list[tuple[str, str, str]] = []
    agent = (
        builder(tool_round())
        .message_middleware(recording("a", seen), recording("b", seen))
        .message_middleware(recording("c", seen))
        .build()
    )
    assert "It shipped." == await agent.run("where is order 7?")
    assert [
        ("a", "input", "where is order 7?"),
        ("b", "input", "where is order 7?"),
        ("c", "input", "where is order 7?"),
        ("a", "output", "It shipped."),
        ("b", "output", "It shipped."),
        ("c", "output", "It shipped."),
    ] == seen
    assert [
        ("a", "input"),
        ("b", "input"),
        ("c", "input"),
        ("a", "output"),
        ("b", "output"),
        ("c", "output"),
    ] == [(r["middleware"], r["moment"]) for r in ledger(agent)]


async def test_g26_a_phase_restricted_link_files_a_pass_through_at_the_other() -> None:
    """G26 (seed 004): an .act() phase-restricted link is not called at the
    other phase, and files a pass-through row there."""
    seen: list[tuple[str, str, str]] = []
    agent = (
        builder(tool_round())
        .message_middleware(recording("both", seen))
        .act(input=[recording("in-only", seen)], output=[recording("out-only", seen)])
        .build()
    )
    await agent.run("hello")
    assert [
        ("both", "input", "hello"),
        ("in-only", "input", "hello"),
        ("both", "output", "It shipped."),
        ("out-only", "output", "It shipped."),
    ] == seen
    assert [
        ("both", "input", "allow", False),
        ("in-only", "input", "allow", False),
        ("out-only", "input", "allow", False),
        ("both", "output", "allow", False),
        ("in-only", "output", "allow", False),
        ("out-only", "output", "allow", False),
    ] == [
        (r["middleware"], r["moment"], r["outcome"], r["changed"])
        for r in ledger(agent)
    ]


# -- G27 --------------------------------------------------------------------


async def test_g27_message_rows_after_one_tool_round() -> None:
    """G27: moment=phase, at=message, no tool fields; iteration 0 then 2."""
    agent = builder(tool_round()).message_middleware(recording("m", [])).build()
    await agent.run("hello")
    common = {"middleware": "m", "at": "message", "outcome": "allow", "changed": False}
    assert [
        {**common, "moment": "input", "phase": "input", "iteration": 0},
        {**common, "moment": "output", "phase": "output", "iteration": 2},
    ] == [r for r in ledger(agent) if r["at"] == "message"]
    rows = agent.last_snapshot().middleware_decisions
    assert [(None, None), (None, None)] == [(r.tool_name, r.tool_call_id) for r in rows]


async def test_g27_output_row_of_a_single_call_has_iteration_one() -> None:
    """G27: with one model call the output row carries iteration 1."""
    agent = builder(scripted(["Hi."])).message_middleware(recording("m", [])).build()
    await agent.run("hello")
    assert [("input", 0), ("output", 1)] == [
        (r["phase"], r["iteration"]) for r in ledger(agent)
    ]


# -- G28 --------------------------------------------------------------------


async def test_g28_message_context_history_and_identity() -> None:
    """G28: history is () at input and the committed history at output."""
    contexts: list[Any] = []

    def keep(msg: Any) -> Allow:
        contexts.append(msg)
        return allow()

    agent = (
        builder(tool_round())
        .message_middleware(MessageMiddleware(name="keep", on_message=keep))
        .build()
    )
    await agent.run("where is order 7?")
    user = Message(role="user", content="where is order 7?")
    assistant = Message(
        role="assistant",
        content="",
        tool_calls=(ToolCallRequest(id="c1", name="lookup", args={"order": 7}),),
    )
    result = Message(
        role="tool", content="order 7 shipped", tool_call_id="c1", tool_name="lookup"
    )
    inbound, outbound = contexts
    assert ("input", "where is order 7?", ()) == (
        inbound.phase,
        inbound.content,
        inbound.history,
    )
    assert ("output", "It shipped.", (user, assistant, result)) == (
        outbound.phase,
        outbound.content,
        outbound.history,
    )
    assert [{"session_id": "session-1"}] * 2 == [dict(c.identity) for c in contexts]


async def test_g28_input_history_is_empty_on_a_continued_turn() -> None:
    """G28: a continued turn's input context still has history ()."""
    contexts: list[Any] = []

    def keep(msg: Any) -> Allow:
        contexts.append(msg)
        return allow()

    agent = (
        builder(scripted(["One.", "Two."]))
        .message_middleware(MessageMiddleware(name="keep", on_message=keep))
        .build()
    )
    await agent.run("first", identity={"user": "dana"})
    await agent.follow_up("second")
    assert [
        ("input", "first", 0),
        ("output", "One.", 1),
        ("input", "second", 0),
        ("output", "Two.", 3),
    ] == [(c.phase, c.content, len(c.history)) for c in contexts]
    assert {"user": "dana"} == dict(contexts[0].identity)


async def test_g28_content_is_as_the_previous_link_left_it() -> None:
    """G28: each link sees the content the link before it produced."""
    seen: list[tuple[str, str, str]] = []
    upper = MessageMiddleware(
        name="upper", on_message=lambda m: allow(m.content.upper(), "up")
    )
    agent = (
        builder(scripted(["quiet answer"]))
        .message_middleware(upper, recording("after", seen))
        .build()
    )
    assert "QUIET ANSWER" == await agent.run("quiet question")
    assert [
        ("after", "input", "QUIET QUESTION"),
        ("after", "output", "QUIET ANSWER"),
    ] == seen


# -- G29 --------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["input", "output"])
async def test_g29_a_denial_stops_the_walk_and_raises(phase: str) -> None:
    """G29: a deny files its row, stops the walk and raises MessageDeniedError."""
    seen: list[tuple[str, str, str]] = []

    def gate(msg: Any) -> Any:
        return deny("off-topic") if msg.phase == phase else allow()

    agent = (
        builder(tool_round())
        .message_middleware(
            MessageMiddleware(name="gate", on_message=gate), recording("later", seen)
        )
        .build()
    )
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("hello")
    assert (phase, "gate", "off-topic") == (
        caught.value.phase,
        caught.value.middleware,
        caught.value.reason,
    )
    assert [] == [s for s in seen if s[1] == phase]
    assert {
        "middleware": "gate",
        "moment": phase,
        "at": "message",
        "phase": phase,
        "iteration": 0 if phase == "input" else 2,
        "outcome": "deny",
        "changed": False,
        "why": "off-topic",
    } == ledger(agent)[-1]


@pytest.mark.parametrize(
    ("hook", "reason"),
    [
        (lambda m: 1 / 0, "middleware 'odd' threw: division by zero"),
        (
            lambda m: "fine",
            "middleware 'odd' returned a str, which is not allow(), deny() or ask()",
        ),
    ],
)
async def test_g29_a_throw_or_malfunction_refuses_the_message(
    hook: Any, reason: str
) -> None:
    """G29: a throw or malfunction refuses the message with G6/G7's reason."""
    agent = (
        builder(tool_round())
        .message_middleware(MessageMiddleware(name="odd", on_message=hook))
        .build()
    )
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("hello")
    assert ("input", reason) == (caught.value.phase, caught.value.reason)
    assert [("deny", False, reason)] == [
        (r["outcome"], r["changed"], r["why"]) for r in ledger(agent)
    ]


# -- G30 --------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["input", "output"])
async def test_g30_an_ask_is_a_denial_at_the_message_boundary(phase: str) -> None:
    """G30: an Ask from on_message is a denial with the exact reason."""

    def asker(msg: Any) -> Any:
        return ask("is this ok?") if msg.phase == phase else allow()

    agent = (
        builder(tool_round())
        .message_middleware(MessageMiddleware(name="asker", on_message=asker))
        .build()
    )
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("hello")
    reason = (
        f"middleware 'asker' asked a person to decide about the {phase} message, and "
        "there is no pause at the message boundary to carry that ask: is this ok?. "
        "Ask at a tool moment (on_tool_call), where a pause exists, or decide here "
        "with allow()/deny()."
    )
    assert (phase, reason) == (caught.value.phase, caught.value.reason)
    assert ("deny", False, reason) == (
        ledger(agent)[-1]["outcome"],
        ledger(agent)[-1]["changed"],
        ledger(agent)[-1]["why"],
    )
    assert "ask" not in [r["outcome"] for r in ledger(agent)]


# -- G31 --------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["input", "output"])
@pytest.mark.parametrize(
    ("value", "shaped"), [({"text": "hi"}, "a dict"), (0, "an int"), (["hi"], "a list")]
)
async def test_g31_a_non_text_rewrite_is_a_denial(
    phase: str, value: Any, shaped: str
) -> None:
    """G31: allow(non-str, why) at a message moment is a denial with the reason."""

    def rewriter(msg: Any) -> Any:
        return allow(value, "restructure") if msg.phase == phase else allow()

    agent = (
        builder(tool_round())
        .message_middleware(MessageMiddleware(name="rw", on_message=rewriter))
        .build()
    )
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("hello")
    reason = (
        f"middleware 'rw' returned allow({shaped}) at the {phase} message boundary, "
        "and a message is text. Return allow(some_string, why) to rewrite it, allow() "
        "to pass it through unchanged, or deny(reason) to refuse it."
    )
    assert (phase, reason) == (caught.value.phase, caught.value.reason)
    assert {"outcome": "deny", "changed": False, "why": reason} == {
        k: ledger(agent)[-1][k] for k in ("outcome", "changed", "why")
    }


async def test_g31_empty_string_is_a_valid_rewrite() -> None:
    """G31: allow("", why) rewrites a message to the empty string."""
    seen: list[tuple[str, str, str]] = []
    blank = MessageMiddleware(name="blank", on_message=lambda m: allow("", "blank it"))
    model = scripted(["secret answer"])
    agent = builder(model).message_middleware(blank, recording("after", seen)).build()
    assert "" == await agent.run("secret question")
    assert [("after", "input", ""), ("after", "output", "")] == seen
    assert (Message(role="user", content=""),) == model.requests[0].messages


# -- G32 --------------------------------------------------------------------


async def test_g32_a_string_rewrite_files_before_and_after() -> None:
    """G32: a rewrite row is changed=True with both strings; later links see it."""
    seen: list[tuple[str, str, str]] = []
    scrub = MessageMiddleware(
        name="scrub",
        on_message=lambda m: (
            allow(m.content.replace("123-45-6789", "[ssn]"), "ssn")
            if "123-45-6789" in m.content
            else allow()
        ),
    )
    model = scripted(["Noted 123-45-6789."])
    agent = builder(model).message_middleware(scrub, recording("after", seen)).build()
    assert "Noted [ssn]." == await agent.run("my ssn is 123-45-6789")
    assert [
        ("after", "input", "my ssn is [ssn]"),
        ("after", "output", "Noted [ssn]."),
    ] == seen
    scrub_rows = [r for r in ledger(agent) if r["middleware"] == "scrub"]
    assert [
        ("input", True, "ssn", "my ssn is 123-45-6789", "my ssn is [ssn]"),
        ("output", True, "ssn", "Noted 123-45-6789.", "Noted [ssn]."),
    ] == [
        (r["phase"], r["changed"], r["why"], r["before"], r["after"])
        for r in scrub_rows
    ]
    assert (Message(role="user", content="my ssn is [ssn]"),) == model.requests[
        0
    ].messages
