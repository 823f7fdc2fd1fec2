"""Output admission: drafts are held, one token is released, a refusal releases nothing.

Pattern: behavioural tests over a scripted provider (streaming and complete-only)
         with a listener taping every delivered event in order.
Role:    unit tests for the output moment of ``helmlog.Agent``.
Emits:   nothing.

Laws: G39 (where output runs; its verdict is the answer everywhere), G40
(which agents are output-governed), G41 (drafts are held for the whole run),
G42 (acceptance releases exactly one token), G43 (an output refusal releases
nothing and is raised directly, with one content-free ``error.fatal``).

Why the draft is a distinctive word: "no event, row or error carries the
draft" is checked by searching every delivered event and stored record for it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

DRAFT = "the PELICAN protocol is live"


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} is shipped"


def call(cid: str = "c1", order: int = 7) -> ToolCallRequest:
    return ToolCallRequest(id=cid, name="lookup", args={"order": order})


def tool_round(content: str = "checking ") -> Reply:
    return Reply(content=content, tool_calls=[call()], usage={"input_tokens": 3})


def final(text: str = DRAFT) -> Reply:
    return Reply(content=text, usage={"input_tokens": 5, "output_tokens": 4})


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def build(model: Any, store: MemoryEventStore | None = None) -> Any:
    return (
        Agent.create(
            provider=model,
            model="m",
            ids=counter_ids(),
            clock=lambda: 1000,
            traces=lambda: TRACEPARENT,
            store=store or MemoryEventStore(),
        )
        .system("You help.")
        .tool(lookup)
    )


class Tape:
    """Every delivered event, in order."""

    def __init__(self, agent: Any) -> None:
        self.events: list[Any] = []
        agent.on("*", self.events.append)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def encoded(event: Any) -> str:
    return msgspec.json.encode(event).decode()


def pelican_guard(msg: Any) -> Any:
    if msg.phase == "output" and "PELICAN" in msg.content:
        return deny("mentions a codename")
    return allow()


def shout(msg: Any) -> Any:
    if msg.phase == "output":
        return allow(msg.content.upper(), "house style")
    return allow()


# -- G39 ----------------------------------------------------------------------


async def test_g39_output_chain_runs_once_on_the_final_answer_only() -> None:
    """G39: the output link sees only the would-be final answer, never tool turns."""
    seen: list[tuple[str, str]] = []

    def look(msg: Any) -> Any:
        seen.append((msg.phase, msg.content))
        return allow()

    model = scripted([tool_round("let me look "), final("done")])
    agent = (
        build(model)
        .message_middleware(MessageMiddleware(name="look", on_message=look))
        .build()
    )
    await agent.run("where is 7?")
    assert [("input", "where is 7?"), ("output", "done")] == seen
    rows = [
        r for r in agent.last_snapshot().middleware_decisions if r.moment == "output"
    ]
    assert [("look", 2)] == [(r.middleware, r.iteration) for r in rows]


async def test_g39_the_verdict_is_the_answer_everywhere() -> None:
    """G39: run(), turn_end, history and checkpoint all hold the rewrite."""
    model = scripted([tool_round(), final("done")])
    agent = (
        build(model)
        .message_middleware(MessageMiddleware(name="shout", on_message=shout))
        .build()
    )
    tape = Tape(agent)
    answer = await agent.run("where is 7?")
    cp = agent.checkpoint()
    assert cp is not None
    assert "DONE" == answer
    assert ["DONE"] == [e.final_content for e in tape.of("agent.turn_end")]
    assert (
        Message(role="assistant", content="DONE") == agent.last_snapshot().history[-1]
    )
    assert Message(role="assistant", content="DONE") == cp.history[-1]


async def test_g39_output_history_excludes_the_final_answer() -> None:
    """G39/G28: at output the link sees the committed history without the answer."""
    seen: list[tuple[Message, ...]] = []

    def look(msg: Any) -> Any:
        if msg.phase == "output":
            seen.append(msg.history)
        return allow()

    agent = (
        build(scripted([tool_round(), final("done")]))
        .message_middleware(MessageMiddleware(name="look", on_message=look))
        .build()
    )
    await agent.run("where is 7?")
    assert seen == [agent.last_snapshot().history[:-1]]


# -- G40 ----------------------------------------------------------------------

INPUT_ONLY = MessageMiddleware(name="in", on_message=lambda m: allow())
BRANCHING = MessageMiddleware(
    name="branch",
    on_message=lambda m: allow() if m.phase == "input" else allow(None, "looked"),
)

POSTURES = {
    "no chain": (lambda b: b, False),
    "empty output list": (lambda b: b.act(output=[]), False),
    "input-only via act": (lambda b: b.act(input=[INPUT_ONLY]), False),
    "message_middleware": (lambda b: b.message_middleware(BRANCHING), True),
    "output via act": (lambda b: b.act(output=[INPUT_ONLY]), True),
    "both via act": (lambda b: b.act(input=[INPUT_ONLY], output=[INPUT_ONLY]), True),
}


@pytest.mark.parametrize("posture", list(POSTURES))
async def test_g40_which_agents_are_output_governed(posture: str) -> None:
    """G40: only a chain with a link beyond input-only wrappers holds drafts."""
    shape_builder, governed = POSTURES[posture]
    model = scripted(["hello there friend"], stream=True)
    agent = shape_builder(build(model)).build()
    tape = Tape(agent)
    await agent.run("hi")
    tokens = [e.content for e in tape.of("stream.token")]
    expected = ["hello there friend"] if governed else ["hello ", "there ", "friend"]
    assert expected == tokens
    assert [governed] == [e.content_withheld for e in tape.of("stream.llm_end")]


# -- G41 ----------------------------------------------------------------------


def _governed(model: Any) -> Any:
    return (
        build(model)
        .message_middleware(
            MessageMiddleware(name="pass", on_message=lambda m: allow())
        )
        .build()
    )


async def test_g41_drafts_are_held_for_the_whole_run() -> None:
    """G41: no chunk is a token before acceptance; every llm_end is withheld."""
    model = scripted([tool_round("let me look "), final("all done")], stream=True)
    agent = _governed(model)
    tape = Tape(agent)
    await agent.run("where is 7?")
    ends = tape.of("stream.llm_end")
    assert [
        (1, "", True),
        (2, "", True),
    ] == [(e.iteration, e.content, e.content_withheld) for e in ends]
    assert [
        (1, "tool_calls", {"input_tokens": 3}),
        (0, "stop", {"input_tokens": 5, "output_tokens": 4}),
    ] == [(e.tool_call_count, e.stop_reason, dict(e.usage)) for e in ends]
    assert ["all done"] == [e.content for e in tape.of("stream.token")]
    first_token = tape.types().index("stream.token")
    assert "stream.llm_end" not in tape.types()[first_token:]


async def test_g41_streaming_and_complete_only_providers_behave_alike() -> None:
    """G41: in an output-governed agent both provider kinds deliver equal events."""
    tapes = []
    for stream in (True, False):
        model = scripted([tool_round("let me look "), final("all done")], stream=stream)
        agent = _governed(model)
        tape = Tape(agent)
        await agent.run("where is 7?")
        tapes.append([msgspec.structs.asdict(e) for e in tape.events])
    assert tapes[0] == tapes[1]


async def test_g41_ungoverned_streaming_emits_each_chunk_and_raw_llm_end() -> None:
    """G41: otherwise each chunk is a token and llm_end holds the raw text."""
    model = scripted([tool_round("let me look "), final("all done")], stream=True)
    agent = build(model).build()
    tape = Tape(agent)
    await agent.run("where is 7?")
    assert [
        "let ",
        "me ",
        "look ",
        "all ",
        "done",
    ] == [e.content for e in tape.of("stream.token")]
    assert [
        ("let me look ", False),
        ("all done", False),
    ] == [(e.content, e.content_withheld) for e in tape.of("stream.llm_end")]
    # Tokens arrive between their call's start and end.
    types = tape.types()
    first_end = types.index("stream.llm_end")
    assert ["stream.token"] * 3 == types[first_end - 3 : first_end]


async def test_g41_ungoverned_complete_only_provider_emits_no_token() -> None:
    """G41: a complete-only provider emits no token when drafts are not held."""
    agent = build(scripted([final("all done")])).build()
    tape = Tape(agent)
    assert "all done" == await agent.run("hi")
    assert [] == tape.of("stream.token")
    assert [("all done", False)] == [
        (e.content, e.content_withheld) for e in tape.of("stream.llm_end")
    ]


# -- G42 ----------------------------------------------------------------------


async def test_g42_acceptance_releases_one_token_after_facts_before_turn_end() -> None:
    """G42: one token with the accepted (rewritten) answer, after output facts."""
    model = scripted([final("done")], stream=True)
    agent = (
        build(model)
        .message_middleware(MessageMiddleware(name="shout", on_message=shout))
        .build()
    )
    tape = Tape(agent)
    assert "DONE" == await agent.run("hi")
    types = tape.types()
    assert ["DONE"] == [e.content for e in tape.of("stream.token")]
    token_at = types.index("stream.token")
    output_fact_at = max(
        i
        for i, e in enumerate(tape.events)
        if e.type == "middleware.decision" and e.moment == "output"
    )
    assert output_fact_at < token_at < types.index("agent.turn_end")


async def test_g42_no_token_before_the_chain_decides() -> None:
    """G42: when the output link runs, no token has been delivered yet."""
    tokens_at_decision: list[int] = []
    events: list[Any] = []

    def look(msg: Any) -> Any:
        if msg.phase == "output":
            tokens_at_decision.append(sum(e.type == "stream.token" for e in events))
        return allow()

    model = scripted([tool_round("hm "), final("done")], stream=True)
    agent = (
        build(model)
        .message_middleware(MessageMiddleware(name="look", on_message=look))
        .build()
    )
    agent.on("*", events.append)
    await agent.run("hi")
    assert [0] == tokens_at_decision


async def test_g42_an_empty_accepted_answer_releases_no_token() -> None:
    """G42: an answer rewritten to "" releases no token; run() returns ""."""
    blank = MessageMiddleware(
        name="blank",
        on_message=lambda m: (
            allow("", "nothing to say") if m.phase == "output" else allow()
        ),
    )
    agent = (
        build(scripted([final("done")], stream=True)).message_middleware(blank).build()
    )
    tape = Tape(agent)
    assert "" == await agent.run("hi")
    assert [] == tape.of("stream.token")
    assert [""] == [e.final_content for e in tape.of("agent.turn_end")]


# -- G43 ----------------------------------------------------------------------


async def test_g43_output_refusal_releases_nothing_and_raises_directly() -> None:
    """G43: no token, no turn_end, no draft committed; MessageDeniedError itself."""
    model = scripted([tool_round(), final()], stream=True)
    agent = (
        build(model)
        .message_middleware(
            MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("status?")
    assert type(caught.value) is MessageDeniedError
    assert ("output", "codenames") == (caught.value.phase, caught.value.middleware)
    assert [] == tape.of("stream.token")
    assert [] == tape.of("agent.turn_end")
    history = agent.last_snapshot().history
    assert ["user", "assistant", "tool"] == [m.role for m in history]
    assert history[1].tool_calls == (call(),)


async def test_g43_output_refusal_emits_one_content_free_error_fatal() -> None:
    """G43: one error.fatal with code, phase and middleware, no content or reason."""
    agent = (
        build(scripted([final()]))
        .message_middleware(
            MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError):
        await agent.run("status?")
    fatals = tape.of("error.fatal")
    assert [("ERR_MESSAGE_DENIED", "output", "codenames", False)] == [
        (f.code, f.phase, f.middleware, f.retryable) for f in fatals
    ]
    assert "codename" not in encoded(fatals[0]).replace("codenames", "")
    assert "PELICAN" not in encoded(fatals[0])


async def test_g43_the_draft_is_in_no_event_row_error_or_record() -> None:
    """G43: the refused draft appears in no delivered event, row, error or record."""
    store = MemoryEventStore()
    model = scripted([tool_round(), final()], stream=True)
    agent = (
        build(model, store)
        .message_middleware(
            MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("status?")
    assert [] == [e.type for e in tape.events if "PELICAN" in encoded(e)]
    rows = agent.last_snapshot().middleware_decisions
    assert [] == [r.middleware for r in rows if "PELICAN" in encoded(r)]
    assert "PELICAN" not in repr(vars(caught.value)) + str(caught.value)
    records = await store.read(agent.session_id or "")
    assert [] == [r.decode().type for r in records if b"PELICAN" in r.data]


async def test_g43_a_rewrites_before_is_the_only_copy_of_the_draft() -> None:
    """G43: rewrite-then-deny keeps the draft only in the rewrite row's before."""
    store = MemoryEventStore()
    soften = MessageMiddleware(
        name="soften",
        on_message=lambda m: (
            allow(m.content.replace("live", "ready"), "tone")
            if m.phase == "output"
            else allow()
        ),
    )
    agent = (
        build(scripted([final()]), store)
        .message_middleware(
            soften, MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError):
        await agent.run("status?")
    rows = agent.last_snapshot().middleware_decisions
    holders = [(r.middleware, r.before) for r in rows if DRAFT in encoded(r)]
    assert [("soften", DRAFT)] == holders
    assert [] == [e.type for e in tape.events if "PELICAN" in encoded(e)]
    records = await store.read(agent.session_id or "")
    assert ["decision.filed"] == [
        r.decode().type for r in records if DRAFT.encode() in r.data
    ]


async def test_g43_refused_llm_end_is_still_emitted_with_its_usage() -> None:
    """G43: the refused call's stream.llm_end was still emitted and counts usage."""
    agent = (
        build(scripted([final()]))
        .message_middleware(
            MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    tape = Tape(agent)
    with pytest.raises(MessageDeniedError):
        await agent.run("status?")
    ends = tape.of("stream.llm_end")
    assert [(1, "", {"input_tokens": 5, "output_tokens": 4})] == [
        (e.iteration, e.content, dict(e.usage)) for e in ends
    ]


async def test_g43_follow_up_refusal_keeps_the_earlier_checkpoint() -> None:
    """G43: after a refused follow-up, checkpoint().history lacks the draft."""
    model = scripted(["fine", DRAFT])
    agent = (
        build(model)
        .message_middleware(
            MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    await agent.run("hello")
    before = agent.checkpoint()
    assert before is not None
    with pytest.raises(MessageDeniedError) as caught:
        await agent.follow_up("status?")
    assert type(caught.value) is MessageDeniedError
    after = agent.checkpoint()
    assert after is not None
    assert after.history == before.history
    assert all("PELICAN" not in m.content for m in after.history)


async def test_g43_output_refusal_after_resume_is_raised_directly() -> None:
    """G43: resume() raises MessageDeniedError itself after the tool rounds."""
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    agent = (
        build(scripted([tool_round(), final()]))
        .tool_middleware(four_eyes)
        .message_middleware(
            MessageMiddleware(name="codenames", on_message=pelican_guard)
        )
        .build()
    )
    tape = Tape(agent)
    paused = await agent.run("status?")
    assert is_ask_pause(paused)
    with pytest.raises(MessageDeniedError) as caught:
        await agent.resume(paused.checkpoint, check_in_approved(by="dana"))
    assert type(caught.value) is MessageDeniedError
    assert "output" == caught.value.phase
    assert [("ERR_MESSAGE_DENIED", "output")] == [
        (f.code, f.phase) for f in tape.of("error.fatal")
    ]
    assert [] == tape.of("stream.token")
    assert [] == tape.of("agent.turn_end")
