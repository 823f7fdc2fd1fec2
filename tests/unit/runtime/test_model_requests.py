"""What the model is sent, the scripted provider, and how a failed run says so.

Pattern: whole runs on the scripted provider; requests are read back from
         ``model.requests``; failures are read back from the stored stream
         and from a watcher, which must agree on exactly one ``error.fatal``.
Role:    unit tests for SPEC G.17 (G89–G91).
Emits:   nothing.

Laws: G89 (a request is ``.system`` plus the committed messages as the
window left them; ``model.requests`` holds deep copies, one per call), G90
(the scripted provider: a script in order, ``exhausted``, ``reply=``,
``respond=``, ``stream=True`` word chunks), G91 (one content-free
``error.fatal`` per failed run with the right code; none for refusals raised
before anything runs).

Why failures are checked in the stream and in delivery: "emits" means both
recorded (when the store accepts it) and told to watchers, and a fatal that
carried the refused text would leak it through either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    CheckpointError,
    DecisionRequiredError,
    LedgerAppendError,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    NoConversationError,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    sliding_window,
    tool,
)
from helmlog.events import (
    FatalError,
    MemoryEventStore,
    StoredEvent,
    ToolCallRequest,
    encode_event,
)
from helmlog.runtime.providers import ProviderRequest, Reply, scripted
from helmlog.runtime.testing import counter_ids

from .helpers import Recorder, assert_fold_matches, call, calls, of_type, stored

SECRET = "the vault code is 8841"


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} shipped"


def build(model: Any, *, watcher: Recorder | None = None, **options: Any) -> Agent:
    message_links = options.pop("message_links", ())
    tool_links = options.pop("tool_links", ())
    window = options.pop("window", None)
    b = Agent.create(provider=model, model="m", ids=counter_ids(), **options)
    b = b.system("You look orders up.").tool(lookup)
    if message_links:
        b = b.message_middleware(*message_links)
    if tool_links:
        b = b.tool_middleware(*tool_links)
    if window is not None:
        b = b.window(window)
    if watcher is not None:
        b = b.watch(watcher)
    return b.build()


def fatal_fields(event: FatalError) -> dict[str, Any]:
    """Every field of an error.fatal but the envelope."""
    envelope = {"session_id", "seq", "timestamp", "prev_hash", "replayed"}
    return {k: v for k, v in msgspec.structs.asdict(event).items() if k not in envelope}


async def assert_one_fatal(
    agent: Agent,
    watcher: Recorder,
    expected: dict[str, Any],
    *,
    absent: str = SECRET,
    earlier_turns: int = 0,
) -> None:
    """G91: one content-free error.fatal, stored and delivered; no new turn_end."""
    events = await stored(agent)
    fatals = of_type(events, "error.fatal")
    assert [expected] == [fatal_fields(e) for e in fatals]
    assert [expected] == [fatal_fields(e) for e in watcher.of("error.fatal")]
    # Only turns that finished before the failed run ended with a turn_end.
    assert earlier_turns == len(of_type(events, "agent.turn_end"))
    assert earlier_turns == len(watcher.of("agent.turn_end"))
    assert False is (absent in encode_event(fatals[0]).decode())


# -- G89: requests --------------------------------------------------------------------


async def test_g89_a_request_is_the_system_prompt_and_the_committed_messages() -> None:
    """G89: .system is the prompt; .messages is the history with tool-call turns."""
    model = scripted(
        [calls(call("c1", "lookup", order=7), content="Checking."), "Shipped."]
    )
    agent = build(model)

    assert "Shipped." == await agent.run("where is 7?")

    user = Message(role="user", content="where is 7?")
    proposed = Message(
        role="assistant",
        content="Checking.",
        tool_calls=(ToolCallRequest(id="c1", name="lookup", args={"order": 7}),),
    )
    result = Message(
        role="tool", content="order 7 shipped", tool_call_id="c1", tool_name="lookup"
    )
    assert [
        ("You look orders up.", (user,)),
        ("You look orders up.", (user, proposed, result)),
    ] == [(r.system, r.messages) for r in model.requests]
    assert (user, proposed, result, Message(role="assistant", content="Shipped.")) == (
        agent.last_snapshot().history
    )
    await assert_fold_matches(agent)


async def test_g89_a_tool_call_turn_without_text_has_empty_content() -> None:
    """G89: an assistant tool-call turn with no text is sent with content ""."""
    model = scripted([calls(call("c1", "lookup", order=7)), "Shipped."])
    agent = build(model)

    await agent.run("where is 7?")

    assert ("", "c1") == (
        model.requests[1].messages[1].content,
        model.requests[1].messages[1].tool_calls[0].id,
    )
    assert [] == [m for r in model.requests for m in r.messages if m.role == "system"]


async def test_g89_requests_are_deep_copies_one_per_call_in_order() -> None:
    """G89: one request per call, in order; changing one changes no other record."""
    model = scripted(
        [
            calls(call("c1", "lookup", order=7)),
            calls(call("c2", "lookup", order=8)),
            "Both.",
        ]
    )
    agent = build(model)

    await agent.run("where are 7 and 8?")
    model.requests[1].messages[1].tool_calls[0].args["order"] = 99

    assert [1, 3, 5] == [len(r.messages) for r in model.requests]
    assert {"order": 7} == model.requests[2].messages[1].tool_calls[0].args
    assert {"order": 7} == agent.last_snapshot().history[1].tool_calls[0].args
    await assert_fold_matches(agent)


async def test_g89_the_model_is_sent_the_history_as_the_window_left_it() -> None:
    """G89: with a window, the request is what the window kept; history keeps all."""
    model = scripted(["First answer.", "Second answer."])
    agent = build(model, window=sliding_window(keep_recent_turns=1))

    await agent.run("first question")
    await agent.follow_up("second question")

    assert (Message(role="user", content="second question"),) == model.requests[
        1
    ].messages
    assert ["first question", "First answer.", "second question", "Second answer."] == [
        m.content for m in agent.last_snapshot().history
    ]
    await assert_fold_matches(agent)


# -- G90: the scripted provider -----------------------------------------------------


async def test_g90_a_script_is_consumed_in_order_and_a_str_is_a_reply() -> None:
    """G90: one reply per call, in order; a str is Reply(content=...)."""
    model = scripted(["one", Reply(content="two"), "three"])
    agent = build(model)

    answers = [
        await agent.run("a"),
        await agent.follow_up("b"),
        await agent.follow_up("c"),
    ]

    assert ["one", "two", "three"] == answers


async def test_g90_an_exhausted_script_fails_the_run() -> None:
    """G90/G91: no reply left raises `exhausted`; one ERR_PROVIDER fatal."""
    watcher = Recorder()
    model = scripted([calls(call("c1", "lookup", order=7))])
    agent = build(model, watcher=watcher)

    with pytest.raises(RuntimeError, match="exhausted"):
        await agent.run("where is 7?")

    await assert_one_fatal(
        agent,
        watcher,
        {"code": "ERR_PROVIDER", "phase": None, "middleware": None, "retryable": True},
    )
    await assert_fold_matches(agent)


async def test_g90_reply_repeats_one_reply() -> None:
    """G90: scripted(reply=...) answers every call the same."""
    model = scripted(reply="Same.")
    agent = build(model)

    answers = [await agent.run("a"), await agent.follow_up("b"), await agent.run("c")]

    assert ["Same.", "Same.", "Same."] == answers
    assert 3 == len(model.requests)


@pytest.mark.parametrize("is_async", [False, True], ids=["plain", "async"])
async def test_g90_respond_computes_each_reply_from_the_request(is_async: bool) -> None:
    """G90: scripted(respond=fn) answers from the request it is sent."""

    def echo(request: ProviderRequest) -> str:
        return f"{len(request.messages)}: {request.messages[-1].content}"

    async def async_echo(request: ProviderRequest) -> str:
        return echo(request)

    model = scripted(respond=async_echo if is_async else echo)
    agent = build(model)

    answers = [await agent.run("hello"), await agent.follow_up("again")]

    assert ["1: hello", "3: again"] == answers
    await assert_fold_matches(agent)


async def test_g90_stream_true_sends_word_chunks_as_tokens() -> None:
    """G90/G41: each token is a word plus the whitespace after it."""
    watcher = Recorder()
    text = "Order  7 has\nshipped today."
    model = scripted([text], stream=True)
    agent = build(model, watcher=watcher)

    assert text == await agent.run("where is 7?")

    assert ["Order  ", "7 ", "has\n", "shipped ", "today."] == [
        t.content for t in watcher.of("stream.token")
    ]
    assert [
        "stream.llm_start",
        "stream.token",
        "stream.token",
        "stream.token",
        "stream.token",
        "stream.token",
        "stream.llm_end",
    ] == [t for t in watcher.types if t.startswith("stream.")]
    (end,) = watcher.of("stream.llm_end")
    assert (text, False) == (end.content, end.content_withheld)
    assert [] == of_type(await stored(agent), "stream.token")
    await assert_fold_matches(agent)


async def test_g90_a_complete_only_provider_emits_no_token() -> None:
    """G90/G41: without stream=True the provider is complete-only: no stream.token."""
    watcher = Recorder()
    model = scripted(["Order 7 has shipped."])
    agent = build(model, watcher=watcher)

    await agent.run("where is 7?")

    assert [] == watcher.of("stream.token")
    assert ["Order 7 has shipped."] == [e.content for e in watcher.of("stream.llm_end")]


# -- G91: a failed run says so once ---------------------------------------------------


async def test_g91_a_provider_failure_emits_one_err_provider() -> None:
    """G91: a provider that raises: one ERR_PROVIDER fatal, no turn_end, no content."""
    watcher = Recorder()

    def down(request: ProviderRequest) -> str:
        raise ConnectionError(f"upstream refused prompt {SECRET}")

    agent = build(scripted(respond=down), watcher=watcher)

    with pytest.raises(ConnectionError):
        await agent.run(SECRET)

    await assert_one_fatal(
        agent,
        watcher,
        {"code": "ERR_PROVIDER", "phase": None, "middleware": None, "retryable": True},
    )
    await assert_fold_matches(agent)


async def test_g91_an_input_refusal_emits_one_err_message_denied() -> None:
    """G91/G35: an input refusal: one fatal naming phase and middleware only."""
    watcher = Recorder()
    guard = MessageMiddleware(
        name="no-secrets", on_message=lambda m: deny(f"refused: {m.content}")
    )
    agent = build(scripted(["never"]), watcher=watcher, message_links=(guard,))

    with pytest.raises(MessageDeniedError):
        await agent.run(SECRET)

    await assert_one_fatal(
        agent,
        watcher,
        {
            "code": "ERR_MESSAGE_DENIED",
            "phase": "input",
            "middleware": "no-secrets",
            "retryable": False,
        },
    )
    await assert_fold_matches(agent)


async def test_g91_an_output_refusal_after_a_tool_round_emits_one_fatal() -> None:
    """G91/G43: an output refusal after tools: one fatal with phase output."""
    watcher = Recorder()

    def guard(msg: Any) -> Any:
        return deny("draft leaks") if msg.phase == "output" else allow()

    model = scripted([calls(call("c1", "lookup", order=7)), SECRET])
    agent = build(
        model,
        watcher=watcher,
        message_links=(MessageMiddleware(name="leak", on_message=guard),),
    )

    with pytest.raises(MessageDeniedError):
        await agent.run("where is 7?")

    await assert_one_fatal(
        agent,
        watcher,
        {
            "code": "ERR_MESSAGE_DENIED",
            "phase": "output",
            "middleware": "leak",
            "retryable": False,
        },
    )
    await assert_fold_matches(agent)


class BrokenWindow:
    """A window strategy whose plan fails: a bug inside the loop, not the provider."""

    name = "broken"

    def plan(self, messages: Any, *, iteration: int) -> Any:
        raise ValueError(f"cannot plan {SECRET}")


async def test_g91_an_internal_failure_emits_one_err_internal() -> None:
    """G91: a failure neither provider nor message nor ledger is ERR_INTERNAL."""
    watcher = Recorder()
    agent = build(scripted(["never"]), watcher=watcher, window=BrokenWindow())

    with pytest.raises(ValueError, match="cannot plan"):
        await agent.run("where is 7?")

    await assert_one_fatal(
        agent,
        watcher,
        {"code": "ERR_INTERNAL", "phase": None, "middleware": None, "retryable": False},
    )
    await assert_fold_matches(agent)


class FlakyStore(MemoryEventStore):
    """A memory store that refuses exactly one append, the ``fail_on``-th."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.appends = 0

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        self.appends += 1
        if self.appends == self.fail_on:
            raise OSError("disk full")
        return await super().append_sealed(session_id, records, expected_seq)


