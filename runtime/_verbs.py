"""The three verbs and their outcome types: ``allow``, ``deny``, ``ask``.

Pattern: a closed outcome union with no "result" arm (G5): no spelling lets a
         rule hand the model a tool result that no tool produced.
Role:    runtime layer; every hook returns one of these, every walker checks.

Laws: G1–G5, G93 (``from_=`` provenance), G94 (the walker judges every
outcome with the same ``*_problem`` checks the constructors use), issue 11
item 4 (an ask's ``timeout_s``).
Why plain slotted classes: the constructors normalize (``allow(None, "")`` is
a plain ``Allow()``) and validate in one ``__init__``. Why the checks are
functions beside them: the constructors are a convenience, not the guard.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Final, NoReturn

#: Where a rewritten value may come from (seed 003, ``from``): a person
#: typed it, it is a default, or the application supplied it.
ORIGINS: Final = frozenset(("person", "default", "app"))


def allow_problem(value: Any, why: Any, from_: Any = None) -> str | None:
    """What is wrong with an allow of these fields, or ``None`` (G1, G2, G93)."""
    if value is not None and (not isinstance(why, str) or not why):
        return "allow(value, why): a transform must say why (non-empty str why)"
    if why is not None and not isinstance(why, str):
        return f"allow(): why must be a str, got {type(why).__name__}"
    if from_ is None:
        return None
    if value is None:
        return (
            "allow(value, why, from_=...): from_ says where rewritten values came "
            "from, so it needs a value to rewrite"
        )
    if not isinstance(from_, Mapping) or not from_:
        return (
            "allow(): from_ must be a non-empty mapping of names to 'person', "
            f"'default' or 'app', got {type(from_).__name__}"
        )
    for key, origin in from_.items():
        if not isinstance(key, str) or not key:
            return "allow(): from_'s keys must be non-empty str names"
        if not isinstance(origin, str) or origin not in ORIGINS:
            return (
                f"allow(): from_[{key!r}] must be 'person', 'default' or 'app', "
                f"got {origin!r}"
            )
    return None


def deny_problem(reason: Any) -> str | None:
    """What is wrong with a deny of this reason, or ``None`` (G3)."""
    if not isinstance(reason, str) or not reason:
        return "deny(reason): a refusal must carry a reason (non-empty str)"
    return None


def ask_problem(
    question: Any, component_id: Any = None, timeout_s: Any = None
) -> str | None:
    """What is wrong with an ask of these fields, or ``None`` (G4)."""
    if not isinstance(question, str) or not question:
        return "ask(question): an ask needs a non-empty question"
    if component_id is not None and (
        not isinstance(component_id, str) or not component_id
    ):
        return "ask(): component_id must be a non-empty str when given"
    if timeout_s is not None and (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        return "ask(): timeout_s must be a positive number of seconds"
    return None


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
    """Pass (``value is None``) or transform to ``value``, saying ``why``.

    ``from_`` (a rewrite only) declares where rewritten values came from,
    name by name: ``{"amount": "person"}`` (G93); the row carries it.
    """

    __slots__ = ("from_", "value", "why")
    value: Any
    why: str | None
    from_: dict[str, str] | None

    def __init__(
        self,
        value: Any = None,
        why: str | None = None,
        from_: Mapping[str, str] | None = None,
    ) -> None:
        problem = allow_problem(value, why, from_)
        if problem is not None:
            raise ValueError(problem)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "why", why or None)
        object.__setattr__(self, "from_", None if from_ is None else dict(from_))

    @property
    def changes(self) -> bool:
        """Whether this outcome replaces the value that flows on."""
        return self.value is not None

    def _key(self) -> tuple[Any, ...]:
        if self.from_ is None:
            return (self.value, self.why)
        return (self.value, self.why, self.from_)

    def __hash__(self) -> int:
        origins = None if self.from_ is None else tuple(sorted(self.from_.items()))
        try:
            return hash((Allow, self.value, self.why, origins))
        except TypeError:
            return hash((Allow, repr(self.value), self.why, origins))

    def __repr__(self) -> str:
        if self.value is None and self.why is None:
            return "Allow()"
        origins = "" if self.from_ is None else f", from_={self.from_!r}"
        return f"Allow(value={self.value!r}, why={self.why!r}{origins})"


class Deny(_Frozen):
    """Refuse, with a reason the model (or the caller) reads."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str) -> None:
        problem = deny_problem(reason)
        if problem is not None:
            raise ValueError(problem)
        object.__setattr__(self, "reason", reason)

    def _key(self) -> tuple[Any, ...]:
        return (self.reason,)

    def __repr__(self) -> str:
        return f"Deny(reason={self.reason!r})"


