"""The OpenAI-compatible provider: Chat Completions over the ``openai`` SDK.

Pattern: an adapter on ``SdkProvider`` (``_sdk.py``): a ``ProviderRequest`` to
         the Chat Completions wire format, the answer back to a ``Reply``.
Role:    runtime layer; OpenAI, vLLM, Ollama and any server speaking
         ``POST /v1/chat/completions``.

Laws: G89 (``.system`` is the one system message, first, only when
non-empty), G92 (an answer's schema as ``response_format``), G41
(``on_token`` only when the loop passes one), G91 and issue 12 item 5
(failures and unreadable replies are ``ProviderError``s naming the endpoint:
an SDK error's text may quote the prompt).
Why invalid JSON arguments pass on raw: the loop's argument validation
refuses the call with a reason the model reads and can correct.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from helmlog.events import Message, ToolCallRequest
from helmlog.events.lowlevel import compact_json

from .._errors import ProviderError
from ._base import OutputSchema, ProviderRequest, Reply, TokenSink, ToolSpec
from ._sdk import SdkProvider
from ._wire import call_id as _call_id
from ._wire import (
    client_for,
    model_of,
    not_a_reply,
    require_event_stream,
)
from ._wire import parse_args as _parse_args

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": message.content,
        }
    if message.role == "assistant":
        if not message.tool_calls:
            return {"role": "assistant", "content": message.content}
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments(call)},
                }
                for call in message.tool_calls
            ],
        }
    raise ValueError(
        f"a provider request cannot carry a message with role {message.role!r} "
        "(G89: the system prompt travels as .system)"
    )


def _arguments(call: ToolCallRequest) -> str:
    # A raw string is what an earlier reply could not parse (see _parse_args);
    # it goes back verbatim so the model sees what it wrote.
    if isinstance(call.args, str):
        return call.args
    return compact_json(call.args)


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": dict(spec.input_schema),
        },
    }


def json_schema_format(output: OutputSchema) -> dict[str, Any]:
    """An answer's schema as OpenAI's ``json_schema`` format (G92).

    Not ``strict``: strict mode accepts only a subset of JSON Schema (every
    property required, no open objects), and the loop validates every answer
    itself; the schema guides the model, the loop enforces it.
    """
    wire: dict[str, Any] = {
        "name": output.name,
        "schema": dict(output.schema),
        "strict": False,
    }
    if output.description:
        wire["description"] = output.description
    return wire


def _usage(usage: Any) -> dict[str, int]:
    if usage is None:
        return {}
    out: dict[str, int] = {}
    if getattr(usage, "prompt_tokens", None) is not None:
        out["input_tokens"] = int(usage.prompt_tokens)
    if getattr(usage, "completion_tokens", None) is not None:
        out["output_tokens"] = int(usage.completion_tokens)
    return out


class _ToolCallDraft:
    """One streamed tool call, assembled from its fragments."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name = ""
        self.arguments: list[str] = []

    def finish(self) -> ToolCallRequest:
        return ToolCallRequest(
            id=_call_id(self.id),
            name=self.name,
            args=_parse_args("".join(self.arguments)),
        )


class _StreamAssembly:
    """One streamed reply, built chunk by chunk."""

    def __init__(self, on_token: TokenSink | None) -> None:
        self._on_token = on_token
        self._content: list[str] = []
        self._drafts: dict[int, _ToolCallDraft] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self.model: str | None = None

    def feed(self, chunk: Any) -> list[str]:
        """Take one chunk in; return its text deltas, for ``on_token``.

        Reading the chunk may raise ``SHAPE_ERRORS`` (the server's fault);
        the caller reports the deltas afterwards, so a raise from
        ``on_token`` is never mistaken for one.
        """
        texts: list[str] = []
        if isinstance(chunk.model, str) and chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        for choice in chunk.choices or ():
            # Servers that send one choice may leave out its index.
            if choice.index not in (0, None) or choice.delta is None:
                continue
            if choice.finish_reason is not None:
                self._stop_reason = choice.finish_reason
            if choice.delta.content:
                self._content.append(str(choice.delta.content))
                texts.append(str(choice.delta.content))
            for fragment in choice.delta.tool_calls or ():
                self._feed_tool_call(fragment)
        return texts

    def report(self, texts: list[str]) -> None:
        if self._on_token is not None:
            for text in texts:
                self._on_token(text)

    def _feed_tool_call(self, fragment: Any) -> None:
        # Invariant: fragments of one call share an index; id and name come
        # with the first, arguments arrive in pieces to be concatenated.
        index = fragment.index
        if index is None:  # lenient servers send whole calls without one
            index = max(self._drafts, default=-1) + 1
        draft = self._drafts.setdefault(index, _ToolCallDraft())
        if fragment.id:
            draft.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and not draft.name:
                draft.name = function.name
            if function.arguments:
                draft.arguments.append(function.arguments)

    def reply(self, sent_model: str) -> Reply:
        return Reply(
            content="".join(self._content),
            tool_calls=[self._drafts[i].finish() for i in sorted(self._drafts)],
            usage=self._usage,
            stop_reason=self._stop_reason,
            model=model_of(self.model, sent_model),
        )


