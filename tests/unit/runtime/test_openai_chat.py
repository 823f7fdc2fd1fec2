"""openai_chat against a local Chat Completions server.

Pattern: wire-level tests: the real ``openai`` SDK talks HTTP to the
         ``ChatServer`` fixture, which records what was sent.
Role:    unit tests for ``helmlog.runtime.providers.openai_chat``.
Emits:   nothing.

Laws: G89 (what the model is sent), G41 (chunks reach ``on_token``), G91
(a failure is a ``ProviderError``, never an ``openai`` exception); the last
section runs ``helmlog.Agent`` over the endpoint through a full tool round.

Why ``max_retries=0`` throughout: the SDK backs off between retries, and a
test of a failure should see the first one, not wait for the third.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from helmlog import Agent, tool
from helmlog.events import Message
from helmlog.runtime import ProviderError
from helmlog.runtime.providers import (
    OpenAIChatProvider,
    Provider,
    ProviderRequest,
    ToolCallRequest,
    ToolSpec,
    openai_chat,
)

from .chat_server import (
    ChatServer,
    JsonAnswer,
    SseAnswer,
    StallAnswer,
    chunk,
    completion,
    function_call,
    usage_chunk,
)

SECRET_PROMPT = "the vault code is 8841"

REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    chat.start()
    try:
        yield chat
    finally:
        chat.stop()


def provider(server: ChatServer, **options: Any) -> OpenAIChatProvider:
    options.setdefault("max_retries", 0)
    options.setdefault("api_key", "sk-test")
    return openai_chat(base_url=server.base_url, **options)


def request(
    *messages: Message,
    system: str = "You handle refunds.",
    tools: tuple[ToolSpec, ...] = (),
    model: str = "loop-model",
) -> ProviderRequest:
    if not messages:
        messages = (Message(role="user", content="Hello"),)
    return ProviderRequest(model=model, system=system, messages=messages, tools=tools)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- what is sent ----------------------------------------------------------


async def test_plain_answer_comes_back_as_content(server: ChatServer) -> None:
    """A plain completion becomes a Reply whose content is the message text."""
    server.answer(JsonAnswer(completion("Hi there.")))
    async with provider(server) as model:
        reply = await model.call(request())
    assert "Hi there." == reply.content
    assert () == reply.tool_calls


async def test_system_prompt_is_sent_first_then_the_messages(
    server: ChatServer,
) -> None:
    """G89: .system becomes the first message; user text follows as sent."""
    server.answer(JsonAnswer(completion("ok")))
    async with provider(server) as model:
        await model.call(request(Message(role="user", content="Refund order 7")))
    assert [
        {"role": "system", "content": "You handle refunds."},
        {"role": "user", "content": "Refund order 7"},
    ] == server.requests[0]["messages"]


async def test_empty_system_prompt_sends_no_system_message(
    server: ChatServer,
) -> None:
    """An empty .system is omitted rather than sent as an empty message."""
    server.answer(JsonAnswer(completion("ok")))
    async with provider(server) as model:
        await model.call(request(system=""))
    assert [{"role": "user", "content": "Hello"}] == server.requests[0]["messages"]


async def test_request_model_is_sent_unless_the_provider_names_one(
    server: ChatServer,
) -> None:
    """The loop's model is sent by default; openai_chat(model=...) overrides it."""
    server.answer(JsonAnswer(completion("a")), JsonAnswer(completion("b")))
    async with provider(server) as default, provider(server, model="pinned") as fixed:
        await default.call(request(model="loop-model"))
        await fixed.call(request(model="loop-model"))
    assert ["loop-model", "pinned"] == [r["model"] for r in server.requests]


async def test_tools_are_sent_as_function_definitions_from_the_schema(
    server: ChatServer,
) -> None:
    """Each ToolSpec becomes a function tool whose parameters are its schema."""
    server.answer(JsonAnswer(completion("ok")))
    spec = ToolSpec(
        name="refund", description="Refund an order.", input_schema=REFUND_SCHEMA
    )
    async with provider(server) as model:
        await model.call(request(tools=(spec,)))
    assert [
        {
            "type": "function",
            "function": {
                "name": "refund",
                "description": "Refund an order.",
                "parameters": REFUND_SCHEMA,
            },
        }
    ] == server.requests[0]["tools"]


