"""The three verbs and their outcome types: ``allow``, ``deny``, ``ask``.

Pattern: a closed outcome union with no "result" arm (G5): no spelling lets a
         rule hand the model a tool result that no tool produced.
Role:    runtime layer; every hook returns one of these, every walker checks.
Emits:   nothing.

Laws: G1 (``allow()`` passes; ``allow(None, why)`` is a pass-through with a
reason), G2 (a transform must say why; ``None`` is never a transform value),
G3 (a refusal carries a reason), G4 (an ask carries a question; issue 11
item 4: and may carry a deadline, ``timeout_s``), G5 (frozen,
compared by value, checked when constructed directly).

Why plain slotted classes rather than dataclasses: the constructors normalize
(``allow(None, "")`` is a plain ``Allow()``) and validate; doing that in one
``__init__`` keeps direct construction and the verbs equally strict.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn


class _Frozen:
    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        # Outcomes cross process boundaries (a rule hosted by a PolicyActor):
        # rebuild through the constructor, so the checks run there too.
        return (type(self), self._key())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        try:
            return hash((type(self), self._key()))
        except TypeError:
            return hash((type(self), repr(self._key())))


class Allow(_Frozen):
    """Pass (``value is None``) or transform to ``value``, saying ``why``."""

    __slots__ = ("value", "why")
    value: Any
    why: str | None

    def __init__(self, value: Any = None, why: str | None = None) -> None:
        if value is not None and (not isinstance(why, str) or not why):
            raise ValueError(
                "allow(value, why): a transform must say why (non-empty str why)"
            )
        if why is not None and not isinstance(why, str):
            raise ValueError(f"allow(): why must be a str, got {type(why).__name__}")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "why", why or None)

    @property
    def changes(self) -> bool:
        """Whether this outcome replaces the value that flows on."""
        return self.value is not None

    def _key(self) -> tuple[Any, ...]:
        return (self.value, self.why)

    def __repr__(self) -> str:
        if self.value is None and self.why is None:
            return "Allow()"
        return f"Allow(value={self.value!r}, why={self.why!r})"


class Deny(_Frozen):
    """Refuse, with a reason the model (or the caller) reads."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str) -> None:
        if not isinstance(reason, str) or not reason:
            raise ValueError(
                "deny(reason): a refusal must carry a reason (non-empty str)"
            )
        object.__setattr__(self, "reason", reason)

    def _key(self) -> tuple[Any, ...]:
        return (self.reason,)

    def __repr__(self) -> str:
        return f"Deny(reason={self.reason!r})"


class Ask(_Frozen):
    """Pause for a person: a question, optional detail, component id and deadline.

    ``timeout_s`` (seconds, > 0) is how long the person has: an ask not
    answered by then is declined by the system (``declined by timeout``) by
    whoever serves the asks (``helmlog serve``), from the deadline recorded
    with the pause (issue 11 item 4).
    """

    __slots__ = ("component_id", "detail", "question", "timeout_s")
    question: str
    detail: Any
    component_id: str | None
    timeout_s: float | None

    def __init__(
        self,
        question: str,
        detail: Any = None,
        component_id: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if not isinstance(question, str) or not question:
            raise ValueError("ask(question): an ask needs a non-empty question")
        if component_id is not None and (
            not isinstance(component_id, str) or not component_id
        ):
            raise ValueError("ask(): component_id must be a non-empty str when given")
        if timeout_s is not None and (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not math.isfinite(timeout_s)
            or timeout_s <= 0
        ):
            raise ValueError("ask(): timeout_s must be a positive number of seconds")
        object.__setattr__(self, "question", question)
        object.__setattr__(self, "detail", detail)
        object.__setattr__(self, "component_id", component_id)
        object.__setattr__(self, "timeout_s", timeout_s)

    def _key(self) -> tuple[Any, ...]:
        return (self.question, self.detail, self.component_id, self.timeout_s)

    def __repr__(self) -> str:
        deadline = "" if self.timeout_s is None else f", timeout_s={self.timeout_s!r}"
        return (
            f"Ask(question={self.question!r}, detail={self.detail!r}, "
            f"component_id={self.component_id!r}{deadline})"
        )


Outcome = Allow | Deny | Ask

_PLAIN_ALLOW = Allow()


def allow(value: Any = None, why: str | None = None) -> Allow:
    """Pass, pass with a reason (``allow(None, why)``), or transform (G1, G2)."""
    if value is None and not why:
        if why is not None and not isinstance(why, str):
            raise ValueError(f"allow(): why must be a str, got {type(why).__name__}")
        return _PLAIN_ALLOW
    return Allow(value, why)


def deny(reason: str) -> Deny:
    """Refuse with a non-empty reason (G3)."""
    return Deny(reason)


def ask(
    question: str,
    detail: Any = None,
    component_id: str | None = None,
    *,
    timeout_s: float | None = None,
) -> Ask:
    """Ask a person, with a non-empty question (G4); ``timeout_s``: how long
    they have before the ask is declined by timeout (issue 11 item 4)."""
    return Ask(question, detail, component_id, timeout_s)
