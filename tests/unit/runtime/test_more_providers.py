"""openai_responses and anthropic_messages against local servers speaking their APIs.

Pattern: wire-level tests: the real ``openai`` and ``anthropic`` SDKs talk
         HTTP to ``WireServer``, which records what was sent; whole agent
         runs go through a tool round, streamed and not.
Role:    unit tests for ``runtime/providers/_responses.py``,
         ``_anthropic.py`` and the shared ``_wire.py`` (unparsable replies,
         for ``openai_chat`` too).
Emits:   nothing.

Laws: G89 (what each API is sent: the system prompt, tool calls and tool
results in its own wire form), G41 (streamed text reaches ``on_token``), G91
and issue 12 item 5 (every failure and every reply a provider cannot parse is
a ``ProviderError``, retryable where asking again may help; the model the
server reports is what ``stream.llm_end`` and the ``chat`` span record).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from helmlog import Agent, tool
from helmlog.events import Message, ToolCallRequest
from helmlog.runtime import ProviderError
from helmlog.runtime.providers import (
    Provider,
    ProviderRequest,
    Reply,
    ToolSpec,
    anthropic_messages,
    openai_chat,
    openai_responses,
)
from helmlog.runtime.testing import Recorder
from helmlog.sinks import OtelSink

from ...polling import until
from .wire_server import Json, Raw, Sse, WireServer, named, serving

REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order": {"type": "integer"}},
    "required": ["order"],
}


@pytest.fixture
def server() -> Iterator[WireServer]:
    yield from serving()


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def responses(server: WireServer, **options: Any) -> Any:
    return openai_responses(
        base_url=f"{server.root}/v1", api_key="sk-test", max_retries=0, **options
    )


def messages(server: WireServer, **options: Any) -> Any:
    return anthropic_messages(
        base_url=server.root, api_key="sk-test", max_retries=0, **options
    )


def chat(server: WireServer, **options: Any) -> Any:
    return openai_chat(
        base_url=f"{server.root}/v1", api_key="sk-test", max_retries=0, **options
    )


def request(*history: Message, tools: tuple[ToolSpec, ...] = ()) -> ProviderRequest:
    return ProviderRequest(
        model="asked-model",
        system="You handle refunds.",
        messages=history or (Message(role="user", content="Refund order 7"),),
        tools=tools,
    )


TOOL_ROUND = (
    Message(role="user", content="Refund order 7"),
    Message(
        role="assistant",
        content="Checking.",
        tool_calls=(ToolCallRequest(id="c1", name="refund", args={"order": 7}),),
    ),
    Message(role="tool", content="refunded 7", tool_call_id="c1", tool_name="refund"),
)


# -- OpenAI Responses: wire bodies -------------------------------------------------


def response_body(*output: dict[str, Any], model: str = "served-model") -> Any:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": model,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8},
    }


def text_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def response_stream(final: Any, *deltas: str) -> Sse:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": final}
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "sequence_number": i + 1,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": d,
            "logprobs": [],
        }
        for i, d in enumerate(deltas)
    ]
    events.append(
        {"type": "response.completed", "sequence_number": 99, "response": final}
    )
    return named(*events)


async def test_responses_sends_instructions_items_and_function_tools(
    server: WireServer,
) -> None:
    """G89: system as instructions; calls and results as items; store=False."""
    server.answer(Json(response_body(text_item("Refunded."))))
    spec = ToolSpec("refund", "Refund an order.", REFUND_SCHEMA)
    async with responses(server) as model:
        reply = await model.call(request(*TOOL_ROUND, tools=(spec,)))

    sent = server.requests[0]
    assert ["/v1/responses"] == server.paths
    assert ("asked-model", "You handle refunds.", False) == (
        sent["model"],
        sent["instructions"],
        sent["store"],
    )
    assert [
        {"role": "user", "content": "Refund order 7"},
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "refund",
            "arguments": '{"order":7}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "refunded 7"},
    ] == sent["input"]
    assert [
        {
            "type": "function",
            "name": "refund",
            "description": "Refund an order.",
            "parameters": REFUND_SCHEMA,
        }
    ] == sent["tools"]
    assert (
        Reply(
            content="Refunded.",
            usage={"input_tokens": 3, "output_tokens": 5},
            model="served-model",
        )
        == reply
    )


async def test_responses_reads_function_calls(server: WireServer) -> None:
    """A function_call output item is a tool call, by its call_id."""
    server.answer(Json(response_body(call_item("call_1", "refund", '{"order":7}'))))
    async with responses(server) as model:
        reply = await model.call(request())

    assert (
        ToolCallRequest(id="call_1", name="refund", args={"order": 7}),
    ) == reply.tool_calls
    assert "tool_calls" == reply.stop_reason


async def test_responses_streams_text_and_reads_the_completed_response(
    server: WireServer,
) -> None:
    """G41: output_text deltas reach on_token; the reply is response.completed's."""
    server.answer(
        response_stream(response_body(text_item("Hello there")), "Hel", "lo there")
    )
    tokens: list[str] = []
    async with responses(server, stream=True) as model:
        reply = await model.call(request(), tokens.append)

    assert True is server.requests[0]["stream"]
    assert ["Hel", "lo there"] == tokens
    assert ("Hello there", "served-model") == (reply.content, reply.model)