async def test_no_tools_sends_no_tools_field(server: ChatServer) -> None:
    """A request without tools omits the field (some servers reject [])."""
    server.answer(JsonAnswer(completion("ok")))
    async with provider(server) as model:
        await model.call(request())
    assert "tools" not in server.requests[0]


async def test_tool_round_history_is_sent_in_wire_format(server: ChatServer) -> None:
    """G89: tool calls go with compact-JSON arguments, tool messages with their id."""
    server.answer(JsonAnswer(completion("Refunded.")))
    history = (
        Message(role="user", content="Refund order 7 for €250"),
        Message(
            role="assistant",
            tool_calls=(
                ToolCallRequest(id="c1", name="refund", args={"order": 7, "note": "€"}),
            ),
        ),
        Message(role="tool", content="done", tool_call_id="c1", tool_name="refund"),
        Message(role="assistant", content="Anything else?"),
    )
    async with provider(server) as model:
        await model.call(request(*history))
    assert [
        {"role": "system", "content": "You handle refunds."},
        {"role": "user", "content": "Refund order 7 for €250"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "refund",
                        "arguments": '{"order":7,"note":"€"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": "Anything else?"},
    ] == server.requests[0]["messages"]


async def test_raw_string_arguments_go_back_verbatim(server: ChatServer) -> None:
    """Arguments kept raw (unparseable) are resent as written, not re-encoded."""
    server.answer(JsonAnswer(completion("ok")))
    turn = Message(
        role="assistant",
        content="Trying.",
        tool_calls=(ToolCallRequest(id="c1", name="refund", args='{"order": 7'),),
    )
    async with provider(server) as model:
        await model.call(request(Message(role="user", content="go"), turn))
    sent = server.requests[0]["messages"][2]
    assert "Trying." == sent["content"]
    assert '{"order": 7' == sent["tool_calls"][0]["function"]["arguments"]


async def test_api_key_and_extra_body_are_sent(server: ChatServer) -> None:
    """The key travels as a bearer token; extra_body fields join the body."""
    server.answer(JsonAnswer(completion("ok")))
    options = {"temperature": 0.0, "max_tokens": 64}
    async with provider(server, api_key="sk-local", extra_body=options) as model:
        await model.call(request())
    assert "Bearer sk-local" == server.headers[0]["authorization"]
    assert (0.0, 64) == (
        server.requests[0]["temperature"],
        server.requests[0]["max_tokens"],
    )


# --- what comes back --------------------------------------------------------


async def test_tool_call_reply_is_parsed_into_requests_with_dict_args(
    server: ChatServer,
) -> None:
    """Tool calls become ToolCallRequest values whose args are the parsed JSON."""
    server.answer(
        JsonAnswer(
            completion(
                None,
                tool_calls=[
                    function_call("c1", "refund", '{"order":7,"amount":250}'),
                    function_call("c2", "lookup", ""),
                ],
                finish_reason="tool_calls",
            )
        )
    )
    async with provider(server) as model:
        reply = await model.call(request())
    assert (
        ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 250}),
        ToolCallRequest(id="c2", name="lookup", args={}),
    ) == reply.tool_calls
    assert "" == reply.content


async def test_usage_and_stop_reason_are_mapped(server: ChatServer) -> None:
    """prompt/completion tokens become input/output tokens; finish_reason the stop."""
    server.answer(
        JsonAnswer(
            completion(
                "cut", finish_reason="length", prompt_tokens=11, completion_tokens=2
            )
        )
    )
    async with provider(server) as model:
        reply = await model.call(request())
    assert {"input_tokens": 11, "output_tokens": 2} == reply.usage
    assert "length" == reply.stop_reason


async def test_invalid_json_arguments_are_passed_on_raw(server: ChatServer) -> None:
    """Unparseable arguments stay a str for the loop to refuse, not a crash."""
    server.answer(
        JsonAnswer(
            completion(
                None,
                tool_calls=[function_call("c1", "refund", '{"order": 7,')],
                finish_reason="tool_calls",
            )
        )
    )
    async with provider(server) as model:
        reply = await model.call(request())
    assert (ToolCallRequest(id="c1", name="refund", args='{"order": 7,'),) == (
        reply.tool_calls
    )


# --- streaming --------------------------------------------------------------


