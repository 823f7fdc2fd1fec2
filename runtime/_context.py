"""What a hook receives: frozen contexts over one call, result or message.

Pattern: immutable parameter objects, one per hook kind (Temporal-style
         "one typed input per hook").
Role:    runtime layer; built by the walkers, handed to links.
Emits:   nothing.

Laws: G8 (contexts are frozen; each hook gets its own deep copy of ``args``,
``result`` and ``detail``), G13 (the call context), G21 (the result context),
G28 (the message context).

Why a hand-rolled clone: most values are JSON-shaped, and cloning those
directly is several times cheaper than ``copy.deepcopy`` on every hook of
every call; anything else falls back to ``deepcopy``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from helmlog.events import Message

_ATOMS = (str, int, float, bool, type(None))


def clone(value: Any) -> Any:
    """A deep copy, fast for JSON-shaped values."""
    if isinstance(value, _ATOMS):
        return value
    if type(value) is dict:
        return {k: clone(v) for k, v in value.items()}
    if type(value) is list:
        return [clone(v) for v in value]
    return copy.deepcopy(value)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallContext:
    """One proposed tool call, as a before-tool hook sees it (G13)."""

    tool_name: str
    tool_source: str | None
    tool_call_id: str
    iteration: int
    args: Any
    history: tuple[Message, ...]
    identity: Mapping[str, Any] | None


@dataclasses.dataclass(frozen=True, slots=True)
class ToolResultContext:
    """One executed call and its result, as an after-tool hook sees it (G21)."""

    tool_name: str
    tool_source: str | None
    tool_call_id: str
    iteration: int
    args: Any
    history: tuple[Message, ...]
    identity: Mapping[str, Any] | None
    result: Any
    error: bool


@dataclasses.dataclass(frozen=True, slots=True)
class MessageContext:
    """The input or output message, as a message hook sees it (G28)."""

    phase: str
    content: str
    history: tuple[Message, ...]
    identity: Mapping[str, Any] | None
