"""Input admission and continued turns: what the model may ever see of a message.

Pattern: behavioural tests over a scripted provider: each test builds an agent,
         runs it, and compares what the model was sent (``model.requests``),
         the rows, the delivered events and the stored stream with what the
         law says.
Role:    unit tests for ``helmlog.Agent.run``/``follow_up`` at the input moment.
Emits:   nothing.

Laws: G33 (input runs before anything is committed), G34 (continued turns
append the rewrite), G35 (an input refusal never reaches the model), G36 (a
refused input is not a conversation), G37 (``MessageDeniedError``), G38
(``NoConversationError``).

Why the stored stream is read too: "only the row's ``before`` keeps the
original" is a claim about every record, so the test reads every record.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    Checkpoint,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    NoConversationError,
    allow,
    ask,
    deny,
)
from helmlog.events import MemoryEventStore, encode_event
from helmlog.runtime.providers import scripted
from helmlog.runtime.testing import counter_ids

RAW = "my ssn is 123-45-6789"
SCRUBBED = "my ssn is [ssn]"


def scrub_rule(msg: Any) -> Any:
    if "123-45-6789" in msg.content:
        return allow(msg.content.replace("123-45-6789", "[ssn]"), "ssn")
    return allow()


scrub = MessageMiddleware(name="scrub", on_message=scrub_rule)


def build(model: Any, *links: Any, store: MemoryEventStore | None = None) -> Agent:
    builder = Agent.create(
        provider=model, model="m", ids=counter_ids(), store=store or MemoryEventStore()
    ).system("You help.")
    if links:
        builder = builder.message_middleware(*links)
    return builder.build()


class Tape:
    """Every event delivered to listeners, in order."""

    def __init__(self, agent: Agent) -> None:
        self.events: list[Any] = []
        agent.on("*", self.events.append)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def encoded(event: Any) -> str:
    return msgspec.json.encode(event).decode()


# -- G33 ----------------------------------------------------------------------


async def test_g33_input_rewrite_is_what_the_model_history_and_checkpoint_hold() -> (
    None
):
    """G33: the first request, history and original_input hold the chain's output."""
    model = scripted(["ok"])
    agent = build(model, scrub)
    await agent.run(RAW)
    cp = agent.checkpoint()
    assert cp is not None
    assert (Message(role="user", content=SCRUBBED),) == model.requests[0].messages
    assert Message(role="user", content=SCRUBBED) == agent.last_snapshot().history[0]
    assert SCRUBBED == cp.original_input
    assert Message(role="user", content=SCRUBBED) == cp.history[0]


async def test_g33_only_the_rows_before_keeps_the_original() -> None:
    """G33: of every record and delivered event, only the row's before holds the raw."""
    store = MemoryEventStore()
    model = scripted(["ok"])
    agent = build(model, scrub, store=store)
    tape = Tape(agent)
    await agent.run(RAW)
    rows = agent.last_snapshot().middleware_decisions
    assert [(RAW, SCRUBBED)] == [(r.before, r.after) for r in rows if r.changed]
    records = await store.read(agent.session_id or "")
    holders = [r.decode().type for r in records if b"123-45-6789" in r.data]
    assert ["decision.filed"] == holders
    assert [] == [e.type for e in tape.events if "123-45-6789" in encoded(e)]


async def test_g33_input_chain_runs_before_anything_is_committed() -> None:
    """G33: when the input link runs, the session stream is still empty."""
    store = MemoryEventStore()
    seen: list[list[str]] = []

    async def look(msg: Any) -> Any:
        if msg.phase == "input":
            seen.append(await store.sessions())
        return allow()

    agent = build(
        scripted(["ok"]), MessageMiddleware(name="look", on_message=look), store=store
    )
    tape = Tape(agent)
    await agent.run("hello")
    assert [[]] == seen
    first_turn_start = tape.types().index("agent.turn_start")
    assert "middleware.decision" == tape.types()[first_turn_start - 1]
    assert "input" == tape.events[first_turn_start - 1].moment


# -- G34 ----------------------------------------------------------------------


