"""Pauses: what a paused run returns, a person's decision, ``ask_human``.

Pattern: a value returned (not raised) for an ask, and a ``BaseException``
         signal for a tool that asks, so a tool's ``except Exception`` cannot
         swallow it.
Role:    runtime layer; the loop builds ``AskPause`` from its checkpoint,
         ``resume`` takes a ``CheckInDecision`` or an answer.

Laws: G59 (``AskPause``; ``TurnResult``: issue 12 item 3, G92), G63
(decisions), G69 (``ask_human`` only inside a running tool).
Why ``ask_human`` uses a context variable: it marks "a tool is running here"
without threading a handle through every tool signature.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, Literal, NoReturn, TypeGuard, TypeVar

from helmlog.events import Checkpoint

from .._clock import wall_clock_ms
from .._verbs import AskPayload

OutputT = TypeVar("OutputT")

PauseKind = Literal["ask", "check-in", "ask-human"]
"""What a pause waits on: an asking link, a tool's check-in, ``ask_human``.

In-process only; the recorded ``pause.request`` keeps ``kind`` a ``str`` so
older readers decode newer streams (wire structs stay forward-compatible).
"""


@dataclasses.dataclass(frozen=True, slots=True)
class MiddlewareAsk(AskPayload):
    """The question a pause carries: the ask's payload plus who asked;
    ``middleware`` is ``None`` for a check-in or an ``ask_human`` pause;
    ``timeout_s`` is the ask's deadline, if any."""

    middleware: str | None = None
    component_id: str | None = None
    timeout_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AskPause:
    """A run waiting on a person: resume it with ``agent.resume(checkpoint, ...)``.

    Attributes:
        kind: ``"ask"``, ``"check-in"`` or ``"ask-human"``.
        ask: the question, its detail and who asked.
        tool_name: the paused call's tool.
        tool_call_id: the paused call's id.
        checkpoint: plain-JSON handle to resume with.
    """

    kind: PauseKind
    ask: MiddlewareAsk
    tool_name: str
    tool_call_id: str
    checkpoint: Checkpoint

    @property
    def session_id(self) -> str:
        """The paused session's id."""
        return self.checkpoint.session_id


@dataclasses.dataclass(frozen=True, slots=True)
class TurnResult:
    """What one call on an agent came to: the answer or the pause, the session
    it belongs to, and the checkpoint to continue from.

    Each call returns its own, so concurrent calls on one agent never read
    each other's "last" state (``agent.checkpoint()`` and
    ``agent.last_snapshot()`` remain, for one-conversation scripts).

    Attributes:
        session_id: the session the call ran on.
        answer: the answer text, or ``None`` when the run paused.
        pause: the pause, or ``None`` when it answered.
        checkpoint: where the session stands now: a conversation checkpoint
            after an answer, the pause's checkpoint after a pause.
        output: the answer parsed to the agent's ``output_type`` (a Struct,
            dataclass or Pydantic model instance, or the JSON value for a
            JSON Schema dict); ``None`` without one or after a pause (G92).
            ``output_as(T)`` returns it typed.
    """

    session_id: str
    answer: str | None
    pause: AskPause | None
    checkpoint: Checkpoint | None
    output: Any = None

    def __init__(
        self,
        session_id: str,
        answer: str | None,
        pause: AskPause | None,
        checkpoint: Checkpoint | None,
        output: Any = None,
    ) -> None:
        # The dataclass's own ``__init__``, through the slots' setters (the
        # frozen class's setattr refuses; ``object.__setattr__`` is slower):
        # one per call on an agent (bench/turns.py).
        setters = _result_setters
        setters[0](self, session_id)
        setters[1](self, answer)
        setters[2](self, pause)
        setters[3](self, checkpoint)
        setters[4](self, output)

    def output_as(self, cls: type[OutputT]) -> OutputT:
        """``output``, typed as ``cls`` (the agent's ``output_type``).

        Raises:
            TypeError: ``output`` is not a ``cls`` (the call paused, or the
                agent has another or no ``output_type``).
        """
        if not isinstance(self.output, cls):
            raise TypeError(
                f"this result's output is {type(self.output).__name__}, "
                f"not {cls.__name__}"
            )
        return self.output

    @property
    def paused(self) -> bool:
        """Whether the call ended in a pause."""
        return self.pause is not None

    @property
    def value(self) -> str | AskPause:
        """The answer text or the pause: what ``run``/``resume`` return."""
        if self.pause is not None:
            return self.pause
        assert self.answer is not None
        return self.answer


_result_setters = tuple(
    vars(TurnResult)[f.name].__set__ for f in dataclasses.fields(TurnResult)
)


PAUSE_KINDS: tuple[PauseKind, ...] = ("ask", "check-in", "ask-human")


def pause_kind(value: str) -> PauseKind:
    """A wire ``kind`` as the in-process ``PauseKind``; ``ValueError`` if none."""
    for kind in PAUSE_KINDS:
        if kind == value:
            return kind
    raise ValueError(f"no pause of kind {value!r}")


def is_ask_pause(value: object) -> TypeGuard[AskPause]:
    """Whether a run's result is a pause (rather than the answer text)."""
    return isinstance(value, AskPause)


@dataclasses.dataclass(frozen=True, slots=True)
class CheckInDecision:
    """A person's decision on an ask or check-in pause (G63)."""

    approved: bool
    by: str
    at: int
    note: str | None = None


def _decision(approved: bool, by: str, note: str | None) -> CheckInDecision:
    if not isinstance(by, str) or not by.strip():
        raise ValueError("a decision needs a non-empty 'by' (who decided)")
    if note is not None and not isinstance(note, str):
        raise ValueError("a decision's note must be a str")
    return CheckInDecision(
        approved=approved, by=by, at=wall_clock_ms(), note=note or None
    )


def check_in_approved(by: str, note: str | None = None) -> CheckInDecision:
    """A person approved: the chain continues from the link after the asker."""
    return _decision(True, by, note)


def check_in_declined(by: str, note: str | None = None) -> CheckInDecision:
    """A person declined: the call becomes a refusal the model reads."""
    return _decision(False, by, note)


def decision_why(decision: CheckInDecision) -> str:
    """G46/G62's resume-side ``why``: ``approved by <by>[: <note>]``."""
    verb = "approved" if decision.approved else "declined"
    return f"{verb} by {decision.by}" + (f": {decision.note}" if decision.note else "")


class AskHumanSignal(BaseException):
    """Raised by ``ask_human`` inside a running tool; carries the question.

    A ``BaseException`` so that a tool's ``except Exception`` cannot swallow
    the pause (G69).
    """

    def __init__(self, question: str, detail: Any = None) -> None:
        super().__init__(question)
        self.question = question
        self.detail = detail


_running_tool: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "helmlog_running_tool", default=None
)


def ask_human(question: str, detail: Any = None) -> NoReturn:
    """Ask a person from inside a tool; their answer becomes the tool's result.

    Never returns to the tool: the run pauses, and ``resume(checkpoint, answer)``
    hands the answer to the after-tool chain as this call's result (G69, G70).

    Raises:
        RuntimeError: when called anywhere but inside a running tool.
        ValueError: for an empty question.
    """
    if _running_tool.get() is None:
        raise RuntimeError("ask_human() can only be called inside a running tool")
    if not isinstance(question, str) or not question:
        raise ValueError("ask_human() needs a non-empty question")
    raise AskHumanSignal(question, detail)


def running_tool() -> contextvars.ContextVar[str | None]:
    """The context variable the pipeline sets while a tool's ``execute`` runs."""
    return _running_tool
