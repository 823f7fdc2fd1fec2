"""helmlog.runtime.providers — models the loop can call.

``scripted(...)`` is the embedded default and the test double;
``openai_chat(...)`` speaks to any OpenAI-compatible Chat Completions endpoint,
``openai_responses(...)`` to the OpenAI Responses API, and
``anthropic_messages(...)`` to the Anthropic Messages API;
``framework_model(name)`` names the model of an agent another framework
drives (``Steering``) and refuses to be called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# API.md's import (``from helmlog.runtime.providers import ToolCallRequest``)
# keeps working; its one home is ``helmlog.events``.
from helmlog.events import ToolCallRequest as ToolCallRequest

from ._base import (
    OutputSchema,
    Provider,
    ProviderRequest,
    Reply,
    TokenSink,
    ToolSpec,
)
from ._framework import FrameworkModel, framework_model
from ._scripted import ScriptedProvider, scripted, word_chunks

if TYPE_CHECKING:
    from ._anthropic import AnthropicMessagesProvider, anthropic_messages
    from ._openai import OpenAIChatProvider, openai_chat
    from ._responses import OpenAIResponsesProvider, openai_responses

# The SDK-backed providers load their SDK (openai, anthropic: thousands of
# modules, seconds of import, and objects every garbage collection walks for
# the life of the process) when first named, not when helmlog is imported.
_LAZY = {
    "AnthropicMessagesProvider": "._anthropic",
    "anthropic_messages": "._anthropic",
    "OpenAIChatProvider": "._openai",
    "openai_chat": "._openai",
    "OpenAIResponsesProvider": "._responses",
    "openai_responses": "._responses",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AnthropicMessagesProvider",
    "FrameworkModel",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "OutputSchema",
    "Provider",
    "ProviderRequest",
    "Reply",
    "ScriptedProvider",
    "TokenSink",
    "ToolSpec",
    "anthropic_messages",
    "framework_model",
    "openai_chat",
    "openai_responses",
    "scripted",
    "word_chunks",
]
