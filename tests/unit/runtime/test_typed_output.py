"""Typed output: an answer parsed at the output moment, retried, held, recorded.

Pattern: behavioural tests over the scripted provider (a listener taping every
         delivered event, the store read back), and wire-level tests of the
         three HTTP providers against ``WireServer``.
Role:    unit tests for ``runtime/_output.py``, ``Loop.finish``/``Loop.typed``,
         the builder's ``output_type``/``max_output_retries`` and the
         providers' native structured output.
Emits:   nothing.

Laws: G92 (``output_type`` parsed and validated after the output rules; a
failing answer goes back to the model with the error, bounded by
``max_output_retries``; each rejection recorded as ``output.rejected``; the
drafts held, G40–G43; exhaustion is a recorded ``OutputValidationError`` and
the session stays continuable), R23 (retries are model calls).

Why a rejected draft holds a distinctive word: "the caller never sees a
rejected draft" is checked by searching every delivered event and every
stored record for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Literal

import msgspec
import pytest

from helmlog import (
    Agent,
    AgentBuildError,
    MessageDeniedError,
    MessageMiddleware,
    OutputValidationError,
    ToolMiddleware,
    TurnLimitError,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import (
    FatalError,
    Folder,
    MemoryEventStore,
    OutputRejected,
    TurnStarted,
)
from helmlog.runtime.providers import (
    OutputSchema,
    ProviderRequest,
    Reply,
    ToolCallRequest,
    ToolSpec,
    anthropic_messages,
    openai_chat,
    openai_responses,
    scripted,
)
from helmlog.runtime.testing import Recorder

from .helpers import assert_fold_matches, stored
from .wire_server import Json, WireServer, serving

SECRET = "PELICAN-7731"  # in every rejected draft; must surface nowhere
BAD = {"order": SECRET, "amount": 12.5}  # order is not an int
GOOD = {"order": 7, "amount": 12.5}


class Refund(msgspec.Struct):  # no docstring: it would be the schema's description
    order: int
    amount: float


@dataclasses.dataclass
class RefundDc:
    """The answer's shape, as a dataclass."""

    order: int
    amount: float


REFUND_SCHEMA: dict[str, Any] = {
    "title": "Refund",
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}


def typed_agent(
    replies: list[Any], output_type: Any = Refund, **options: Any
) -> tuple[Agent, Recorder, Any]:
    model = scripted(replies, stream=options.pop("stream", False))
    recorder = Recorder()
    agent = (
        Agent.create(provider=model, model="m", output_type=output_type, **options)
        .watch(recorder)
        .build()
    )
    return agent, recorder, model


def delivered_text(recorder: Recorder) -> str:
    return "\n".join(repr(e) for e in recorder.events)


async def stored_bytes(agent: Agent, session_id: str | None = None) -> bytes:
    sid = session_id or agent.session_id
    assert sid is not None
    return b"\n".join(r.data for r in await agent.store.read(sid))


# -- each kind of output_type ----------------------------------------------------------


def _pydantic_model() -> type:
    pydantic = pytest.importorskip("pydantic")

    class RefundModel(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        order: int
        amount: float

    return RefundModel


@pytest.mark.parametrize("kind", ["struct", "dataclass", "pydantic", "schema"])
async def test_g92_each_kind_of_output_type_parses_the_answer(kind: str) -> None:
    """G92: a Struct, a dataclass, a Pydantic model and a JSON Schema dict each
    parse the answer; ``turn().output`` is the value, ``run()`` the JSON text."""
    target: Any = {
        "struct": Refund,
        "dataclass": RefundDc,
        "pydantic": _pydantic_model() if kind == "pydantic" else None,
        "schema": REFUND_SCHEMA,
    }[kind]
    agent, _, model = typed_agent([GOOD, GOOD], target)

    result = await agent.turn("refund order 7")
    text = await agent.run("again")

    expected: Any = GOOD if kind == "schema" else target(order=7, amount=12.5)
    assert expected == result.output
    assert expected == result.output_as(dict if kind == "schema" else target)
    assert msgspec.json.encode(GOOD).decode() == result.answer == text
    name = "Refund" if kind in ("schema", "struct") else target.__name__
    assert name == model.requests[0].output.name
    assert {"order", "amount"} == set(model.requests[0].output.schema["properties"])


async def test_g92_no_output_type_keeps_the_str_contract() -> None:
    """An agent without ``output_type``: ``run()`` a str, ``output`` ``None``,
    no schema sent, drafts not held."""
    model = scripted(["plain answer"])
    agent = Agent.create(provider=model, model="m").build()
    result = await agent.turn("hi")
    assert ("plain answer", None, None) == (
        result.answer,
        result.output,
        model.requests[0].output,
    )
    assert False is agent.config.output_governed
    with pytest.raises(TypeError):
        result.output_as(Refund)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"output_type": 3}, "output_type="),
        ({"output_type": "Refund"}, "output_type="),
        ({"output_type": object}, "output_type="),
        ({"output_type": Refund(order=1, amount=1.0)}, "output_type="),
        ({"output_type": {"type": 5}}, "not a valid JSON Schema"),
        ({"output_type": Refund, "max_output_retries": -1}, "max_output_retries="),
        ({"output_type": Refund, "max_output_retries": True}, "max_output_retries="),
        ({"output_type": Refund, "max_output_retries": "2"}, "max_output_retries="),
    ],
)
def test_g92_a_bad_output_type_or_retry_count_is_a_build_error(
    options: dict[str, Any], named: str
) -> None:
    """G92: ``AgentBuildError`` naming the option, before anything runs."""
    with pytest.raises(AgentBuildError, match=named):
        Agent.create(provider=scripted(["x"]), model="m", **options)