async def test_responses_stream_without_completion_is_a_provider_error(
    server: WireServer,
) -> None:
    """Item 5: a stream that ends before response.completed produced no reply."""
    server.answer(
        named(
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": response_body(),
            }
        )
    )
    async with responses(server, stream=True) as model:
        with pytest.raises(ProviderError) as failed:
            await model.call(request())

    assert "stream ended before its response was complete" in str(failed.value)


# -- Anthropic Messages: wire bodies -----------------------------------------------


def message_body(*content: dict[str, Any], stop: str = "end_turn") -> Any:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "served-model",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 5},
    }


def message_stream(
    *blocks: tuple[dict[str, Any], list[dict[str, Any]]], stop: str = "end_turn"
) -> Sse:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                **message_body(),
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        }
    ]
    for index, (start, deltas) in enumerate(blocks):
        events.append(
            {"type": "content_block_start", "index": index, "content_block": start}
        )
        events += [
            {"type": "content_block_delta", "index": index, "delta": d} for d in deltas
        ]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
    )
    events.append({"type": "message_stop"})
    return named(*events)


async def test_messages_sends_system_blocks_and_one_user_turn_of_results(
    server: WireServer,
) -> None:
    """G89: tool_use blocks for calls; the batch's results in one user turn."""
    server.answer(Json(message_body({"type": "text", "text": "Refunded."})))
    spec = ToolSpec("refund", "Refund an order.", REFUND_SCHEMA)
    async with messages(server, max_tokens=256) as model:
        reply = await model.call(request(*TOOL_ROUND, tools=(spec,)))

    sent = server.requests[0]
    assert ["/v1/messages"] == server.paths
    assert ("asked-model", "You handle refunds.", 256) == (
        sent["model"],
        sent["system"],
        sent["max_tokens"],
    )
    assert [
        {"role": "user", "content": "Refund order 7"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "c1",
                    "name": "refund",
                    "input": {"order": 7},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "refunded 7"}
            ],
        },
    ] == sent["messages"]
    assert [
        {
            "name": "refund",
            "description": "Refund an order.",
            "input_schema": REFUND_SCHEMA,
        }
    ] == sent["tools"]
    assert (
        Reply(
            content="Refunded.",
            usage={"input_tokens": 3, "output_tokens": 5},
            stop_reason="end_turn",
            model="served-model",
        )
        == reply
    )


