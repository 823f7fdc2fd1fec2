"""What-if reports: per decision, per session, and the summary of many.

Pattern: frozen values (msgspec Structs) with one JSON document form; facts
         only, like the decision channel (G49): moment, link, outcome then
         and now, never an argument, a result or a message.
Role:    runtime layer; ``_whatif.py`` builds them, ``helmlog.whatif`` and
         ``helmlog whatif`` hand them out (``--json`` prints ``document()``).

Laws: issue 13 item 2 (the flip kinds; the divergence point; the summary),
G86 (a report carries no value a redaction policy hides).
Why ``reason-differs`` is a flip: two refusals with different reasons are
one verdict yet change what the model or the person reads.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._errors import DivergenceError

Status = Literal["unchanged", "flipped", "not-rejudgeable"]
Flip = Literal[
    "allow-to-deny",
    "deny-to-allow",
    "new-ask",
    "no-longer-asks",
    "transform-differs",
    "reason-differs",
]
FLIPS: tuple[Flip, ...] = (
    "allow-to-deny",
    "deny-to-allow",
    "new-ask",
    "no-longer-asks",
    "transform-differs",
    "reason-differs",
)
"""Every flip kind, in the order the summary lists them."""

Unjudgeable = Literal["redacted", "not-recorded", "link-raised", "permission-failed"]
"""Why a decision cannot be re-judged: a value the redaction policy replaced;
a value the record never held (a refused input or draft, an unknown outcome,
a call paused on another stream); a new link that raised, or a permission
checker that failed, where a live run would have refused (G7, G54) and a
what-if does not guess what the rule meant."""


class Judgement(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One decision, re-judged.

    Attributes:
        seq: where the decision sits in the recorded stream.
        turn: the recorded turn.
        moment: ``input``, ``before-tool``, ``after-tool``, ``window`` or
            ``output``.
        status: ``unchanged``, ``flipped`` or ``not-rejudgeable``.
        was: the recorded verdict: ``allow``, ``transform``, ``deny`` or
            ``ask`` (at ``window``: ``transform`` when it engaged).
        now: the new agent's verdict, in the same words (``None`` when it
            could not be re-judged).
        flip: the kind of flip, when flipped.
        middleware: the link that decided now (a refusal's, an ask's, the
            last transform's); ``None`` for a pass-through or a step.
        step: for a new before-tool refusal, the step that refused
            (``unknown-tool``, ``permission-gate``, ``before-tool``,
            ``validation``, ``check-in``, ``credentials``).
        reason: why it could not be re-judged.
        diverges: this decision changes what the model would have read: the
            session's divergence point.
    """

    seq: int
    turn: int
    moment: str
    status: Status
    was: str | None = None
    now: str | None = None
    flip: Flip | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    iteration: int = 0
    middleware: str | None = None
    step: str | None = None
    reason: Unjudgeable | None = None
    diverges: bool = False


class SessionWhatIf(msgspec.Struct, frozen=True, kw_only=True):
    """One session re-judged.

    ``divergence`` is the first decision that changes what the model would
    have read; past it the recorded replies no longer apply, so nothing more
    of the session is re-judged, and ``not_rejudged`` counts the recorded
    decision points left.
    """

    session_id: str
    decisions: tuple[Judgement, ...] = ()
    divergence: Judgement | None = None
    not_rejudged: int = 0

    def count(self, status: Status) -> int:
        """How many decisions have ``status``."""
        return sum(1 for d in self.decisions if d.status == status)


class WhatIfReport(msgspec.Struct, frozen=True, kw_only=True):
    """Recorded sessions re-judged under one agent's rules."""

    sessions: tuple[SessionWhatIf, ...] = ()

    @property
    def decisions(self) -> int:
        """Decisions re-judged (every status)."""
        return sum(len(s.decisions) for s in self.sessions)

    @property
    def flipped(self) -> tuple[Judgement, ...]:
        """Every flipped decision, session by session."""
        return tuple(d for s in self.sessions for d in s.decisions if d.flip)

    @property
    def diverged(self) -> tuple[SessionWhatIf, ...]:
        """The sessions with a divergence point."""
        return tuple(s for s in self.sessions if s.divergence is not None)

    def flips(self) -> dict[Flip, int]:
        """Flips by kind, every kind listed (0 when none)."""
        counts: dict[Flip, int] = dict.fromkeys(FLIPS, 0)
        for d in self.flipped:
            assert d.flip is not None
            counts[d.flip] += 1
        return counts

    def summary(self) -> dict[str, Any]:
        """The summary row: sessions, decisions, statuses, flips by kind."""
        return {
            "sessions": len(self.sessions),
            "decisions": self.decisions,
            "unchanged": sum(s.count("unchanged") for s in self.sessions),
            "flipped": len(self.flipped),
            "not_rejudgeable": sum(s.count("not-rejudgeable") for s in self.sessions),
            "diverged_sessions": len(self.diverged),
            "not_rejudged": sum(s.not_rejudged for s in self.sessions),
            "flips": self.flips(),
        }

    def raise_for_divergence(self) -> None:
        """Raise ``DivergenceError`` for the first session with a divergence
        point (a regression test's one line); return quietly when none has."""
        diverged = self.diverged
        if not diverged:
            return
        first = diverged[0]
        point = first.divergence
        assert point is not None
        raise DivergenceError(
            session_id=first.session_id,
            seq=point.seq,
            moment=point.moment,
            flip=point.flip,
            tool_call_id=point.tool_call_id,
            diverged=len(diverged),
        )

    def document(self) -> dict[str, Any]:
        """The one JSON document (``helmlog whatif --json``)."""
        return {
            "whatif": self.summary(),
            "sessions": msgspec.to_builtins(self.sessions),
        }