async def test_streamed_text_arrives_as_several_tokens(server: ChatServer) -> None:
    """G41: each content delta is one on_token call; together they are the content."""
    server.answer(
        SseAnswer(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Refunded "}),
                chunk({"content": "order "}),
                chunk({"content": "7."}),
                chunk({}, finish_reason="stop"),
                usage_chunk(9, 3),
            ]
        )
    )
    tokens: list[str] = []
    async with provider(server, stream=True) as model:
        reply = await model.call(request(), tokens.append)
    assert ["Refunded ", "order ", "7."] == tokens
    assert "".join(tokens) == reply.content
    assert (True, {"include_usage": True}) == (
        server.requests[0]["stream"],
        server.requests[0]["stream_options"],
    )


async def test_streamed_usage_and_stop_reason_are_mapped(server: ChatServer) -> None:
    """The usage-only final chunk and the finish_reason reach the Reply."""
    server.answer(
        SseAnswer(
            [
                chunk({"content": "Hi"}),
                chunk({}, finish_reason="stop"),
                usage_chunk(9, 3),
            ]
        )
    )
    async with provider(server, stream=True) as model:
        reply = await model.call(request())
    assert {"input_tokens": 9, "output_tokens": 3} == reply.usage
    assert "stop" == reply.stop_reason


async def test_streaming_without_a_token_sink_still_returns_the_content(
    server: ChatServer,
) -> None:
    """G41: with on_token None (drafts held) the reply is whole all the same."""
    server.answer(SseAnswer([chunk({"content": "Hel"}), chunk({"content": "lo"})]))
    async with provider(server, stream=True) as model:
        reply = await model.call(request(), None)
    assert "Hello" == reply.content


async def test_streamed_tool_calls_are_assembled_across_chunks(
    server: ChatServer,
) -> None:
    """Fragments join by index: id and name from the first, arguments concatenated."""

    def fragment(index: int, **parts: Any) -> dict[str, Any]:
        call: dict[str, Any] = {"index": index}
        if "id" in parts:
            call.update(id=parts.pop("id"), type="function")
        call["function"] = parts
        return {"tool_calls": [call]}

    server.answer(
        SseAnswer(
            [
                chunk({"role": "assistant", "content": None}),
                chunk(fragment(0, id="c1", name="refund", arguments="")),
                chunk(fragment(0, arguments='{"ord')),
                chunk(fragment(0, arguments='er": 7, "amo')),
                chunk(fragment(1, id="c2", name="lookup", arguments='{"q"')),
                chunk(fragment(0, arguments='unt": 250}')),
                chunk(fragment(1, arguments=': "order 7"}')),
                chunk({}, finish_reason="tool_calls"),
                usage_chunk(20, 17),
            ]
        )
    )
    tokens: list[str] = []
    async with provider(server, stream=True) as model:
        reply = await model.call(request(), tokens.append)
    assert (
        ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 250}),
        ToolCallRequest(id="c2", name="lookup", args={"q": "order 7"}),
    ) == reply.tool_calls
    assert ([], "", "tool_calls") == (tokens, reply.content, reply.stop_reason)


async def test_streamed_invalid_json_arguments_are_passed_on_raw(
    server: ChatServer,
) -> None:
    """Streamed arguments that never become valid JSON stay the raw str."""
    server.answer(
        SseAnswer(
            [
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "function": {
                                    "name": "refund",
                                    "arguments": '{"order": ',
                                },
                            }
                        ]
                    }
                ),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": "7,"}}]}),
                chunk({}, finish_reason="tool_calls"),
            ]
        )
    )
    async with provider(server, stream=True) as model:
        reply = await model.call(request())
    assert (ToolCallRequest(id="c1", name="refund", args='{"order": 7,'),) == (
        reply.tool_calls
    )


async def test_a_stream_without_choice_indexes_is_read_all_the_same(
    server: ChatServer,
) -> None:
    """Lenient servers omit choice and tool-call indexes; nothing is dropped."""
    bare = [
        {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "Hi"}}]},
        {
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"id": "c1", "function": {"name": "a", "arguments": "{}"}},
                            {"id": "c2", "function": {"name": "b", "arguments": "{}"}},
                        ]
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        },
    ]
    server.answer(SseAnswer(bare))
    async with provider(server, stream=True) as model:
        reply = await model.call(request())
    assert "Hi" == reply.content
    assert (
        ToolCallRequest(id="c1", name="a", args={}),
        ToolCallRequest(id="c2", name="b", args={}),
    ) == reply.tool_calls