async def test_g91_a_failed_append_emits_err_ledger_append_once_the_store_accepts() -> (
    None
):
    """G91/R5: a refused append raises; the fatal lands when the store accepts."""
    watcher = Recorder()
    store = FlakyStore(fail_on=2)
    model = scripted([calls(call("c1", "lookup", order=7)), "Shipped."])
    agent = build(model, watcher=watcher, store=store)

    with pytest.raises(LedgerAppendError):
        await agent.run("where is 7?")

    await assert_one_fatal(
        agent,
        watcher,
        {
            "code": "ERR_LEDGER_APPEND",
            "phase": None,
            "middleware": None,
            "retryable": True,
        },
    )
    assert [] == of_type(await stored(agent), "tool.dispatched")
    await assert_fold_matches(agent)


async def test_g91_a_failed_resume_emits_one_fatal() -> None:
    """G91: a resume that ends by raising emits exactly one error.fatal."""
    watcher = Recorder()
    gate = ToolMiddleware(name="gate", on_tool_call=lambda c: ask("may I?"))
    model = scripted([calls(call("c1", "lookup", order=7))])
    agent = build(model, watcher=watcher, tool_links=(gate,))
    paused = await agent.run("where is 7?")
    assert is_ask_pause(paused)

    with pytest.raises(RuntimeError, match="exhausted"):
        await agent.resume(paused.checkpoint, check_in_approved(by="dana"))

    await assert_one_fatal(
        agent,
        watcher,
        {"code": "ERR_PROVIDER", "phase": None, "middleware": None, "retryable": True},
    )
    await assert_fold_matches(agent)


