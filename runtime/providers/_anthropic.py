"""The Anthropic provider: Messages (``POST /v1/messages``) over the ``anthropic`` SDK.

Pattern: an adapter on ``SdkProvider`` (``_sdk.py``): a ``ProviderRequest``
         to content blocks, the reply's blocks back to a ``Reply``.
Role:    runtime layer; Anthropic's Messages API and servers that speak it.

Laws: G89 (``.system`` as ``system``; ``tool_use``/``tool_result`` blocks),
G41 (``on_token`` only when the loop passes one), G91 and issue 12 item 5
(every failure or unreadable reply is a ``ProviderError``), G92 (an answer's
schema is a forced tool: the Messages API has no response format).
Why turns of one role are merged: the API wants user and assistant to
alternate; a batch's tool results travel as one user turn. ``stop_reason`` is
passed on as Anthropic names it (translating would lose ``pause_turn``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import anthropic
import msgspec
from anthropic.types import Message as AnthropicMessage

from helmlog.events import Message, ToolCallRequest

from .._errors import ProviderError
from ._base import ProviderRequest, Reply, TokenSink, ToolSpec
from ._sdk import SdkProvider
from ._wire import (
    call_id,
    client_for,
    model_of,
    not_a_reply,
    parse_args,
    require_event_stream,
)

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_TOKENS = 4096
OUTPUT_TOOL = "final_result"
"""The synthetic tool an answer's schema travels as (G92), renamed
``final_result_1``, ... when the agent has a tool of that name."""


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "user":
        return "user", [{"type": "text", "text": message.content}]
    if message.role == "tool":
        return "user", [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
        ]
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": call.args if isinstance(call.args, dict) else {},
            }
            for call in message.tool_calls
        )
        if not blocks:
            blocks.append({"type": "text", "text": ""})
        return "assistant", blocks
    raise ValueError(
        f"a provider request cannot carry a message with role {message.role!r} "
        "(G89: the system prompt travels as .system)"
    )


def wire_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The Messages API's alternating turns for a history (see the module)."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        role, blocks = _blocks(m)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    return turns


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
    }


def _output_tool(request: ProviderRequest) -> dict[str, Any] | None:
    """The answer's schema as a tool the model is made to call (G92), or
    ``None``: no schema, or one whose root is not an object (a tool's
    ``input_schema`` must be one; the loop still validates the answer)."""
    output = request.output
    if output is None or output.schema.get("type") != "object":
        return None
    taken = {t.name for t in request.tools}
    name, n = OUTPUT_TOOL, 0
    while name in taken:
        n += 1
        name = f"{OUTPUT_TOOL}_{n}"
    return {
        "name": name,
        "description": output.description
        or "Give your final answer: call this with it, as its input.",
        "input_schema": dict(output.schema),
    }


def _answered(
    content: str, calls: list[ToolCallRequest], output_tool: str | None
) -> tuple[str, list[ToolCallRequest]]:
    """The reply's text and calls, with a call of the output tool read as the
    answer: its input, as JSON, is the text. A reply that also calls real
    tools keeps those (the model answers after their results) and drops the
    early answer."""
    if output_tool is None or not any(c.name == output_tool for c in calls):
        return content, calls
    others = [c for c in calls if c.name != output_tool]
    if others:
        return content, others
    args = [c for c in calls if c.name == output_tool][-1].args
    return (args if isinstance(args, str) else msgspec.json.encode(args).decode()), []


def _forced(params: dict[str, Any]) -> str | None:
    """The output tool ``_params`` appended last, when it forced one."""
    if "tool_choice" not in params:
        return None
    return str(params["tools"][-1]["name"])


def _usage(usage: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if usage is None:
        return out
    if getattr(usage, "input_tokens", None) is not None:
        out["input_tokens"] = int(usage.input_tokens)
    if getattr(usage, "output_tokens", None) is not None:
        out["output_tokens"] = int(usage.output_tokens)
    return out


class _Block:
    """One streamed content block: text, or a tool call's JSON in pieces."""

    __slots__ = ("id", "json", "kind", "name", "text")

    def __init__(self, kind: str, id: str | None = None, name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.text: list[str] = []
        self.json: list[str] = []


class _StreamAssembly:
    """One streamed Messages reply, built event by event."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.model: str | None = None
        self.stopped = False

    def feed(self, event: Any) -> str | None:
        """Take one event in; return its text delta, if it carries one."""
        kind = event.type
        if kind == "message_start":
            self.model = event.message.model
            self.usage.update(_usage(event.message.usage))
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = _Block(
                block.type, getattr(block, "id", None), getattr(block, "name", "")
            )
        elif kind == "content_block_delta":
            delta = event.delta
            held = self.blocks.setdefault(event.index, _Block("text"))
            if delta.type == "text_delta":
                held.text.append(delta.text)
                return str(delta.text)
            if delta.type == "input_json_delta":
                held.json.append(delta.partial_json)
        elif kind == "message_delta":
            if event.delta.stop_reason is not None:
                self.stop_reason = event.delta.stop_reason
            if getattr(event.usage, "output_tokens", None) is not None:
                self.usage["output_tokens"] = int(event.usage.output_tokens)
        elif kind == "message_stop":
            self.stopped = True
        return None

    def reply(self, sent_model: str, output_tool: str | None) -> Reply:
        texts: list[str] = []
        calls: list[ToolCallRequest] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind == "text":
                texts.extend(block.text)
            elif block.kind == "tool_use":
                calls.append(
                    ToolCallRequest(
                        id=call_id(block.id),
                        name=block.name,
                        args=parse_args("".join(block.json)),
                    )
                )
        content, calls = _answered("".join(texts), calls, output_tool)
        return Reply(
            content=content,
            tool_calls=calls,
            usage=self.usage,
            stop_reason=self.stop_reason,
            model=model_of(self.model, sent_model),
        )


class AnthropicMessagesProvider(SdkProvider):
    """A model behind the Anthropic Messages API.

    Build one with ``anthropic_messages(...)``; close it with ``aclose()`` or
    ``async with``; a client passed in is the caller's to close.
    """

    sdk = anthropic
    sdk_error = anthropic.AnthropicError
    path = "/v1/messages"
    api = "Messages"
    provider_name = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        model: str | None = None,
        stream: bool = False,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        extra_body: Mapping[str, Any] | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(
            client,
            model=model,
            stream=stream,
            extra_body=extra_body,
            owns_client=owns_client,
        )
        self.max_tokens = max_tokens

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model or request.model,
            "max_tokens": self.max_tokens,
            "messages": wire_messages(request.messages),
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [_wire_tool(t) for t in request.tools]
        output = _output_tool(request)
        if output is not None:
            params["tools"] = [*params.get("tools", ()), output]
            # With tools of its own the model may still call them: "any" tool,
            # the answer being one of them; else the answer tool itself.
            params["tool_choice"] = (
                {"type": "any"}
                if request.tools
                else {"type": "tool", "name": output["name"]}
            )
        if self._extra_body:
            params["extra_body"] = self._extra_body
        return params

    async def _call_complete(self, params: dict[str, Any]) -> Reply:
        message = await self._create(self._client.messages.create, **params)
        if not isinstance(message, AnthropicMessage):
            raise not_a_reply(self.endpoint, message, AnthropicMessage)
        return self._shaped(self._read, message, params["model"], _forced(params))

    def _read(
        self, message: AnthropicMessage, sent_model: str, output_tool: str | None
    ) -> Reply:
        if message.content is None:
            raise ProviderError(f"{self.endpoint} returned no content")
        texts: list[str] = []
        calls: list[ToolCallRequest] = []
        for block in message.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                args = block.input if block.input is not None else {}
                calls.append(
                    ToolCallRequest(id=call_id(block.id), name=block.name, args=args)
                )
        content, calls = _answered("".join(texts), calls, output_tool)
        return Reply(
            content=content,
            tool_calls=calls,
            usage=_usage(message.usage),
            stop_reason=message.stop_reason,
            model=model_of(message.model, sent_model),
        )

    async def _call_streamed(
        self, params: dict[str, Any], on_token: TokenSink | None
    ) -> Reply:
        stream = await self._create(self._client.messages.create, **params, stream=True)
        assembly = _StreamAssembly()
        try:
            require_event_stream(self.endpoint, stream.response)
            async with contextlib.aclosing(self._items(stream)) as events:
                async for event in events:
                    text = self._shaped(assembly.feed, event, what=" stream")
                    if text and on_token is not None:
                        on_token(text)
        finally:
            await stream.close()
        if not assembly.stopped:
            raise ProviderError(f"{self.endpoint}'s stream ended before message_stop")
        return assembly.reply(params["model"], _forced(params))


def anthropic_messages(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    client: anthropic.AsyncAnthropic | None = None,
    stream: bool = False,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout: float = DEFAULT_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    extra_body: Mapping[str, Any] | None = None,
) -> AnthropicMessagesProvider:
    """A provider for the Anthropic Messages API.

    Args:
        model: the model name sent; when ``None``, the loop's ``model=`` is.
        base_url: the API root (without ``/v1``); default Anthropic's.
        api_key: the key; default ``ANTHROPIC_API_KEY``. A ``base_url``
            without a key sends a placeholder, as local servers need none.
        client: an ``anthropic.AsyncAnthropic`` to use instead of building
            one; the caller closes it. Excludes ``base_url`` and ``api_key``.
        stream: stream the reply, reporting text deltas to ``on_token``.
        max_tokens: the reply's token ceiling (the API requires one).
        timeout: seconds per HTTP request.
        max_retries: the SDK's retries on connection errors, 408, 429, 5xx.
        extra_body: extra JSON fields merged into every request body
            (``temperature``, ``thinking``, ``metadata``).

    Raises:
        ValueError: ``client`` given together with ``base_url`` or
            ``api_key``, or ``max_tokens`` below 1.
        ProviderError: no key given or found and no ``base_url`` (not
            retryable).
    """
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError("anthropic_messages(): max_tokens must be an int >= 1")
    sdk, owned = client_for(
        "anthropic_messages",
        client,
        base_url,
        api_key,
        "ANTHROPIC_API_KEY",
        lambda key: anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        ),
    )
    return AnthropicMessagesProvider(
        sdk,
        model=model,
        stream=stream,
        max_tokens=max_tokens,
        extra_body=extra_body,
        owns_client=owned,
    )
