"""The tool-call pipeline's vocabulary: its steps, entries, outcomes, rules.

Pattern: typed values (Temporal's one typed input per hook): ``Step`` names
         G51's steps in order, an ``Entry`` says where a call enters and what
         the record holds there, ``Ran``/``Refused``/``Paused`` are outcomes
         (``Admitted`` where a caller stops at dispatch, ``ToolPipeline.admit``),
         ``CallRules`` what a caller does where a person is needed
         (``IN_AGENT`` pauses; ``SERVED`` refuses).
Role:    runtime layer; ``_pipeline.py`` walks with these; ``lowlevel``.

Laws: G51, G56, G59, G62, G69, R7 (``Entry.redispatch``), S4, S5.
Why rules are functions in a value: a new caller (the MCP proxy) is a new
value, not a branch in every step. Entries and outcomes are frozen msgspec
Structs: one of each per call on the hot path (``bench/turns.py``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from helmlog.events import MiddlewareDecision

from ._context import clone
from ._tools import Tool
from .pause._pause import AskHumanSignal, MiddlewareAsk, PauseKind

NO_CHECK_IN_HERE = (
    "Tool '{tool}' was not executed: it declares a check-in consent gate, which "
    "trips for these arguments, and there is no pause here to carry its question."
)


def ask_human_text(question: str) -> str:
    """S5's tool error for a served tool that called ``ask_human``."""
    return f"ask_human: there is no pause here to carry the question: {question}"


class Step(enum.IntEnum):
    """The steps of one call, in G51's order; an ``Entry`` starts at one."""

    UNKNOWN_TOOL = 2
    GATE = 3
    BEFORE_TOOL = 4
    VALIDATE = 5
    CHECK_IN = 6
    CREDENTIALS = 7
    DISPATCH = 8
    EXECUTE = 9
    AFTER_TOOL = 10


class Entry(msgspec.Struct, frozen=True):
    """Where a call enters the pipeline, and what the record holds there.

    Build one with its constructors: ``fresh`` (at the gate), ``approved_ask``
    (at the asking link's next link), ``approved_check_in`` (after
    check-in), ``redispatch`` (at dispatch, R7) or ``answered`` (at the
    after-tool walk, with an ``ask_human`` answer as the result).
    """

    step: Step
    args: Any
    link: int = 0
    asked_by: str | None = None
    attempt: int = 1
    answer: Any = None

    @classmethod
    def fresh(cls, args: Any) -> Entry:
        """A proposed call: every step from the permission gate on."""
        return cls(Step.GATE, args)

    @classmethod
    def approved_ask(cls, args: Any, link: int, asker: str) -> Entry:
        """An approved ask: the walk goes on from ``link`` (G62), asking no more."""
        return cls(Step.BEFORE_TOOL, args, link=link, asked_by=asker)

    @classmethod
    def approved_check_in(cls, args: Any) -> Entry:
        """An approved check-in: credentials, dispatch, execute (G56)."""
        return cls(Step.CREDENTIALS, args)

    @classmethod
    def redispatch(cls, args: Any, attempt: int) -> Entry:
        """A recorded dispatch run again after failover (R7; idempotent tools)."""
        return cls(Step.DISPATCH, args, attempt=attempt)

    @classmethod
    def answered(cls, args: Any, answer: Any) -> Entry:
        """An ``ask_human`` answer: the after-tool walk over it (G70)."""
        return cls(Step.AFTER_TOOL, args, answer=answer)


class Ran(msgspec.Struct, frozen=True):
    """The call executed (or was answered); ``text`` is what the caller reads.

    ``result`` and ``error`` are what ``execute`` gave; ``denied`` says the
    after-tool walk refused it, ``text`` then being the reason (G21).
    """

    result: Any
    error: bool
    text: str
    denied: bool = False
    duration_ms: int = 0


class Admitted(msgspec.Struct, frozen=True):
    """The call passed every step up to and including dispatch (recorded).

    ``args`` are the arguments the tool must run with: as the before-tool
    chain left them, as ``tool.dispatched`` records them. ``kwargs`` are what
    ``execute`` gets (validated, credentials resolved: never recorded, G57);
    ``None`` where the tool runs elsewhere (a framework's own tool call).
    """

    args: Any
    kwargs: dict[str, Any] | None = None


class Refused(msgspec.Struct, frozen=True):
    """The call did not execute: ``step`` refused it, the caller reads ``text``."""

    step: Step
    text: str


class Paused(msgspec.Struct, frozen=True):
    """The call waits on a person (G59, G56, G69): record the pause."""

    kind: PauseKind
    ask: MiddlewareAsk
    args: Any
    link_index: int = -1


Outcome = Ran | Refused | Paused


class CallRecorder(Protocol):
    """Where a call's records go, each before what follows from it (R5)."""

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        """Record decision rows (each stored once, R4)."""

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        """Record that ``execute`` is about to run (R7), before it runs."""


# -- the rules per caller ---------------------------------------------------


def _pause_check_in(tool: Tool, args: Any) -> Paused | Refused:
    return Paused(
        "check-in",
        MiddlewareAsk(f"Approve a call to '{tool.name}'?", clone(args), None, None),
        args,
    )


def _refuse_check_in(tool: Tool, args: Any) -> Paused | Refused:
    return Refused(Step.CHECK_IN, NO_CHECK_IN_HERE.format(tool=tool.name))


def _pause_ask_human(signal: AskHumanSignal, args: Any) -> Paused | Refused:
    return Paused(
        "ask-human", MiddlewareAsk(signal.question, signal.detail, None, None), args
    )


def _refuse_ask_human(signal: AskHumanSignal, args: Any) -> Paused | Refused:
    return Refused(Step.EXECUTE, ask_human_text(signal.question))


@dataclasses.dataclass(frozen=True, slots=True)
class CallRules:
    """What a caller does where a call needs a person.

    ``asks``: whether a before-tool ``ask`` may stop the walk (and pause);
    when not, the walker files it as a denial (G24, G64, S4). ``check_in``
    and ``ask_human`` answer a tripped check-in and a tool's ``ask_human``.
    Use ``IN_AGENT`` or ``SERVED``.
    """

    name: str
    asks: bool
    check_in: Callable[[Tool, Any], Paused | Refused]
    ask_human: Callable[[AskHumanSignal, Any], Paused | Refused]


IN_AGENT = CallRules(
    "agent", asks=True, check_in=_pause_check_in, ask_human=_pause_ask_human
)
"""In an agent: an ask, a check-in and ``ask_human`` pause the run."""

SERVED = CallRules(
    "served", asks=False, check_in=_refuse_check_in, ask_human=_refuse_ask_human
)
"""Serving over MCP: an ask and ``ask_human`` are tool errors; check-in refuses."""