async def test_g91_a_failed_follow_up_emits_one_fatal() -> None:
    """G91: a follow_up that ends by raising adds exactly one error.fatal."""
    watcher = Recorder()
    model = scripted(["Hello."])
    agent = build(model, watcher=watcher)
    assert "Hello." == await agent.run("hi")

    with pytest.raises(RuntimeError, match="exhausted"):
        await agent.follow_up("and again?")

    await assert_one_fatal(
        agent,
        watcher,
        {"code": "ERR_PROVIDER", "phase": None, "middleware": None, "retryable": True},
        earlier_turns=1,
    )
    await assert_fold_matches(agent)


async def test_g91_refusals_before_anything_runs_emit_nothing() -> None:
    """G91: DecisionRequiredError, CheckpointError, NoConversationError emit nothing."""
    watcher = Recorder()
    gate = ToolMiddleware(name="gate", on_tool_call=lambda c: ask("may I?"))
    model = scripted([calls(call("c1", "lookup", order=7)), "Shipped."])
    agent = build(model, watcher=watcher, tool_links=(gate,))

    with pytest.raises(NoConversationError):
        await agent.follow_up("hello?")
    assert [] == watcher.events

    paused = await agent.run("where is 7?")
    assert is_ask_pause(paused)
    before_stream = await stored(agent)
    before_delivered = len(watcher.events)

    with pytest.raises(DecisionRequiredError):
        await agent.resume(paused.checkpoint)
    with pytest.raises(CheckpointError):
        await agent.resume(
            msgspec.structs.replace(paused.checkpoint, tool_call_id="c9"),
            check_in_approved(by="dana"),
        )
    with pytest.raises(NoConversationError):
        await agent.follow_up("and now?")

    assert before_stream == await stored(agent)
    assert before_delivered == len(watcher.events)
    assert [] == watcher.of("error.fatal")
    await assert_fold_matches(agent)
