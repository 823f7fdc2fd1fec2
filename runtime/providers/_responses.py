"""The OpenAI Responses provider: ``POST /v1/responses`` over the ``openai`` SDK.

Pattern: an adapter on ``SdkProvider`` (``_sdk.py``): a ``ProviderRequest`` to
         input items, the response's output items back to a ``Reply``.
Role:    runtime layer; OpenAI's Responses API and servers that speak it.

Laws: G89 (``.system`` as ``instructions``; ``function_call`` and
``function_call_output`` items by call id), G92 (``text.format``), G41, G91
and issue 12 item 5 (every failure or unreadable reply is a ``ProviderError``).
Why stateless (``store=False``, the whole history each call): the session
stream is the truth (R1); a response kept on the server would be an
ungoverned second record. A streamed reply is read from
``response.completed``, so streamed and complete calls share one reader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import openai
from openai.types.responses import Response

from helmlog.events import Message, ToolCallRequest

from .._errors import ProviderError
from ._base import ProviderRequest, Reply, TokenSink, ToolSpec
from ._openai import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    _arguments,
    json_schema_format,
)
from ._sdk import SdkProvider
from ._wire import (
    call_id,
    client_for,
    model_of,
    not_a_reply,
    parse_args,
    require_event_stream,
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
    path = "/responses"
    api = "Responses"
    provider_name = "openai"

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
        response = await self._create(self._client.responses.create, **params)
        return self._reply(response, params["model"])

    def _reply(self, response: object, sent_model: str) -> Reply:
        if not isinstance(response, Response):
            raise not_a_reply(self.endpoint, response, Response)
        return self._shaped(self._read, response, sent_model)

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
        stream = await self._create(
            self._client.responses.create, **params, stream=True
        )
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