# -- retries ---------------------------------------------------------------------------


async def test_g92_a_failing_answer_goes_back_with_its_error_then_succeeds() -> None:
    """G92: the rejection is ``output.rejected`` (iteration, attempt, error, no
    draft), the model reads a retry prompt with the error, the second answer
    is accepted; exactly one token, the accepted answer's (G41, G42)."""
    agent, recorder, model = typed_agent([BAD, GOOD], stream=True)

    result = await agent.turn("refund order 7")

    events = await stored(agent)
    (rejected,) = [e for e in events if isinstance(e, OutputRejected)]
    assert (1, 1, True) == (rejected.iteration, rejected.attempt, rejected.retrying)
    assert "'$.order'" in rejected.error and "int" in rejected.error
    retry = model.requests[1].messages[-1]
    assert "user" == retry.role and rejected.error in retry.content
    accepted = msgspec.json.encode(GOOD).decode()
    assert [accepted] == [t.content for t in recorder.of_type("stream.token")]
    assert [("", True), ("", True)] == [
        (e.content, e.content_withheld) for e in recorder.of_type("stream.llm_end")
    ]
    assert Refund(order=7, amount=12.5) == result.output
    assert SECRET not in delivered_text(recorder)
    assert SECRET.encode() not in await stored_bytes(agent)
    history = agent.last_snapshot().history
    assert ["user", "user", "assistant"] == [m.role for m in history]
    assert accepted == history[-1].content
    await assert_fold_matches(agent)


async def test_g92_exhaustion_raises_recorded_and_the_session_continues() -> None:
    """G92: past ``max_output_retries`` the turn raises ``OutputValidationError``
    (code, attempts, no draft), records ``error.fatal`` with its code and no
    ``agent.turn_end``; the session continues from its last answer."""
    agent, recorder, _ = typed_agent([BAD, BAD, GOOD], max_output_retries=1)

    with pytest.raises(OutputValidationError) as failed:
        await agent.run("refund order 7", session_id="s1")
    err = failed.value
    assert ("ERR_OUTPUT_INVALID", False, 2, "Refund") == (
        err.code,
        err.retryable,
        err.attempts,
        err.output_type,
    )
    assert SECRET not in str(err)
    events = await stored(agent, "s1")
    assert [(1, True), (2, False)] == [
        (e.attempt, e.retrying) for e in events if isinstance(e, OutputRejected)
    ]
    assert isinstance(events[-1], FatalError)
    assert ("ERR_OUTPUT_INVALID", False) == (events[-1].code, events[-1].retryable)
    assert "agent.turn_end" not in [e.type for e in events]
    assert [] == recorder.of_type("stream.token")
    assert SECRET not in delivered_text(recorder)
    assert SECRET.encode() not in await stored_bytes(agent, "s1")

    result = await agent.turn("try again", session_id="s1")
    assert Refund(order=7, amount=12.5) == result.output


