"""The OpenAI Responses provider: ``POST /v1/responses`` over the ``openai`` SDK.

Pattern: an adapter behind the provider port; translates a ``ProviderRequest``
         to Responses input items and the response's output items back to a
         ``Reply``, streamed or complete.
Role:    runtime layer; the model for OpenAI's Responses API and servers that
         speak it.
Emits:   nothing itself; with ``stream=True`` it reports
         ``response.output_text.delta`` texts through ``on_token``.

Laws: G89 (``.system`` travels as ``instructions``; assistant tool calls are
``function_call`` items and tool messages ``function_call_output`` items, by
call id; an answer's schema is ``text.format``, ``json_schema``: G92), G41
(``on_token`` only when the loop passes one), G91 and issue 12
item 5 (every failure, and every reply it cannot read, is a
``ProviderError``; the reply carries the model the server reports).

Why stateless (``store=False``, the whole history every call, no
``previous_response_id``): the session stream is the truth (R1). A response
kept on the server would be a second record helmlog does not govern, and a
resumed or failed-over session must be able to call the model from its
stream alone.

Why the streamed reply is read from ``response.completed``: that event holds
the whole response (output items, usage, model), so a streamed and a complete
call end in the same reader; the deltas only feed ``on_token``. A stream that
ends without it (or with ``response.failed``) did not produce a reply.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import openai
from openai.types.responses import Response

from helmlog.events import Message, ProviderError, ToolCallRequest

from ._base import ProviderRequest, Reply, TokenSink, ToolSpec
from ._openai import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    _arguments,
    json_schema_format,
)
from ._wire import (
    SHAPE_ERRORS,
    SdkProvider,
    call_id,
    client_for,
    endpoint_of,
    misshapen,
    model_of,
    not_a_reply,
    parse_args,
    require_event_stream,
    sdk_failure,
)


def _input_items(message: Message) -> list[dict[str, Any]]:
    if message.role == "user":
        return [{"role": "user", "content": message.content}]
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content,
            }
        ]
    if message.role == "assistant":
        items: list[dict[str, Any]] = []
        if message.content or not message.tool_calls:
            items.append({"role": "assistant", "content": message.content})
        items.extend(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": _arguments(call),
            }
            for call in message.tool_calls
        )
        return items
    raise ValueError(
        f"a provider request cannot carry a message with role {message.role!r} "
        "(G89: the system prompt travels as .system)"
    )


def _wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.input_schema),
    }


def _usage(usage: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if usage is None:
        return out
    if getattr(usage, "input_tokens", None) is not None:
        out["input_tokens"] = int(usage.input_tokens)
    if getattr(usage, "output_tokens", None) is not None:
        out["output_tokens"] = int(usage.output_tokens)
    return out


class OpenAIResponsesProvider(SdkProvider):
    """A model behind the OpenAI Responses API (``POST /v1/responses``).

    Build one with ``openai_responses(...)``; close it as ``OpenAIChatProvider``
    is closed (``aclose()`` or ``async with``).
    """

    sdk = openai
    sdk_error = openai.OpenAIError

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        model: str | None = None,
        stream: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(
            client,
            endpoint_of(client.base_url, "/responses"),
            model=model,
            stream=stream,
            extra_body=extra_body,
            owns_client=owns_client,
        )

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for m in request.messages:
            items.extend(_input_items(m))
        params: dict[str, Any] = {
            "model": self.model or request.model,
            "input": items,
            "store": False,
        }
        if request.system:
            params["instructions"] = request.system
        if request.tools:
            params["tools"] = [_wire_tool(t) for t in request.tools]
        if request.output is not None:
            params["text"] = {
                "format": {"type": "json_schema", **json_schema_format(request.output)}
            }
        if self._extra_body:
            params["extra_body"] = self._extra_body
        return params

    async def _call_complete(self, params: dict[str, Any]) -> Reply:
        try:
            response = await self._client.responses.create(**params)
        except (openai.OpenAIError, json.JSONDecodeError) as exc:
            raise sdk_failure(self.endpoint, exc, openai) from None
        return self._reply(response, params["model"])

    def _reply(self, response: object, sent_model: str) -> Reply:
        if not isinstance(response, Response):
            raise not_a_reply(self.endpoint, response, Response)
        try:
            return self._read(response, sent_model)
        except SHAPE_ERRORS as exc:
            raise misshapen(self.endpoint, exc, "Responses") from None

    def _read(self, response: Response, sent_model: str) -> Reply:
        if response.status == "failed" or response.error is not None:
            code = getattr(response.error, "code", None)
            raise ProviderError(
                f"{self.endpoint} answered a failed response"
                + (f" (code {code})" if isinstance(code, str) else "")
            )
        if response.output is None:
            raise ProviderError(f"{self.endpoint} returned no output")
        texts: list[str] = []
        calls: list[ToolCallRequest] = []
        for item in response.output:
            if item.type == "message":
                texts.extend(
                    part.text for part in item.content if part.type == "output_text"
                )
            elif item.type == "function_call":
                calls.append(
                    ToolCallRequest(
                        id=call_id(item.call_id),
                        name=item.name,
                        args=parse_args(item.arguments),
                    )
                )
        stop: str | None = None
        if response.status == "incomplete":
            details = response.incomplete_details
            stop = getattr(details, "reason", None) or "incomplete"
        return Reply(
            content="".join(texts),
            tool_calls=calls,
            usage=_usage(response.usage),
            stop_reason=stop,
            model=model_of(response.model, sent_model),
        )

    async def _call_streamed(
        self, params: dict[str, Any], on_token: TokenSink | None
    ) -> Reply:
        try:
            stream = await self._client.responses.create(**params, stream=True)
        except (openai.OpenAIError, json.JSONDecodeError) as exc:
            raise sdk_failure(self.endpoint, exc, openai) from None
        final: object = None
        try:
            require_event_stream(self.endpoint, stream.response)
            async with contextlib.aclosing(self._items(stream)) as events:
                async for event in events:
                    kind = getattr(event, "type", None)
                    if kind == "response.output_text.delta":
                        delta = getattr(event, "delta", None)
                        if isinstance(delta, str) and delta and on_token is not None:
                            on_token(delta)
                    elif kind in ("response.completed", "response.incomplete"):
                        final = getattr(event, "response", None)
                    elif kind in ("response.failed", "error"):
                        raise ProviderError(
                            f"{self.endpoint} answered a failed response ({kind})"
                        )
        finally:
            await stream.close()
        if final is None:
            raise ProviderError(
                f"{self.endpoint}'s stream ended before its response was complete"
            )
        return self._reply(final, params["model"])


def openai_responses(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    client: openai.AsyncOpenAI | None = None,
    stream: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    extra_body: Mapping[str, Any] | None = None,
) -> OpenAIResponsesProvider:
    """A provider for the OpenAI Responses API.

    Args:
        model: the model name sent; when ``None``, the loop's ``model=`` is.
        base_url: the API root (``.../v1``); default OpenAI's.
        api_key: the key; default ``OPENAI_API_KEY``. A ``base_url`` without
            a key sends a placeholder, as local servers need none.
        client: an ``openai.AsyncOpenAI`` to use instead of building one; the
            caller closes it. Excludes ``base_url`` and ``api_key``.
        stream: stream the reply, reporting text deltas to ``on_token``.
        timeout: seconds per HTTP request.
        max_retries: the SDK's retries on connection errors, 408, 429, 5xx.
        extra_body: extra JSON fields merged into every request body
            (``temperature``, ``max_output_tokens``, ``reasoning``).

    Raises:
        ValueError: ``client`` given together with ``base_url`` or ``api_key``.
        ProviderError: no key given or found and no ``base_url`` (not
            retryable).
    """
    sdk, owned = client_for(
        "openai_responses",
        client,
        base_url,
        api_key,
        "OPENAI_API_KEY",
        lambda key: openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        ),
    )
    return OpenAIResponsesProvider(
        sdk, model=model, stream=stream, extra_body=extra_body, owns_client=owned
    )
