"""helmlog.runtime.providers — models the loop can call.

``scripted(...)`` is the embedded default and the test double;
``openai_chat(...)`` speaks to any OpenAI-compatible Chat Completions endpoint.
"""

from helmlog.events import ToolCallRequest

from ._base import Provider, ProviderRequest, Reply, TokenSink, ToolSpec
from ._openai import OpenAIChatProvider, openai_chat
from ._scripted import ScriptedProvider, scripted, word_chunks

__all__ = [
    "OpenAIChatProvider",
    "Provider",
    "ProviderRequest",
    "Reply",
    "ScriptedProvider",
    "TokenSink",
    "ToolCallRequest",
    "ToolSpec",
    "openai_chat",
    "scripted",
    "word_chunks",
]