async def test_g92_follow_up_after_exhaustion_continues_the_conversation() -> None:
    """G92: after an exhausted turn, ``follow_up`` continues from the last answer."""
    agent, _, _ = typed_agent([GOOD, BAD, BAD, GOOD], max_output_retries=1)
    await agent.run("first")
    with pytest.raises(OutputValidationError):
        await agent.follow_up("second")
    answer = await agent.follow_up("third")
    assert msgspec.json.encode(GOOD).decode() == answer
    assert ["first", "third"] == [
        m.content for m in agent.last_snapshot().history if m.role == "user"
    ]


async def test_g92_zero_retries_fails_on_the_first_bad_answer() -> None:
    """G92: ``max_output_retries=0`` asks the model once."""
    agent, _, model = typed_agent([BAD], max_output_retries=0)
    with pytest.raises(OutputValidationError) as failed:
        await agent.run("refund")
    assert (1, 1) == (failed.value.attempts, len(model.requests))


async def test_g92_retries_are_model_calls_and_count_against_the_limit() -> None:
    """R23 with G92: retries spend ``max_model_calls``."""
    agent, _, model = typed_agent(
        [BAD, BAD, BAD], max_output_retries=5, max_model_calls=2
    )
    with pytest.raises(TurnLimitError) as stopped:
        await agent.run("refund")
    assert ("max_model_calls", 2) == (stopped.value.limit, len(model.requests))


async def test_g92_malformed_json_and_json_schema_errors_name_paths_not_values() -> (
    None
):
    """G92, G43: not-JSON and schema failures are worded by path and rule."""
    agent, _, _ = typed_agent(
        [f"Sure! {SECRET}", {"order": 7}, {"order": SECRET, "amount": 1}, GOOD],
        REFUND_SCHEMA,
        max_output_retries=3,
    )
    result = await agent.turn("refund")
    errors = [e.error for e in await stored(agent) if isinstance(e, OutputRejected)]
    assert 3 == len(errors)
    assert errors[0].startswith("'$': not JSON")
    assert "'$.amount' is required but missing" == errors[1]
    assert errors[2].startswith("'$.order': expected integer")
    assert all(SECRET not in e for e in errors)
    assert GOOD == result.output


class Verdict(msgspec.Struct):
    outcome: Literal["approve", "decline"]


async def test_g92_an_enum_failure_does_not_quote_the_value() -> None:
    """G43: msgspec quotes a failed ``Literal``'s value; the error drops it."""
    agent, _, _ = typed_agent([{"outcome": SECRET}, {"outcome": "approve"}], Verdict)
    result = await agent.turn("decide")
    (rejected,) = [e for e in await stored(agent) if isinstance(e, OutputRejected)]
    assert "'$.outcome': invalid enum value" in rejected.error
    assert SECRET not in rejected.error
    assert Verdict(outcome="approve") == result.output


# -- the output rules run first --------------------------------------------------------


async def test_g92_output_rules_run_before_validation_on_every_draft() -> None:
    """G92: the rules see each draft; validation reads what they accepted (a
    rewrite included), so a fence-stripping rule makes a fenced answer valid."""
    seen: list[str] = []

    def unfence(m: Any) -> Any:
        seen.append(m.content)
        text = m.content.strip()
        if text.startswith("```"):
            inner = text.strip("`").removeprefix("json").strip()
            return allow(inner, "stripped a code fence")
        return allow()

    fenced = "```json\n" + msgspec.json.encode(GOOD).decode() + "\n```"
    model = scripted([BAD, fenced])
    recorder = Recorder()
    agent = (
        Agent.create(provider=model, model="m", output_type=Refund)
        .act(output=[MessageMiddleware(name="unfence", on_message=unfence)])
        .watch(recorder)
        .build()
    )
    result = await agent.turn("refund")

    assert 2 == len(seen) and fenced == seen[1]
    assert Refund(order=7, amount=12.5) == result.output
    assert [msgspec.json.encode(GOOD).decode()] == [
        t.content for t in recorder.of_type("stream.token")
    ]
    rows = agent.last_snapshot().middleware_decisions
    assert [("unfence", False), ("unfence", True)] == [
        (r.middleware, r.changed) for r in rows if r.phase == "output"
    ]


async def test_g92_an_output_denial_is_raised_before_any_validation() -> None:
    """G43 before G92: a refusal is ``MessageDeniedError``, not a rejection."""
    model = scripted([GOOD])
    agent = (
        Agent.create(provider=model, model="m", output_type=Refund)
        .act(
            output=[
                MessageMiddleware(name="no", on_message=lambda m: deny("not today"))
            ]
        )
        .build()
    )
    with pytest.raises(MessageDeniedError):
        await agent.run("refund")
    assert [] == [e for e in await stored(agent) if isinstance(e, OutputRejected)]