@dataclasses.dataclass(frozen=True, slots=True)
class AskPayload:
    """What an ask carries to a person: its question and optional detail.

    A paused run surfaces it as a ``MiddlewareAsk``: the payload plus who
    asked (seed 000's ``AskPayload``).
    """

    question: str
    detail: Any = None


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
        problem = ask_problem(question, component_id, timeout_s)
        if problem is not None:
            raise ValueError(problem)
        object.__setattr__(self, "question", question)
        object.__setattr__(self, "detail", detail)
        object.__setattr__(self, "component_id", component_id)
        object.__setattr__(self, "timeout_s", timeout_s)

    @property
    def payload(self) -> AskPayload:
        """The question and detail this ask carries."""
        return AskPayload(self.question, self.detail)

    def _key(self) -> tuple[Any, ...]:
        return (self.question, self.detail, self.component_id, self.timeout_s)

    def __repr__(self) -> str:
        deadline = "" if self.timeout_s is None else f", timeout_s={self.timeout_s!r}"
        return (
            f"Ask(question={self.question!r}, detail={self.detail!r}, "
            f"component_id={self.component_id!r}{deadline})"
        )


Outcome = Allow | Deny | Ask


def forged_reason(name: str, problem: str) -> str:
    """G94's reason for an outcome that breaks its verb's rules."""
    return f"middleware '{name}' returned an outcome that breaks its verb: {problem}"


def judged(name: str, out: Allow | Deny | Ask) -> Allow | Deny | Ask:
    """``out`` as the verb's rules allow it, or a denial naming what is wrong.

    G94: a subclass whose ``__init__`` skipped the checks, or an outcome whose
    fields were set behind the constructor's back, is judged here by the same
    checks; a subclass is read once and rebuilt as its verb, so nothing it
    overrides (a property, ``changes``) reaches the walk. Reading a forged
    outcome's fields may raise: that is a denial too (G7).
    """
    cls = type(out)
    try:
        if isinstance(out, Allow):
            value, why, from_ = out.value, out.why, getattr(out, "from_", None)
            # The common pass-through: nothing to check beyond the why's type.
            if value is None and from_ is None and (why is None or type(why) is str):
                return out if cls is Allow else Allow(None, why)
            problem = allow_problem(value, why, from_)
            if problem is not None:
                return Deny(forged_reason(name, problem))
            return out if cls is Allow else Allow(value, why, from_)
        if isinstance(out, Deny):
            reason = out.reason
            problem = deny_problem(reason)
            if problem is not None:
                return Deny(forged_reason(name, problem))
            return out if cls is Deny else Deny(reason)
        question, detail = out.question, out.detail
        component_id, timeout_s = out.component_id, out.timeout_s
        problem = ask_problem(question, component_id, timeout_s)
        if problem is not None:
            return Deny(forged_reason(name, problem))
        return out if cls is Ask else Ask(question, detail, component_id, timeout_s)
    except Exception as exc:  # noqa: BLE001 — G7: a forged outcome that raises is a denial
        return Deny(f"middleware '{name}' threw: {str(exc) or type(exc).__name__}")


_PLAIN_ALLOW = Allow()


def allow(
    value: Any = None,
    why: str | None = None,
    *,
    from_: Mapping[str, str] | None = None,
) -> Allow:
    """Pass, pass with a reason (``allow(None, why)``), or transform (G1, G2);
    a transform may declare where its values came from (``from_``, G93)."""
    if value is None and not why and from_ is None:
        if why is not None and not isinstance(why, str):
            raise ValueError(f"allow(): why must be a str, got {type(why).__name__}")
        return _PLAIN_ALLOW
    return Allow(value, why, from_)


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