async def test_a_reply_without_a_message_becomes_a_provider_error(
    server: ChatServer,
) -> None:
    """A body that is not a chat completion is a ProviderError, not a crash."""
    server.answer(JsonAnswer({"object": "chat.completion", "choices": []}))
    async with provider(server) as model:
        with pytest.raises(ProviderError, match="returned no message"):
            await model.call(request())


async def test_an_error_in_the_token_sink_propagates_untranslated(
    server: ChatServer,
) -> None:
    """Only SDK failures become ProviderError; the caller's own error is its own."""
    server.answer(SseAnswer([chunk({"content": "a"}), chunk({"content": "b"})]))

    def refuse(token: str) -> None:
        raise LookupError(f"sink refused {token!r}")

    async with provider(server, stream=True) as model:
        with pytest.raises(LookupError, match="sink refused 'a'"):
            await model.call(request(), refuse)


# --- failures ---------------------------------------------------------------


async def test_http_500_becomes_a_provider_error_without_the_prompt(
    server: ChatServer,
) -> None:
    """G91: a 5xx is a retryable ProviderError naming endpoint and status only."""
    echo = {"error": {"message": f"could not process: {SECRET_PROMPT}"}}
    server.answer(JsonAnswer(echo, status=500))
    async with provider(server) as model:
        with pytest.raises(ProviderError) as caught:
            await model.call(request(Message(role="user", content=SECRET_PROMPT)))
    error = caught.value
    text = str(error)
    assert (True, "ERR_PROVIDER") == (error.retryable, error.code)
    assert f"{server.base_url}/chat/completions" in text
    assert "500" in text
    assert SECRET_PROMPT not in text
    assert error.__suppress_context__
    assert not isinstance(error.__cause__, openai.OpenAIError)


async def test_streamed_http_500_becomes_a_provider_error(server: ChatServer) -> None:
    """G91: a failure before the stream opens translates the same way."""
    server.answer(JsonAnswer({"error": {"message": SECRET_PROMPT}}, status=503))
    async with provider(server, stream=True) as model:
        with pytest.raises(ProviderError) as caught:
            await model.call(request(Message(role="user", content=SECRET_PROMPT)))
    assert "503" in str(caught.value)
    assert SECRET_PROMPT not in str(caught.value)


async def test_http_400_is_a_provider_error_that_is_not_retryable(
    server: ChatServer,
) -> None:
    """A request the server calls malformed will fail again: retryable is False."""
    body = {"error": {"message": "bad", "type": "invalid_request_error", "code": "x"}}
    server.answer(JsonAnswer(body, status=400))
    async with provider(server) as model:
        with pytest.raises(ProviderError) as caught:
            await model.call(request())
    assert (False, "ERR_PROVIDER") == (caught.value.retryable, caught.value.code)
    assert "400" in str(caught.value)


async def test_connection_refused_becomes_a_provider_error() -> None:
    """G91: an unreachable endpoint is a retryable ProviderError naming it."""
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    async with openai_chat(base_url=base_url, api_key="k", max_retries=0) as model:
        with pytest.raises(ProviderError) as caught:
            await model.call(request(Message(role="user", content=SECRET_PROMPT)))
    assert caught.value.retryable
    assert f"{base_url}/chat/completions" in str(caught.value)
    assert SECRET_PROMPT not in str(caught.value)


async def test_timeout_becomes_a_provider_error(server: ChatServer) -> None:
    """G91: a server that never answers is a retryable ProviderError, not a hang."""
    server.answer(StallAnswer())
    async with provider(server, timeout=0.3) as model:
        with pytest.raises(ProviderError) as caught:
            await model.call(request())
    assert caught.value.retryable
    assert "timed out" in str(caught.value)


# --- construction and lifetime ---------------------------------------------


async def test_openai_chat_is_a_provider(server: ChatServer) -> None:
    """The adapter satisfies the provider port."""
    async with provider(server) as model:
        assert isinstance(model, Provider)


async def test_aclose_closes_only_a_client_it_created(server: ChatServer) -> None:
    """A created client is closed by aclose(); a passed-in one is the caller's."""
    created = provider(server)
    await created.aclose()
    given = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    try:
        server.answer(JsonAnswer(completion("still open")))
        async with openai_chat(client=given) as model:
            reply = await model.call(request())
        assert "still open" == reply.content
        assert not given.is_closed()
    finally:
        await given.close()


