"""The provider port: what the loop sends a model and what comes back.

Pattern: a port with one method; adapters are ``scripted`` (the embedded
         default and the test double), ``openai_chat``, ``openai_responses``
         and ``anthropic_messages``.
Role:    runtime layer; the loop builds a ``ProviderRequest`` per model call
         and awaits ``Provider.call``.
Emits:   nothing itself; the loop turns chunks into ``stream.token`` events.

Laws: G89 (a request is ``.system`` plus ``.messages``, no system entry),
G41 (a streaming provider reports chunks through ``on_token``; the loop
passes ``None`` while drafts are held, so both kinds behave alike).

Why one ``call`` with an optional token callback rather than two methods:
the loop's holding rule (G41) is then one ``if`` in one place, and an
adapter that cannot stream simply never calls the callback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from helmlog.events import Message, ToolCallRequest

TokenSink = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model is told about it: name, description, JSON schema."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderRequest:
    """One model call's input (G89)."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Reply:
    """One model reply: text and/or tool calls, with usage and stop reason.

    ``model`` is the model that answered, as the server reported it (else the
    one the request named); ``None`` from a provider that cannot tell, such
    as ``scripted``. The loop records it on ``stream.llm_end``.
    """

    content: str
    tool_calls: tuple[ToolCallRequest, ...]
    usage: Mapping[str, int]
    stop_reason: str | None
    model: str | None

    def __init__(
        self,
        content: str = "",
        tool_calls: Iterable[ToolCallRequest] = (),
        usage: Mapping[str, int] | None = None,
        stop_reason: str | None = None,
        model: str | None = None,
    ) -> None:
        if not isinstance(content, str):
            raise TypeError(
                f"Reply.content must be a str, got {type(content).__name__}"
            )
        calls = tuple(tool_calls)
        for call in calls:
            if not isinstance(call, ToolCallRequest):
                raise TypeError("Reply.tool_calls must hold ToolCallRequest values")
        object.__setattr__(self, "content", content)
        object.__setattr__(self, "tool_calls", calls)
        object.__setattr__(self, "usage", dict(usage or {}))
        object.__setattr__(
            self, "stop_reason", stop_reason or ("tool_calls" if calls else "stop")
        )
        object.__setattr__(self, "model", model or None)


@runtime_checkable
class Provider(Protocol):
    """A model. ``call`` returns the whole reply; chunks go to ``on_token``."""

    async def call(
        self, request: ProviderRequest, on_token: TokenSink | None = None
    ) -> Reply:
        """Make one model call."""
        ...
