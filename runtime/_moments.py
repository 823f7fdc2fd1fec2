"""The five moments of the loop and the ``.act()`` keys derived from them.

Pattern: one tuple as the single source of truth; everything else derived.
Role:    runtime layer; ``AgentBuilder.act`` accepts exactly ``ACT_KEYS``.
Emits:   nothing.

Laws: G71 (``LOOP_MOMENTS`` in loop order; ``act_key_for`` replaces ``-``
with ``_``; ``ACT_KEYS`` derived), G72 (the completeness lock: the typed
declarations of ``.act()``'s options and keys, ``ActOptions`` and ``ActKey``,
are checked against ``ACT_KEYS`` at import). The seed's names are public
(issue 22): ``LoopMoment`` is the ``Literal`` the moments tuple is read from,
``ActKey`` the ``Literal`` of the keys, ``ActOptions`` the bundle.

Why a lock at import: a moment added to the loop without a key (or a key
without a moment) would silently leave a place where no rule can act.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, get_args

LoopMoment = Literal["input", "before-tool", "after-tool", "window", "output"]
"""Where in the loop a rule acts: the five moments, in loop order."""

ActKey = Literal["input", "before_tool", "after_tool", "window", "output"]
"""An ``.act()`` keyword: a moment with ``-`` spelled ``_`` (``act_key_for``)."""

LOOP_MOMENTS: tuple[LoopMoment, ...] = get_args(LoopMoment)


def act_key_for(moment: str) -> str:
    """The ``.act()`` keyword for a moment: ``"before-tool"`` → ``"before_tool"``."""
    return moment.replace("-", "_")


ACT_KEYS: tuple[str, ...] = tuple(act_key_for(m) for m in LOOP_MOMENTS)


class ActOptions(TypedDict, total=False):
    """The typed declaration of ``.act()``'s keywords (checked at import)."""

    input: list[Any] | tuple[Any, ...]
    before_tool: list[Any] | tuple[Any, ...]
    after_tool: list[Any] | tuple[Any, ...]
    window: Any
    output: list[Any] | tuple[Any, ...]


def check_completeness(declared: tuple[str, ...], keys: tuple[str, ...]) -> None:
    """Raise ``ImportError`` naming any moment without a key or key without a moment."""
    missing = [k for k in keys if k not in declared]
    extra = [k for k in declared if k not in keys]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"moments without an .act() key: {missing}")
        if extra:
            parts.append(f".act() keys without a moment: {extra}")
        raise ImportError("helmlog completeness lock: " + "; ".join(parts))


check_completeness(tuple(ActOptions.__annotations__), ACT_KEYS)
check_completeness(get_args(ActKey), ACT_KEYS)