def test_client_excludes_base_url_and_api_key() -> None:
    """Two sources of connection settings are refused, not silently merged."""
    with pytest.raises(ValueError, match="not both"):
        openai_chat(client=object(), base_url="http://x/v1")  # type: ignore[arg-type]


def test_missing_api_key_without_base_url_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No key and no local endpoint is a non-retryable ProviderError, early."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderError) as caught:
        openai_chat("gpt-4o-mini")
    assert not caught.value.retryable


# --- through the agent ------------------------------------------------------


def refund_agent(model: OpenAIChatProvider, ran: list[tuple[int, float]]) -> Agent:
    """An agent with one refund tool that logs each run into ``ran``."""

    @tool
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        ran.append((order, amount))
        return f"refunded {amount} on {order}"

    return (
        Agent.create(provider=model, model="served-model")
        .system("You handle refunds.")
        .tool(refund)
        .build()
    )


async def test_an_agent_runs_a_full_tool_round_over_the_endpoint(
    server: ChatServer,
) -> None:
    """G89: the agent's tool round crosses the wire and the answer comes back."""
    server.answer(
        JsonAnswer(
            completion(
                None,
                tool_calls=[function_call("c1", "refund", '{"order":7,"amount":250}')],
                finish_reason="tool_calls",
            )
        ),
        JsonAnswer(completion("Refunded order 7.")),
    )
    ran: list[tuple[int, float]] = []
    async with provider(server) as model:
        agent = refund_agent(model, ran)
        out = await agent.run("Refund order 7 for $250")
    assert "Refunded order 7." == out
    assert [(7, 250.0)] == ran
    first, second = server.requests
    assert ("served-model", ["refund"]) == (
        first["model"],
        [t["function"]["name"] for t in first["tools"]],
    )
    assert {"order", "amount"} == set(
        first["tools"][0]["function"]["parameters"]["properties"]
    )
    assert [
        {"role": "system", "content": "You handle refunds."},
        {"role": "user", "content": "Refund order 7 for $250"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "refund",
                        "arguments": '{"order":7,"amount":250}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "refunded 250.0 on 7"},
    ] == second["messages"]


async def test_an_agent_streams_tokens_from_the_endpoint(server: ChatServer) -> None:
    """G41: a streamed answer reaches listeners as stream.token events."""
    server.answer(
        SseAnswer(
            [
                chunk({"content": "Refunded "}),
                chunk({"content": "order 7."}),
                chunk({}, finish_reason="stop"),
                usage_chunk(9, 3),
            ]
        )
    )
    async with provider(server, stream=True) as model:
        agent = refund_agent(model, [])
        tokens: list[str] = []
        agent.on("stream.token", lambda event: tokens.append(event.content))
        out = await agent.run("Refund order 7")
    assert ("Refunded order 7.", ["Refunded ", "order 7."]) == (out, tokens)


async def test_an_agent_refuses_invalid_json_arguments_with_a_reason(
    server: ChatServer,
) -> None:
    """Broken arguments never run the tool; the model reads why and answers."""
    server.answer(
        JsonAnswer(
            completion(
                None,
                tool_calls=[function_call("c1", "refund", '{"order": 7,')],
                finish_reason="tool_calls",
            )
        ),
        JsonAnswer(completion("Sorry, I could not refund that.")),
    )
    ran: list[tuple[int, float]] = []
    async with provider(server) as model:
        agent = refund_agent(model, ran)
        out = await agent.run("Refund order 7")
    tool_message = server.requests[1]["messages"][-1]
    assert ("Sorry, I could not refund that.", []) == (out, ran)
    assert ("tool", "c1") == (tool_message["role"], tool_message["tool_call_id"])
    assert tool_message["content"].startswith("Invalid arguments for tool 'refund'")
    resent = server.requests[1]["messages"][2]["tool_calls"][0]["function"]
    assert '{"order": 7,' == resent["arguments"]


async def test_an_endpoint_failure_fails_the_run_with_err_provider(
    server: ChatServer,
) -> None:
    """G91: a 500 ends the run with ProviderError and one error.fatal ERR_PROVIDER."""
    server.answer(JsonAnswer({"error": {"message": "overloaded"}}, status=500))
    async with provider(server) as model:
        agent = refund_agent(model, [])
        fatal: list[Any] = []
        agent.on("error.fatal", fatal.append)
        with pytest.raises(ProviderError):
            await agent.run(SECRET_PROMPT)
    assert ["ERR_PROVIDER"] == [event.code for event in fatal]