async def test_g34_follow_up_sends_checkpoint_history_plus_the_admitted_text() -> None:
    """G34: a continued turn sends checkpoint.history + the admitted user message."""
    model = scripted(["first", "second"])
    agent = build(model, scrub)
    tape = Tape(agent)
    await agent.run("hello")
    cp = agent.checkpoint()
    assert cp is not None
    turn_two_from = len(tape.events)
    await agent.follow_up(RAW)
    assert (*cp.history, Message(role="user", content=SCRUBBED)) == model.requests[
        1
    ].messages
    cp2 = agent.checkpoint()
    assert cp2 is not None
    assert SCRUBBED == cp2.original_input
    turn_two = tape.events[turn_two_from:]
    assert [] == [e.type for e in turn_two if "123-45-6789" in encoded(e)]
    assert all("123-45-6789" not in encoded(r) for r in model.requests[1].messages)


async def test_g34_follow_up_is_run_with_continue_from_checkpoint() -> None:
    """G34: follow_up(m) and run(m, continue_from=checkpoint()) are the same."""
    outcomes = []
    for use_follow_up in (True, False):
        model = scripted(["first", "second"])
        agent = build(model, scrub)
        await agent.run("hello")
        if use_follow_up:
            answer = await agent.follow_up(RAW)
        else:
            answer = await agent.run(RAW, continue_from=agent.checkpoint())
        outcomes.append(
            (
                answer,
                model.requests,
                agent.last_snapshot().middleware_decisions,
                agent.last_snapshot().history,
            )
        )
    assert outcomes[0] == outcomes[1]


async def test_g34_continued_turn_input_link_sees_empty_history() -> None:
    """G34/G28: a continued turn's input link sees history () and the raw text."""
    seen: list[tuple[Any, str]] = []

    def look(msg: Any) -> Any:
        if msg.phase == "input":
            seen.append((msg.history, msg.content))
        return allow()

    agent = build(scripted(["a", "b"]), MessageMiddleware(name="look", on_message=look))
    await agent.run("one")
    await agent.follow_up("two")
    assert [((), "one"), ((), "two")] == seen


async def test_g34_without_a_message_chain_continued_turn_appends_unchanged() -> None:
    """G34: with no message chain a continued turn appends m unchanged."""
    model = scripted(["first", "second"])
    agent = build(model)
    await agent.run("hello")
    cp = agent.checkpoint()
    assert cp is not None
    await agent.follow_up(RAW)
    assert (*cp.history, Message(role="user", content=RAW)) == model.requests[
        1
    ].messages
    cp2 = agent.checkpoint()
    assert cp2 is not None
    assert RAW == cp2.original_input


# -- G35 ----------------------------------------------------------------------


def _thrower(msg: Any) -> Any:
    raise RuntimeError("scanner offline")


REFUSALS = {
    "deny": (
        lambda m: deny("no secrets") if m.phase == "input" else allow(),
        "no secrets",
    ),
    "throw": (_thrower, "middleware 'gate' threw: scanner offline"),
    "ask": (
        lambda m: ask("ok to send?"),
        "middleware 'gate' asked a person to decide about the input message, and there "
        "is no pause at the message boundary to carry that ask: ok to send?. Ask at a "
        "tool moment (on_tool_call), where a pause exists, or decide here with "
        "allow()/deny().",
    ),
    "non-text": (
        lambda m: allow({"text": m.content}, "structured"),
        "middleware 'gate' returned allow(a dict) at the input message boundary, and a "
        "message is text. Return allow(some_string, why) to rewrite it, allow() to "
        "pass "
        "it through unchanged, or deny(reason) to refuse it.",
    ),
}


