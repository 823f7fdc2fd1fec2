"""helmlog.runtime.providers — models the loop can call.

``scripted(...)`` is the embedded default and the test double;
``openai_chat(...)`` speaks to any OpenAI-compatible Chat Completions endpoint.
"""

from helmlog.events import ToolCallRequest

from ._base import Provider, ProviderRequest, Reply, TokenSink, ToolSpec
from ._scripted import ScriptedProvider, scripted, word_chunks

__all__ = [
    "Provider",
    "ProviderRequest",
    "Reply",
    "ScriptedProvider",
    "TokenSink",
    "ToolCallRequest",
    "ToolSpec",
    "scripted",
    "word_chunks",
]