# -- the retries spent are the stream's ------------------------------------------------


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


def asking_agent(store: MemoryEventStore, replies: list[Any]) -> Agent:
    gate = ToolMiddleware(name="gate", on_tool_call=lambda c: ask("May I look?"))
    return (
        Agent.create(
            provider=scripted(replies),
            model="m",
            store=store,
            output_type=Refund,
            max_output_retries=1,
        )
        .tool(lookup)
        .tool_middleware(gate)
        .build()
    )


async def test_g92_a_turn_resumed_elsewhere_knows_the_retries_it_spent() -> None:
    """G92, R1: a rejection before a pause counts after a resume on another
    agent of the same store: with one retry, the next bad answer exhausts."""
    store = MemoryEventStore()
    first = asking_agent(
        store,
        [BAD, Reply(tool_calls=[ToolCallRequest(id="c1", name="lookup", args={})])],
    )
    paused = await first.run("refund order 7")
    assert is_ask_pause(paused)

    other = asking_agent(store, [BAD])
    with pytest.raises(OutputValidationError) as failed:
        await other.resume(paused.checkpoint, check_in_approved(by="dana@ops"))
    assert 2 == failed.value.attempts
    events = await stored(other, paused.session_id)
    assert [1, 2] == [e.attempt for e in events if isinstance(e, OutputRejected)]


def test_g92_the_fold_counts_the_turns_rejections() -> None:
    """G92: ``Folder.output_rejections`` counts this turn's; a turn resets it."""
    f = Folder("s")
    f.apply(TurnStarted(session_id="s", seq=1, turn=1))
    f.apply(OutputRejected(session_id="s", seq=2, iteration=1, attempt=1, error="x"))
    f.apply(OutputRejected(session_id="s", seq=3, iteration=2, attempt=2, error="x"))
    assert 2 == f.output_rejections
    f.apply(TurnStarted(session_id="s", seq=4, turn=2))
    assert 0 == f.output_rejections


# -- the scripted provider -------------------------------------------------------------


def test_g92_scripted_structured_replies_are_json() -> None:
    """A dict reply and ``Reply(output=...)`` are their JSON; not both forms."""
    assert '{"order":7,"amount":12.5}' == Reply(output=Refund(7, 12.5)).content
    assert '{"order":7,"amount":12.5}' == Reply(output=RefundDc(7, 12.5)).content
    with pytest.raises(TypeError):
        Reply(content="x", output=GOOD)
    with pytest.raises(TypeError):
        Reply(output=object())


# -- native structured output on the wire ----------------------------------------------


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serving()


SPEC = OutputSchema("Refund", REFUND_SCHEMA, "A refund.")


def request(tools: tuple[ToolSpec, ...] = ()) -> ProviderRequest:
    return ProviderRequest(
        model="asked-model",
        system="You refund.",
        messages=(),
        tools=tools,
        output=SPEC,
    )


def chat_completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "served-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


async def test_g92_openai_chat_sends_response_format_json_schema(
    server: WireServer,
) -> None:
    """G92: Chat Completions gets ``response_format`` of type ``json_schema``."""
    answer = msgspec.json.encode(GOOD).decode()
    server.answer(Json(chat_completion(answer)))
    async with openai_chat(
        base_url=f"{server.root}/v1", api_key="k", max_retries=0
    ) as model:
        agent = Agent.create(provider=model, model="m", output_type=Refund).build()
        result = await agent.turn("refund")

    assert {
        "type": "json_schema",
        "json_schema": {
            "name": "Refund",
            "schema": {"title": "Refund", **REFUND_SCHEMA},
            "strict": False,
        },
    } == server.requests[0]["response_format"]
    assert Refund(order=7, amount=12.5) == result.output