@pytest.mark.parametrize("form", list(REFUSALS))
async def test_g35_input_refusal_reaches_no_model_and_starts_no_turn(form: str) -> None:
    """G35: an input refusal raises, calls no model, commits nothing, starts no turn."""
    hook, reason = REFUSALS[form]
    model = scripted(["never"])
    agent = build(model, MessageMiddleware(name="gate", on_message=hook))
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run(RAW)
    assert ("input", "gate", reason) == (
        caught.value.phase,
        caught.value.middleware,
        caught.value.reason,
    )
    assert [] == model.requests
    assert () == agent.last_snapshot().history
    assert ["middleware.decision", "error.fatal"] == tape.types()
    fatal = tape.of("error.fatal")[0]
    assert (
        "ERR_MESSAGE_DENIED",
        "input",
        "gate",
    ) == (fatal.code, fatal.phase, fatal.middleware)
    rows = agent.last_snapshot().middleware_decisions
    assert [("gate", "input", "deny", False, reason)] == [
        (r.middleware, r.moment, r.outcome, r.changed, r.why) for r in rows
    ]


async def test_g35_rewrite_then_deny_records_both_rows() -> None:
    """G35: a rewrite followed by a deny files both rows, then one error.fatal."""
    model = scripted(["never"])
    guard = MessageMiddleware(
        name="guard",
        on_message=lambda m: deny("still sensitive") if "ssn" in m.content else allow(),
    )
    agent = build(model, scrub, guard)
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError):
        await agent.run(RAW)
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("scrub", "allow", True),
        ("guard", "deny", False),
    ] == [(r.middleware, r.outcome, r.changed) for r in rows]
    assert ["middleware.decision", "middleware.decision", "error.fatal"] == tape.types()
    assert [] == model.requests


async def test_g35_refused_continued_turn_commits_nothing() -> None:
    """G35: a refused follow-up sends nothing and leaves the history alone."""
    model = scripted(["first", "never"])
    gate = MessageMiddleware(
        name="gate",
        on_message=lambda m: deny("no") if "forbidden" in m.content else allow(),
    )
    agent = build(model, gate)
    await agent.run("hello")
    cp = agent.checkpoint()
    assert cp is not None
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError):
        await agent.follow_up("forbidden words")
    assert 1 == len(model.requests)
    assert cp.history == agent.last_snapshot().history
    assert ["middleware.decision", "error.fatal"] == tape.types()


# -- G36 ----------------------------------------------------------------------


def _gate() -> MessageMiddleware:
    return MessageMiddleware(
        name="gate",
        on_message=lambda m: deny("no") if "forbidden" in m.content else allow(),
    )


async def test_g36_after_a_refused_input_checkpoint_is_none() -> None:
    """G36: after an input refusal agent.checkpoint() returns None."""
    agent = build(scripted(["first"]), _gate())
    await agent.run("hello")
    assert agent.checkpoint() is not None
    with pytest.raises(MessageDeniedError):
        await agent.follow_up("forbidden")
    assert agent.checkpoint() is None


async def test_g36_follow_up_after_refusal_raises_last_input_refused() -> None:
    """G36: follow_up after a refusal raises last-input-refused naming the way on."""
    agent = build(scripted(["first"]), _gate())
    await agent.run("hello")
    with pytest.raises(MessageDeniedError):
        await agent.run("forbidden")
    with pytest.raises(NoConversationError) as caught:
        await agent.follow_up("again")
    assert "last-input-refused" == caught.value.reason
    text = str(caught.value)
    assert "input middleware refused the last message" in text
    assert "run(message, continue_from=...)" in text
    assert "earlier accepted checkpoint" in text


async def test_g36_refusal_without_an_earlier_admission_is_never_run() -> None:
    """G36: a refusal with no earlier admission is never-run, naming no checkpoint."""
    agent = build(scripted(["never"]), _gate())
    with pytest.raises(MessageDeniedError):
        await agent.run("forbidden")
    with pytest.raises(NoConversationError) as caught:
        await agent.follow_up("again")
    assert "never-run" == caught.value.reason
    assert "checkpoint" not in str(caught.value)
    assert "continue_from" not in str(caught.value)