class OpenAIChatProvider(SdkProvider):
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    Build one with ``openai_chat(...)``. Use it as an async context manager,
    or call ``aclose()`` when done, to close the HTTP client it created; a
    client passed in is the caller's to close.
    """

    sdk = openai
    sdk_error = openai.OpenAIError
    path = "/chat/completions"
    api = "Chat Completions"
    provider_name = "openai"  # the API's flavour, whoever serves it (semconv)

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend(_wire_message(m) for m in request.messages)
        params: dict[str, Any] = {
            "model": self.model or request.model,
            "messages": messages,
        }
        if request.tools:
            params["tools"] = [_wire_tool(t) for t in request.tools]
        if request.output is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": json_schema_format(request.output),
            }
        if self._extra_body:
            params["extra_body"] = self._extra_body
        return params

    async def _call_complete(self, params: dict[str, Any]) -> Reply:
        completion = await self._create(self._client.chat.completions.create, **params)
        # The SDK builds replies leniently: a non-JSON body comes back as a
        # str, and a field a server left out is None.
        if not isinstance(completion, ChatCompletion):
            raise not_a_reply(self.endpoint, completion, ChatCompletion)
        return self._shaped(self._read, completion, params["model"])

    def _read(self, completion: Any, sent_model: str) -> Reply:
        if not completion.choices or completion.choices[0].message is None:
            raise ProviderError(f"{self.endpoint} returned no message")
        choice = completion.choices[0]
        calls: list[ToolCallRequest] = []
        for tc in choice.message.tool_calls or ():
            function = getattr(tc, "function", None)
            if function is not None:
                name, raw = function.name, function.arguments
            else:  # a custom (free-text) tool call: its input is the raw args
                name, raw = tc.custom.name, tc.custom.input
            calls.append(
                ToolCallRequest(id=_call_id(tc.id), name=name, args=_parse_args(raw))
            )
        return Reply(
            content=choice.message.content or "",
            tool_calls=calls,
            usage=_usage(completion.usage),
            stop_reason=choice.finish_reason,
            model=model_of(completion.model, sent_model),
        )

    async def _call_streamed(
        self, params: dict[str, Any], on_token: TokenSink | None
    ) -> Reply:
        stream = await self._create(
            self._client.chat.completions.create,
            **params,
            stream=True,
            stream_options={"include_usage": True},
        )
        assembly = _StreamAssembly(on_token)
        try:
            require_event_stream(self.endpoint, stream.response)
            async with contextlib.aclosing(self._items(stream)) as chunks:
                async for chunk in chunks:
                    if not isinstance(chunk, ChatCompletionChunk):
                        raise not_a_reply(self.endpoint, chunk, ChatCompletionChunk)
                    texts = self._shaped(assembly.feed, chunk, what=" stream")
                    assembly.report(texts)
        finally:
            await stream.close()
        return assembly.reply(params["model"])

    def _failure(self, exc: Exception) -> ProviderError:
        if isinstance(exc, json.JSONDecodeError) and self.stream:
            return ProviderError(f"{self.endpoint} sent a malformed stream event")
        return super()._failure(exc)


def openai_chat(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    client: openai.AsyncOpenAI | None = None,
    stream: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    extra_body: Mapping[str, Any] | None = None,
) -> OpenAIChatProvider:
    """A provider for any OpenAI-compatible Chat Completions endpoint.

    Args:
        model: the model name sent; when ``None``, the loop's ``model=`` is.
        base_url: the API root, e.g. ``http://localhost:8000/v1`` (vLLM) or
            ``http://localhost:11434/v1`` (Ollama); default OpenAI's.
        api_key: the key; default ``OPENAI_API_KEY``. A ``base_url`` without
            a key sends a placeholder, as local servers need none.
        client: an ``openai.AsyncOpenAI`` to use instead of building one; the
            caller closes it. Excludes ``base_url`` and ``api_key``.
        stream: stream the reply, reporting content deltas to ``on_token``.
        timeout: seconds per HTTP request.
        max_retries: the SDK's retries on connection errors, 408, 429, 5xx.
        extra_body: extra JSON fields merged into every request body
            (``temperature``, ``max_tokens``, server-specific options).

    Raises:
        ValueError: ``client`` given together with ``base_url`` or ``api_key``.
        ProviderError: no key given or found and no ``base_url`` (not
            retryable).
    """
    sdk, owned = client_for(
        "openai_chat",
        client,
        base_url,
        api_key,
        "OPENAI_API_KEY",
        lambda key: openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        ),
    )
    return OpenAIChatProvider(
        sdk, model=model, stream=stream, extra_body=extra_body, owns_client=owned
    )
