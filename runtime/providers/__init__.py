"""helmlog.runtime.providers — models the loop can call.

``scripted(...)`` is the embedded default and the test double;
``openai_chat(...)`` speaks to any OpenAI-compatible Chat Completions endpoint,
``openai_responses(...)`` to the OpenAI Responses API, and
``anthropic_messages(...)`` to the Anthropic Messages API.
"""

from helmlog.events import ToolCallRequest

from ._anthropic import AnthropicMessagesProvider, anthropic_messages
from ._base import Provider, ProviderRequest, Reply, TokenSink, ToolSpec
from ._openai import OpenAIChatProvider, openai_chat
from ._responses import OpenAIResponsesProvider, openai_responses
from ._scripted import ScriptedProvider, scripted, word_chunks

__all__ = [
    "AnthropicMessagesProvider",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "Provider",
    "ProviderRequest",
    "Reply",
    "ScriptedProvider",
    "TokenSink",
    "ToolCallRequest",
    "ToolSpec",
    "anthropic_messages",
    "openai_chat",
    "openai_responses",
    "scripted",
    "word_chunks",
]