async def test_messages_reads_tool_use_blocks(server: WireServer) -> None:
    """A tool_use block is a tool call with its input as the arguments."""
    server.answer(
        Json(
            message_body(
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "refund",
                    "input": {"order": 7},
                },
                stop="tool_use",
            )
        )
    )
    async with messages(server) as model:
        reply = await model.call(request())

    assert ("Checking.", "tool_use") == (reply.content, reply.stop_reason)
    assert (
        ToolCallRequest(id="toolu_1", name="refund", args={"order": 7}),
    ) == reply.tool_calls


async def test_messages_streams_text_and_assembles_tool_json(
    server: WireServer,
) -> None:
    """G41: text_delta reaches on_token; input_json_delta pieces are joined."""
    server.answer(
        message_stream(
            (
                {"type": "text", "text": ""},
                [
                    {"type": "text_delta", "text": "Check"},
                    {"type": "text_delta", "text": "ing."},
                ],
            ),
            (
                {"type": "tool_use", "id": "toolu_1", "name": "refund", "input": {}},
                [
                    {"type": "input_json_delta", "partial_json": '{"ord'},
                    {"type": "input_json_delta", "partial_json": 'er": 7}'},
                ],
            ),
            stop="tool_use",
        )
    )
    tokens: list[str] = []
    async with messages(server, stream=True) as model:
        reply = await model.call(request(), tokens.append)

    assert ["Check", "ing."] == tokens
    assert (
        Reply(
            content="Checking.",
            tool_calls=[
                ToolCallRequest(id="toolu_1", name="refund", args={"order": 7})
            ],
            usage={"input_tokens": 3, "output_tokens": 5},
            stop_reason="tool_use",
            model="served-model",
        )
        == reply
    )


async def test_messages_stream_error_event_is_a_provider_error(
    server: WireServer,
) -> None:
    """G91: an ``error`` event mid-stream is a ProviderError, not an SDK error."""
    server.answer(
        Sse(
            [
                (
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {**message_body(), "content": []},
                    },
                ),
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                ),
            ]
        )
    )
    async with messages(server, stream=True) as model:
        with pytest.raises(ProviderError):
            await model.call(request())


# -- whole agent runs: a tool round, the model recorded ----------------------------


def one_round(kind: str, stream: bool) -> list[Any]:
    """The two answers of a tool round (call refund, then answer) in ``kind``."""
    if kind == "responses":
        first = response_body(call_item("call_1", "refund", '{"order": 7}'))
        last = response_body(text_item("Refunded order 7."))
        if stream:
            return [
                response_stream(first),
                response_stream(last, "Refunded ", "order 7."),
            ]
        return [Json(first), Json(last)]
    use = {"type": "tool_use", "id": "call_1", "name": "refund", "input": {}}
    if stream:
        return [
            message_stream(
                (use, [{"type": "input_json_delta", "partial_json": '{"order": 7}'}]),
                stop="tool_use",
            ),
            message_stream(
                (
                    {"type": "text", "text": ""},
                    [
                        {"type": "text_delta", "text": "Refunded "},
                        {"type": "text_delta", "text": "order 7."},
                    ],
                )
            ),
        ]
    return [
        Json(message_body({**use, "input": {"order": 7}}, stop="tool_use")),
        Json(message_body({"type": "text", "text": "Refunded order 7."})),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "streamed"])
@pytest.mark.parametrize("kind", ["responses", "messages"])
async def test_an_agent_runs_a_tool_round_and_records_the_served_model(
    server: WireServer, kind: str, stream: bool
) -> None:
    """Item 5: a tool round; llm_end and the chat span name the served model."""
    server.answer(*one_round(kind, stream))
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    recorder = Recorder()
    provider = (
        responses(server, stream=stream)
        if kind == "responses"
        else messages(server, stream=stream)
    )
    async with provider:
        agent = (
            Agent.create(provider=provider, model="asked-model")
            .tool(refund)
            .watch(recorder, OtelSink(tracing))
            .build()
        )
        answer = await agent.run("Refund order 7")

    assert "Refunded order 7." == answer
    assert ["refunded 7"] == [e.result for e in recorder.of_type("stream.tool_end")]
    assert ["served-model", "served-model"] == [
        e.model for e in recorder.of_type("stream.llm_end")
    ]
    assert ["asked-model", "asked-model"] == [
        e.model for e in recorder.of_type("stream.llm_start")
    ]
    tokens = [e.content for e in recorder.of_type("stream.token")]
    assert (["Refunded ", "order 7."] if stream else []) == tokens
    await until(
        "both chat spans finished",
        lambda: (
            len([s for s in spans.get_finished_spans() if s.name.startswith("chat")])
            == 2
        ),
        5.0,
    )
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert [("asked-model", "served-model")] * 2 == [
        (s.attributes["gen_ai.request.model"], s.attributes["gen_ai.response.model"])
        for s in chats
    ]


