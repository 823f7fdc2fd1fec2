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
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from helmlog.events import Approval, Message

_ATOMS = (str, int, float, bool, type(None))
ATOM_TYPES = frozenset(_ATOMS)


def clone(value: Any) -> Any:
    """A deep copy, fast for JSON-shaped values."""
    kind = type(value)
    if kind in ATOM_TYPES:
        return value
    # A shallow copy in C, then only the non-atom values replaced: no
    # comprehension frame per container (a walk clones a hook's value).
    if kind is dict:
        out = value.copy()
        for k, v in out.items():
            if type(v) not in ATOM_TYPES:
                out[k] = clone(v)
        return out
    if kind is list:
        items = value.copy()
        for i, v in enumerate(items):
            if type(v) not in ATOM_TYPES:
                items[i] = clone(v)
        return items
    if isinstance(value, _ATOMS):
        return value
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


class Uncopied(msgspec.Struct):
    """A context's field before its hook first reads it (see ``_OwnOnRead``).

    A Struct: built in C, with no ``__init__`` frame (a walk makes several
    per call: bench/turns.py)."""

    value: Any


def _own_identity(identity: Any) -> Any:
    if isinstance(identity, Mapping) and type(identity) is not dict:
        identity = dict(identity)
    return clone(identity)


class _OwnOnRead:
    """A context field a hook gets its own deep copy of, taken on first read (G8).

    Why on first read: most hooks never look at history, identity or even
    the arguments (a pass-through), and copying them for every hook of every
    call was most of a walk's cost (and made a batch of N calls O(N²) in
    history). A hook that reads one still gets its own copy, so mutating it
    in place reaches nothing else; it is taken from values nothing mutates
    (the walk replaces a value whole, the session's cache only appends, and
    the tool runs on a copy of its own).
    """

    __slots__ = ("copier", "slot")

    def __init__(self, slot: Any, copier: Callable[[Any], Any]) -> None:
        self.slot = slot
        self.copier = copier

    def __get__(self, ctx: Any, owner: Any = None) -> Any:
        if ctx is None:
            return self
        value = self.slot.__get__(ctx, owner)
        if type(value) is Uncopied:
            value = self.copier(value.value)
            self.slot.__set__(ctx, value)
        return value

    def __set__(self, ctx: Any, value: Any) -> None:
        # A str, number or None is its own copy: nothing to defer.
        if type(value) not in ATOM_TYPES:
            value = Uncopied(value)
        self.slot.__set__(ctx, value)


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


_COPIERS: dict[str, Callable[[Any], Any]] = {
    "args": clone,
    "result": clone,
    "history": clone_history,
    "identity": _own_identity,
}
for _context in (ToolCallContext, ToolResultContext, MessageContext):
    for _name, _copier in _COPIERS.items():
        if _name in _context.__dataclass_fields__:
            _slot = vars(_context)[_name]
            type.__setattr__(_context, _name, _OwnOnRead(_slot, _copier))


def deferred(value: Any) -> Any:
    """What a context keeps for a field copied on first read: the value
    itself when it is a str, number or None, else a marker holding it. One
    marker may serve every context of a call (it is never changed)."""
    return value if type(value) in ATOM_TYPES else Uncopied(value)


def _raw_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The slots' own setters, in field order (under the ``_OwnOnRead``)."""
    setters = []
    for field in dataclasses.fields(cls):
        attr = vars(cls)[field.name]
        slot = attr.slot if isinstance(attr, _OwnOnRead) else attr
        setters.append(slot.__set__)
    return tuple(setters)


def _builder(cls: type) -> Callable[..., Any]:
    """``cls(*fields)`` through its slots' own setters, one straight line of
    calls (generated once per class: a walk builds a context per hook)."""
    setters = _raw_setters(cls)
    names = [f"f{i}" for i in range(len(setters))]
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = [f"def build({', '.join(names)}):", "    ctx = new(cls)"]
    for i, setter in enumerate(setters):
        scope[f"set{i}"] = setter
        lines.append(f"    set{i}(ctx, f{i})")
    lines.append("    return ctx")
    exec("\n".join(lines), scope)
    built: Callable[..., Any] = scope["build"]
    return built


# ``ToolCallContext(*fields)`` for a walker, whose copied-on-read fields
# (args, history, identity) are already ``deferred``: the same object, without
# the frozen dataclass's setattr per field (a walk builds one per hook).
call_context: Callable[..., ToolCallContext] = _builder(ToolCallContext)
# ``ToolResultContext(*fields)`` for a walker, the same way.
result_context: Callable[..., ToolResultContext] = _builder(ToolResultContext)