async def test_g92_openai_responses_sends_text_format_json_schema(
    server: WireServer,
) -> None:
    """G92: Responses gets ``text.format`` of type ``json_schema``."""
    server.answer(
        Json(
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 1_700_000_000,
                "status": "completed",
                "model": "served-model",
                "output": [
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [
                            {
                                "type": "output_text",
                                "text": msgspec.json.encode(GOOD).decode(),
                                "annotations": [],
                            }
                        ],
                    }
                ],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            }
        )
    )
    async with openai_responses(
        base_url=f"{server.root}/v1", api_key="k", max_retries=0
    ) as model:
        reply = await model.call(request())

    assert {
        "format": {
            "type": "json_schema",
            "name": "Refund",
            "schema": REFUND_SCHEMA,
            "strict": False,
            "description": "A refund.",
        }
    } == server.requests[0]["text"]
    assert GOOD == msgspec.json.decode(reply.content)


def anthropic_message(*content: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "served-model",
        "content": list(content),
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 5},
    }


def tool_use(name: str, args: dict[str, Any], cid: str = "toolu_1") -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": args}


async def test_g92_anthropic_forces_the_output_tool_and_reads_its_input(
    server: WireServer,
) -> None:
    """G92: Messages gets a ``final_result`` tool with the schema, forced by
    ``tool_choice``; its input is the answer text."""
    server.answer(Json(anthropic_message(tool_use("final_result", GOOD))))
    async with anthropic_messages(
        base_url=server.root, api_key="k", max_retries=0
    ) as model:
        agent = Agent.create(provider=model, model="m", output_type=Refund).build()
        result = await agent.turn("refund")

    sent = server.requests[0]
    assert [
        {
            "name": "final_result",
            "description": "Give your final answer: call this with it, as its input.",
            "input_schema": {"title": "Refund", **REFUND_SCHEMA},
        }
    ] == sent["tools"]
    assert {"type": "tool", "name": "final_result"} == sent["tool_choice"]
    assert Refund(order=7, amount=12.5) == result.output
    assert msgspec.json.encode(GOOD).decode() == result.answer


async def test_g92_anthropic_with_tools_lets_the_model_call_them_first(
    server: WireServer,
) -> None:
    """G92: beside real tools the choice is ``any``; a real call in the same
    reply is kept and the early answer dropped; a name clash is avoided."""
    server.answer(
        Json(
            anthropic_message(
                tool_use("final_result", GOOD, "toolu_1"),
                tool_use("final_result_1", GOOD, "toolu_2"),
            )
        )
    )
    clash = ToolSpec("final_result", "A user tool of that name.", {"type": "object"})
    async with anthropic_messages(
        base_url=server.root, api_key="k", max_retries=0
    ) as model:
        reply = await model.call(request((clash,)))

    sent = server.requests[0]
    assert ["final_result", "final_result_1"] == [t["name"] for t in sent["tools"]]
    assert {"type": "any"} == sent["tool_choice"]
    assert ("", ("final_result",)) == (
        reply.content,
        tuple(c.name for c in reply.tool_calls),
    )


# -- what-if over a typed session --------------------------------------------------


async def test_g92_whatif_names_a_rejected_draft_not_recorded() -> None:
    """G92 with what-if: a rejected draft's output walk is not re-judgeable
    (its text is not in the record); the accepted answer's is re-judged."""
    import helmlog

    def build(replies: list[Any]) -> Agent:
        return (
            Agent.create(provider=scripted(replies), model="m", output_type=Refund)
            .act(output=[MessageMiddleware(name="o", on_message=lambda m: allow())])
            .build()
        )

    agent = build([BAD, GOOD])
    await agent.run("refund")
    assert agent.session_id is not None
    records = await agent.store.read(agent.session_id)

    report = await helmlog.whatif(records, build([GOOD]))

    (session,) = report.sessions
    outputs = [j for j in session.decisions if j.moment == "output"]
    assert [("not-rejudgeable", "not-recorded"), ("unchanged", None)] == [
        (j.status, j.reason) for j in outputs
    ]


def test_g92_the_golden_typed_stream_decodes_and_counts_its_rejections() -> None:
    """G92, R10: the recorded ``v3_typed_output`` stream decodes its
    ``output.rejected`` events and folds the failed turn's two rejections."""
    from tests.replay.streams import FIXTURES, load_records

    events = [r.decode() for r in load_records(FIXTURES / "v3_typed_output.jsonl")]
    f = Folder()
    for event in events:
        f.apply(event)
    assert [(1, True), (1, True), (2, False)] == [
        (e.attempt, e.retrying) for e in events if isinstance(e, OutputRejected)
    ]
    assert (2, "ERR_OUTPUT_INVALID") == (f.output_rejections, events[-1].code)
