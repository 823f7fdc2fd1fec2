"""Links: named objects with hooks, the link constructors, and their checks.

Pattern: structural protocols that are also constructors; ``isinstance``
         recognizes any object with the right attributes (G9).
Role:    runtime layer; the builder checks and normalizes links into ``Link``
         records that the walkers read.
Emits:   nothing.

Laws: G9 (what a link is; the constructors raise ``ValueError`` for a blank
name or no hook), G76 (phase wrappers: an input-only entry is not called at
output, where it files a pass-through row, and the reverse; seed 004).

Why normalize into ``Link``: hooks may be attributes that are ``None``, bound
methods, or plain functions; resolving them once at build time keeps the hot
path to one attribute read per link.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

TOOL_HOOKS = ("on_tool_call", "on_tool_result")
MESSAGE_HOOKS = ("on_message",)


def link_name(obj: Any) -> str | None:
    """The link's name when it is a non-empty ``str``, else ``None``."""
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) and name.strip() else None


def hook(obj: Any, attr: str) -> Callable[..., Any] | None:
    """The callable hook ``attr`` of ``obj``, or ``None`` when absent."""
    fn = getattr(obj, attr, None)
    return fn if callable(fn) else None


class _StructuralMeta(type):
    _hooks: tuple[str, ...] = ()

    def __instancecheck__(cls, obj: object) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        return link_name(obj) is not None and any(hook(obj, h) for h in cls._hooks)


class ToolMiddleware(metaclass=_StructuralMeta):
    """A tool link: ``on_tool_call`` and/or ``on_tool_result`` (G9).

    ``ToolMiddleware(name=..., on_tool_call=..., on_tool_result=...)`` builds
    one; any object with a non-empty ``name`` and one of the hooks is one.
    """

    _hooks: tuple[str, ...] = TOOL_HOOKS

    def __init__(
        self,
        *,
        name: str,
        on_tool_call: Callable[..., Any] | None = None,
        on_tool_result: Callable[..., Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("ToolMiddleware needs a non-empty name")
        if on_tool_call is None and on_tool_result is None:
            raise ValueError(
                f"ToolMiddleware '{name}' needs on_tool_call and/or on_tool_result"
            )
        for attr, fn in (
            ("on_tool_call", on_tool_call),
            ("on_tool_result", on_tool_result),
        ):
            if fn is not None and not callable(fn):
                raise ValueError(f"ToolMiddleware '{name}': {attr} must be callable")
        self.name = name
        self.on_tool_call = on_tool_call
        self.on_tool_result = on_tool_result

    def __repr__(self) -> str:
        return f"ToolMiddleware(name={self.name!r})"


class ToolCallMiddleware(ToolMiddleware):
    """The call arm of ``ToolMiddleware``: a name and ``on_tool_call``.

    Any object with a non-empty ``name`` and an ``on_tool_call`` hook is one
    (seed 000, for code that needs to name one arm).
    """

    _hooks = ("on_tool_call",)

    def __init__(self, *, name: str, on_tool_call: Callable[..., Any]) -> None:
        if on_tool_call is None:
            raise ValueError(f"ToolCallMiddleware '{name}' needs an on_tool_call hook")
        super().__init__(name=name, on_tool_call=on_tool_call)

    def __repr__(self) -> str:
        return f"ToolCallMiddleware(name={self.name!r})"


class ToolResultMiddleware(ToolMiddleware):
    """The result arm of ``ToolMiddleware``: a name and ``on_tool_result``."""

    _hooks = ("on_tool_result",)

    def __init__(self, *, name: str, on_tool_result: Callable[..., Any]) -> None:
        if on_tool_result is None:
            raise ValueError(
                f"ToolResultMiddleware '{name}' needs an on_tool_result hook"
            )
        super().__init__(name=name, on_tool_result=on_tool_result)

    def __repr__(self) -> str:
        return f"ToolResultMiddleware(name={self.name!r})"


class MessageMiddleware(metaclass=_StructuralMeta):
    """A message link: ``on_message`` (G9)."""

    _hooks = MESSAGE_HOOKS

    def __init__(self, *, name: str, on_message: Callable[..., Any]) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("MessageMiddleware needs a non-empty name")
        if on_message is None or not callable(on_message):
            raise ValueError(f"MessageMiddleware '{name}' needs an on_message hook")
        self.name = name
        self.on_message = on_message

    def __repr__(self) -> str:
        return f"MessageMiddleware(name={self.name!r})"


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """A checked link, hooks resolved. ``only_phase`` restricts a message link."""

    name: str
    source: Any
    on_tool_call: Callable[..., Any] | None = None
    on_tool_result: Callable[..., Any] | None = None
    on_message: Callable[..., Any] | None = None
    only_phase: str | None = None
    # The link's ``masks_values``: what it replaces is not stored (issue 28).
    masks: bool = False


def tool_link_problem(obj: Any) -> str | None:
    """Why ``obj`` is not a tool link, or ``None`` when it is one."""
    if link_name(obj) is None:
        return f"a tool link needs a non-empty name (got {obj!r})"
    if not any(hook(obj, h) for h in TOOL_HOOKS):
        return (
            f"tool link '{link_name(obj)}' has neither on_tool_call nor on_tool_result"
        )
    return None


def message_link_problem(obj: Any) -> str | None:
    """Why ``obj`` is not a message link, or ``None`` when it is one."""
    if link_name(obj) is None:
        return f"a message link needs a non-empty name (got {obj!r})"
    if hook(obj, "on_message") is None:
        return f"message link '{link_name(obj)}' has no on_message hook"
    return None


def _word(name: str) -> str:
    """The name interned: every row a link files names it, and the fold
    keeps a row's words interned (``_shared_words``), so a name that already
    is one costs each row no replacement."""
    return sys.intern(name) if type(name) is str else name


def as_tool_link(obj: Any) -> Link:
    """Normalize a checked tool link."""
    name = link_name(obj)
    assert name is not None
    return Link(
        name=_word(name),
        source=obj,
        on_tool_call=hook(obj, "on_tool_call"),
        on_tool_result=hook(obj, "on_tool_result"),
        masks=masks_values(obj),
    )


def as_message_link(obj: Any, only_phase: str | None = None) -> Link:
    """Normalize a checked message link, optionally restricted to one phase."""
    name = link_name(obj)
    assert name is not None
    return Link(
        name=_word(name),
        source=obj,
        on_message=hook(obj, "on_message"),
        only_phase=only_phase,
        masks=masks_values(obj),
    )


MASKED = "[redacted]"
"""What a masking link's row holds in place of the value it replaced."""


def masks_values(obj: Any) -> bool:
    """Whether a link declares ``masks_values = True``: the values it replaces
    (a transform's ``before``, a refused result) are not stored in its rows."""
    return getattr(obj, "masks_values", False) is True
