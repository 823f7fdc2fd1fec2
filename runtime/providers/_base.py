"""The provider port: what the loop sends a model and what comes back.

Pattern: a port with one method; adapters are ``scripted``, ``openai_chat``,
         ``openai_responses`` and ``anthropic_messages``.
Role:    runtime layer; the loop builds a ``ProviderRequest`` per model call.
Emits:   nothing itself; the loop turns chunks into ``stream.token`` events.

Laws: G89 (``.system`` plus ``.messages``), G92 (``.output`` schema), G41 (a
streaming provider reports chunks through ``on_token``; ``None`` while drafts
are held).

Why one ``call`` with an optional token callback: the holding rule (G41) is
one ``if`` in one place; an adapter that cannot stream never calls it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import msgspec

from helmlog.events import Message, ToolCallRequest

TokenSink = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model is told about it: name, description, JSON schema."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class OutputSchema:
    """The shape the answer must have, for providers with native structured
    output (G92): a name (``[A-Za-z0-9_-]``, at most 64), the JSON Schema of
    the answer (its root is inlined: no top-level ``$ref``) and a description.

    A provider that cannot enforce it ignores it; the loop validates every
    answer either way.
    """

    name: str
    schema: Mapping[str, Any]
    description: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderRequest:
    """One model call's input (G89); ``output`` is the answer's schema when the
    agent has an ``output_type`` (G92)."""

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    output: OutputSchema | None = None

    def __init__(
        self,
        model: str,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...] = (),
        output: OutputSchema | None = None,
    ) -> None:
        # The dataclass's own ``__init__``, through the slots' setters (the
        # frozen class's setattr refuses; ``object.__setattr__`` is slower):
        # the loop builds one per model call (bench/turns.py).
        _request_setters[0](self, model)
        _request_setters[1](self, system)
        _request_setters[2](self, messages)
        _request_setters[3](self, tools)
        _request_setters[4](self, output)


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Reply:
    """One model reply: text and/or tool calls, with usage and stop reason.

    ``model`` is the model that answered, as the server reported it (else the
    one the request named); ``None`` from a provider that cannot tell, such
    as ``scripted``. The loop records it on ``stream.llm_end``.

    ``output=`` (instead of ``content``) is a structured answer: a dict, a
    msgspec Struct, a dataclass or a Pydantic model, encoded to JSON as the
    content (G92; what a provider with native structured output returns).
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
        *,
        output: Any = None,
    ) -> None:
        if output is not None:
            if content:
                raise TypeError("Reply takes content or output=, not both")
            content = encode_output(output)
        if not isinstance(content, str):
            raise TypeError(
                f"Reply.content must be a str, got {type(content).__name__}"
            )
        calls = tuple(tool_calls)
        for call in calls:
            if type(call) is not ToolCallRequest and not isinstance(
                call, ToolCallRequest
            ):
                raise TypeError("Reply.tool_calls must hold ToolCallRequest values")
        # Through the slots' setters, as ``ProviderRequest`` (one per call).
        setters = _reply_setters
        setters[0](self, content)
        setters[1](self, calls)
        setters[2](self, dict(usage) if usage else {})
        setters[3](self, stop_reason or ("tool_calls" if calls else "stop"))
        setters[4](self, model or None)


def _slot_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The slots' own setters of a frozen slotted dataclass, in field order."""
    return tuple(vars(cls)[f.name].__set__ for f in dataclasses.fields(cls))


_request_setters = _slot_setters(ProviderRequest)
_reply_setters = _slot_setters(Reply)


def encode_output(value: Any) -> str:
    """A structured answer as compact JSON text (a Pydantic model by its own
    encoder, anything else by msgspec's)."""
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(
            f"Reply(output=...) takes a JSON-encodable value, got "
            f"{type(value).__name__} ({exc})"
        ) from None


def name_of(provider: object) -> str:
    """The provider's ``gen_ai.provider.name`` as the record keeps it: its
    ``provider_name`` attribute (``openai``, ``anthropic``, ...), ``""`` when
    it has none (a provider of your own may set one; the port does not ask)."""
    name = getattr(provider, "provider_name", "")
    return name if isinstance(name, str) else ""


@runtime_checkable
class Provider(Protocol):
    """A model. ``call`` returns the whole reply; chunks go to ``on_token``.

    Optional: a ``provider_name`` str, recorded on ``agent.turn_start`` and
    ``stream.llm_start`` for telemetry (``gen_ai.provider.name``).
    """

    async def call(
        self, request: ProviderRequest, on_token: TokenSink | None = None
    ) -> Reply:
        """Make one model call."""
        ...
