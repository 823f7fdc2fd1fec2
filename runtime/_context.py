"""What a hook receives: frozen contexts over one call, result or message.

Pattern: immutable parameter objects, one per hook kind (Temporal-style "one
         typed input per hook").
Role:    runtime layer; built by the walkers, handed to links.

Laws: G8 (frozen; each hook its own deep copy of ``args``, ``result``,
``detail``, history and identity), G13, G21, G28, issue 22
(``ToolCallContext.approvals``: the asks a person approved, as recorded).
Why a hand-rolled clone: JSON-shaped values clone several times cheaper
than ``copy.deepcopy`` on every hook of every call; others fall back to it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import msgspec

from helmlog.events import Approval, Message

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


def clone_history(history: tuple[Message, ...]) -> tuple[Message, ...]:
    """A copy of committed messages a hook may mutate without effect (G8).

    Invariant: a ``Message`` is frozen except the ``args`` of its tool calls,
    which are the very objects the dispatch pipeline runs and the session's
    cache holds; only those are copied.
    """
    return tuple(
        msgspec.structs.replace(
            m,
            tool_calls=tuple(
                msgspec.structs.replace(c, args=clone(c.args)) for c in m.tool_calls
            ),
        )
        if m.tool_calls
        else m
        for m in history
    )


class _Uncopied:
    """A context's history before its hook first reads it (see ``_OwnHistory``)."""

    __slots__ = ("messages",)

    def __init__(self, messages: tuple[Message, ...]) -> None:
        self.messages = messages


class _OwnHistory:
    """The ``history`` field of a context, copied for its hook on first read (G8).

    Why on first read: most hooks never look at history, and copying the
    tool-call arguments of every committed message for every hook made a batch
    of N calls cost O(N²). A hook that reads it still gets its own copy, taken
    from messages nothing mutates (the session's cache only ever appends).
    """

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def __get__(self, ctx: Any, owner: Any = None) -> Any:
        if ctx is None:
            return self
        value = self.slot.__get__(ctx, owner)
        if type(value) is _Uncopied:
            value = clone_history(value.messages)
            self.slot.__set__(ctx, value)
        return value

    def __set__(self, ctx: Any, value: Any) -> None:
        self.slot.__set__(ctx, _Uncopied(value))


def _own_copies(ctx: Any) -> None:
    # G8: each hook gets its own history (on first read) and identity, so
    # mutating them in place cannot reach the tool, later links, the model or
    # the record.
    identity = ctx.identity
    if isinstance(identity, Mapping) and type(identity) is not dict:
        identity = dict(identity)
    object.__setattr__(ctx, "identity", clone(identity))


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallContext:
    """One proposed tool call, as a before-tool hook sees it (G13).

    ``approvals`` holds every ask of this session a person approved, oldest
    first, folded from the session's own stream (``helmlog.events.Approval``);
    ``()`` when the call runs in no session.
    """

    tool_name: str
    tool_source: str | None
    tool_call_id: str
    iteration: int
    args: Any
    history: tuple[Message, ...]
    identity: Mapping[str, Any] | None
    approvals: tuple[Approval, ...] = ()

    def __post_init__(self) -> None:
        _own_copies(self)


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

    def __post_init__(self) -> None:
        _own_copies(self)


@dataclasses.dataclass(frozen=True, slots=True)
class MessageContext:
    """The input or output message, as a message hook sees it (G28)."""

    phase: str
    content: str
    history: tuple[Message, ...]
    identity: Mapping[str, Any] | None

    def __post_init__(self) -> None:
        _own_copies(self)


for _context in (ToolCallContext, ToolResultContext, MessageContext):
    type.__setattr__(_context, "history", _OwnHistory(vars(_context)["history"]))
