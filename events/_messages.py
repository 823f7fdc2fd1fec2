"""Conversation messages and tool-call requests: what the model is sent.

Pattern: frozen value objects (msgspec Structs) shared by every layer.
Role:    events layer; ``message.committed`` events carry these, the runtime
         builds provider requests from them, checkpoints serialize them.
Emits:   nothing.

Why they live at the bottom: the stream stores committed messages, so the
record's vocabulary must own their shape; the runtime only builds them.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ToolCallRequest(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False
):
    """One tool call the model proposed: its id, the tool's name, the arguments."""

    id: str
    name: str
    args: Any = msgspec.field(default_factory=dict)


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One committed message.

    Attributes:
        role: ``"user"``, ``"assistant"`` or ``"tool"``.
        content: the text.
        tool_calls: on an assistant turn, the calls it proposed, in order.
        tool_call_id: on a tool message, the call it answers.
        tool_name: on a tool message, the tool's name.
    """

    role: str
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