async def test_g36_earlier_checkpoint_still_continues_without_the_refused_text() -> (
    None
):
    """G36: the earlier checkpoint sends its history + the new message only."""
    model = scripted(["first", "third"])
    agent = build(model, _gate(), scrub)
    await agent.run("hello")
    cp = agent.checkpoint()
    assert cp is not None
    with pytest.raises(MessageDeniedError):
        await agent.follow_up("forbidden secret plan")
    answer = await agent.run(RAW, continue_from=cp)
    assert "third" == answer
    assert (*cp.history, Message(role="user", content=SCRUBBED)) == model.requests[
        1
    ].messages
    assert all(
        "forbidden" not in encoded(m) for r in model.requests for m in r.messages
    )
    assert agent.checkpoint() is not None


async def test_g36_earlier_checkpoint_from_json_still_continues() -> None:
    """G36: the earlier checkpoint, kept as JSON, still continues after a refusal."""
    model = scripted(["first", "third"])
    agent = build(model, _gate())
    await agent.run("hello")
    cp = agent.checkpoint()
    assert cp is not None
    kept = cp.to_json()
    with pytest.raises(MessageDeniedError):
        await agent.run("forbidden", continue_from=cp)
    assert "third" == await agent.run("next", continue_from=Checkpoint.from_json(kept))
    assert (*cp.history, Message(role="user", content="next")) == model.requests[
        1
    ].messages


# -- G37 ----------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["input", "output"])
async def test_g37_message_denied_error_attributes_and_text(phase: str) -> None:
    """G37: reason, phase, middleware, code and str(e) exactly; raised unwrapped."""
    secret = "codename BLUEBIRD"
    gate = MessageMiddleware(
        name="leak-check",
        on_message=lambda m: (
            deny("mentions a codename")
            if m.phase == phase and "BLUEBIRD" in m.content
            else allow()
        ),
    )
    model = scripted([f"the {secret} is ready"])
    agent = build(model, gate)
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run(f"tell me about {secret}" if phase == "input" else "status?")
    e = caught.value
    assert MessageDeniedError is type(e)
    assert ("mentions a codename", phase, "leak-check", "ERR_MESSAGE_DENIED") == (
        e.reason,
        e.phase,
        e.middleware,
        e.code,
    )
    assert f"Message denied at '{phase}' by 'leak-check': mentions a codename" == str(e)
    assert e.__cause__ is None
    carried = [repr(vars(e)), repr(e.args), str(e)]
    link: BaseException | None = e.__context__
    while link is not None:
        carried.append(repr(link.args))
        link = link.__context__
    assert [] == [c for c in carried if "BLUEBIRD" in c]


# -- G38 ----------------------------------------------------------------------


async def test_g38_no_conversation_error_never_run_on_a_fresh_agent() -> None:
    """G38: follow_up on an agent that never ran raises never-run with its code."""
    agent = build(scripted(["never"]))
    with pytest.raises(NoConversationError) as caught:
        await agent.follow_up("hi")
    assert (
        "never-run",
        "ERR_NO_CONVERSATION",
    ) == (caught.value.reason, caught.value.code)


async def test_g38_a_fresh_run_never_raises_no_conversation() -> None:
    """G38: after a refusal, and while a pause is pending, run(m) still starts fresh."""
    model = scripted(["fresh one", "fresh two"])
    agent = build(model, _gate())
    with pytest.raises(MessageDeniedError):
        await agent.run("forbidden")
    assert "fresh one" == await agent.run("hello")
    with pytest.raises(MessageDeniedError):
        await agent.follow_up("forbidden")
    assert "fresh two" == await agent.run("hello again")
    assert (Message(role="user", content="hello again"),) == model.requests[1].messages


async def test_g38_stored_stream_of_a_refused_input_has_no_turn() -> None:
    """G35/G38: the stream of a refused input holds its rows and error.fatal only."""
    store = MemoryEventStore()
    agent = build(scripted(["never"]), _gate(), store=store)
    with pytest.raises(MessageDeniedError):
        await agent.run("forbidden")
    records = await store.read(agent.session_id or "")
    assert [
        "decision.filed",
        "error.fatal",
    ] == [r.decode().type for r in records]
    assert all(
        b"forbidden" not in encode_event(r.decode())
        for r in records
        if r.decode().type != "decision.filed"
    )