# -- unparsable replies, every HTTP provider ---------------------------------------

PROVIDERS = {"chat": chat, "responses": responses, "messages": messages}


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "streamed"])
@pytest.mark.parametrize("kind", list(PROVIDERS))
async def test_an_html_page_is_a_retryable_provider_error(
    server: WireServer, kind: str, stream: bool
) -> None:
    """Item 5: a 200 with an HTML page is a retryable ProviderError, either way."""
    server.answer(Raw(b"<html><body>502 from the proxy</body></html>"))
    async with PROVIDERS[kind](server, stream=stream) as model:
        assert isinstance(model, Provider)
        with pytest.raises(ProviderError) as failed:
            await model.call(request())

    assert (True, "ERR_PROVIDER") == (failed.value.retryable, failed.value.code)
    assert "502 from the proxy" not in str(failed.value)


@pytest.mark.parametrize("kind", list(PROVIDERS))
async def test_a_body_that_is_not_json_is_a_retryable_provider_error(
    server: WireServer, kind: str
) -> None:
    """Item 5: a 200 labelled JSON whose body is not JSON is a ProviderError."""
    server.answer(Raw(b"{not json", content_type="application/json"))
    async with PROVIDERS[kind](server) as model:
        with pytest.raises(ProviderError) as failed:
            await model.call(request())

    assert True is failed.value.retryable
    assert "a body that is not JSON" in str(failed.value)


@pytest.mark.parametrize(
    "body",
    [[1, 2], {"choices": "x", "output": 3, "content": 4}],
    ids=["a-list", "wrong-fields"],
)
@pytest.mark.parametrize("kind", list(PROVIDERS))
async def test_json_of_another_shape_is_a_non_retryable_provider_error(
    server: WireServer, kind: str, body: Any
) -> None:
    """Item 5: JSON that is not this API's reply is a ProviderError, not retryable."""
    server.answer(Json(body))
    async with PROVIDERS[kind](server) as model:
        with pytest.raises(ProviderError) as failed:
            await model.call(request())

    assert False is failed.value.retryable


@pytest.mark.parametrize("kind", list(PROVIDERS))
async def test_a_malformed_stream_event_is_a_provider_error(
    server: WireServer, kind: str
) -> None:
    """Item 5: an SSE event whose data is not JSON is a ProviderError."""
    name = {"chat": None, "responses": "response.created", "messages": "message_start"}
    server.answer(Sse([(name[kind], "{broken")], done=kind == "chat"))
    async with PROVIDERS[kind](server, stream=True) as model:
        with pytest.raises(ProviderError) as failed:
            await model.call(request())

    assert "malformed stream event" in str(failed.value)


async def test_chat_reply_carries_the_model_the_server_reports(
    server: WireServer,
) -> None:
    """Item 5: openai_chat's reply names the served model, else the one sent."""
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "served-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi"},
            }
        ],
    }
    server.answer(Json(body), Json({**body, "model": ""}))
    async with chat(server) as model:
        served = await model.call(request())
        unnamed = await model.call(request())

    assert ["served-model", "asked-model"] == [served.model, unnamed.model]
    assert json.loads(json.dumps(server.requests[0]))["model"] == "asked-model"
