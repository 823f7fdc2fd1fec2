"""What-if's verdicts: the words a decision is judged in, and how two compare.

Pattern: pure functions over the record's and the new rules' outcomes: each
         side's verdict word, the flip between them, and who decided.
Role:    runtime layer; what-if judges with these.
Emits:   nothing.

Laws: issue 13 item 2 (the flip kinds), G7 (a raising link is named by its
reason), G14 (the first non-allow answer decides), G80.

Why a transform that lets the same value through is unchanged: what flows on
is what the model reads; the verb that produced it is the ledger's concern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from helmlog.events import MiddlewareDecision, WindowCompacted

from .._recorded import RecordedCall
from .._steps import Step
from ._record import Admission, CallRecord, Point, WindowVisit
from ._report import Flip

PASSES = frozenset(("allow", "transform"))
STEP_NAMES = {
    Step.UNKNOWN_TOOL: "unknown-tool",
    Step.GATE: "permission-gate",
    Step.BEFORE_TOOL: "before-tool",
    Step.VALIDATE: "validation",
    Step.CHECK_IN: "check-in",
    Step.CREDENTIALS: "credentials",
    Step.DISPATCH: "dispatch",
    Step.EXECUTE: "execute",
    Step.AFTER_TOOL: "after-tool",
}
ENVELOPE = frozenset(("session_id", "seq", "timestamp", "prev_hash", "replayed"))


def flip_of(was: str, now: str, same: bool) -> Flip | None:
    """The kind of flip from verdict ``was`` to ``now`` (``None``: unchanged).

    ``same`` says whether what flows on — the value a pass lets through, the
    reason a refusal gives, the question an ask puts — is the same.
    """
    if was in PASSES and now in PASSES:
        return None if same else "transform-differs"
    if was == now:
        return None if same else "reason-differs"
    if now == "ask":
        return "new-ask"
    if was == "ask":
        return "no-longer-asks"
    return "allow-to-deny" if now == "deny" else "deny-to-allow"


def raised_by(rows: Sequence[MiddlewareDecision]) -> str | None:
    """The link whose hook raised (G7's reason names it), if one did."""
    for row in rows:
        why = row.why
        if (
            row.outcome == "deny"
            and why
            and why.startswith(f"middleware '{row.middleware}' threw: ")
        ):
            return row.middleware
    return None


def decider(rows: Sequence[MiddlewareDecision], now: str) -> str | None:
    """The link behind a verdict: the refusal's, the ask's, the last rewrite's."""
    for row in reversed(rows):
        if now == "transform" and row.changed and row.outcome == "allow":
            return row.middleware
        if now in ("deny", "ask") and row.outcome == now:
            return row.middleware
    return None


def window_view(record: WindowCompacted | None) -> dict[str, Any] | None:
    if record is None:
        return None
    fields = msgspec.structs.asdict(record)
    return {k: v for k, v in fields.items() if k not in ENVELOPE}


def decision_points(points: Sequence[Point]) -> int:
    """How many recorded decisions these points hold (what a divergence skips)."""
    return sum(
        1
        for p in points
        if isinstance(p, CallRecord)
        or (isinstance(p, Admission) and p.rows)
        or (isinstance(p, WindowVisit) and p.record is not None)
    )


def call_fields(p: Admission | CallRecord) -> dict[str, Any]:
    if isinstance(p, CallRecord):
        return {"tool_name": p.tool_name, "tool_call_id": p.tool_call_id}
    return {}


def recorded_final(p: CallRecord) -> tuple[str, Any] | None:
    """What the record's call came to before it ran: dispatched, or refused."""
    if p.dispatched is not None:
        return ("pass", p.dispatched.args)
    if p.content is not None:
        return ("deny", p.content)
    return None  # still waiting on a person when the record ends


def verdict_word(final: tuple[str, Any] | None, proposed: Any) -> str:
    if final is None:
        return "ask"
    if final[0] == "deny":
        return "deny"
    return "allow" if final[1] == proposed else "transform"


def after_word(rows: Sequence[MiddlewareDecision]) -> str:
    if any(r.outcome != "allow" for r in rows):
        return "deny"
    return "transform" if any(r.changed for r in rows) else "allow"


def execution_of(p: CallRecord) -> RecordedCall | None:
    """What the record holds of the call's execution, for the served tools."""
    d = p.dispatched
    if d is None:
        return None
    if p.human is not None:
        return RecordedCall(args=d.args, question=p.human.question, detail=None)
    if p.ended is None:
        return RecordedCall(args=d.args, known=False)
    return RecordedCall(args=d.args, result=p.ended.result, error=p.ended.error)
