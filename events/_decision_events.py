"""The two decision events: the filed row (stored) and its fact (watched).

Pattern: two tagged event Structs on the shared envelope, and the one
         projection from a ledger row to its value-free fact (``fact_for``).
Role:    events layer; the runtime files rows as ``decision.filed``; the
         facts projection (``events/_facts.py``) turns each into a
         ``middleware.decision`` for watchers and the facts streams.
Emits:   nothing; these are the emissions.

Laws: G49 (the fact has no value field, by schema), R4 (a fact is a
projection of its row), R10, G93 (``from`` and ``changed_keys`` hold no value).

Why two events, one stored: ``fold`` needs the row's values to rebuild the
ledger, watchers must get facts that cannot carry one. More: docs/design.md.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from ._decision import MiddlewareDecision
from ._envelope import Event


class DecisionFiled(Event, tag="decision.filed", frozen=True):
    """A ledger row, with its values, filed in the session stream."""

    type: ClassVar[str] = "decision.filed"
    row: MiddlewareDecision


class MiddlewareDecisionEvent(Event, tag="middleware.decision", frozen=True):
    """The decision fact: who decided what, where, and why — never a value."""

    type: ClassVar[str] = "middleware.decision"
    middleware: str
    moment: str
    at: str
    iteration: int
    outcome: str
    changed: bool
    phase: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    why: str | None = None
    component_id: str | None = None
    from_: dict[str, str] | None = msgspec.field(default=None, name="from")
    changed_keys: tuple[str, ...] | None = None


def fact_for(
    row: MiddlewareDecision,
    *,
    session_id: str = "",
    seq: int | None = None,
    timestamp: int = 0,
    prev_hash: str = "",
    replayed: bool = False,
) -> MiddlewareDecisionEvent:
    """The value-free fact for one row (G49), with an empty envelope unless
    one is given.

    ``fact_of`` gives the fact of a filed row with the row's envelope.
    """
    return MiddlewareDecisionEvent(
        session_id=session_id,
        seq=seq,
        timestamp=timestamp,
        prev_hash=prev_hash,
        replayed=replayed,
        middleware=row.middleware,
        moment=row.moment,
        at=row.at,
        iteration=row.iteration,
        outcome=row.outcome,
        changed=row.changed,
        phase=row.phase,
        tool_name=row.tool_name,
        tool_call_id=row.tool_call_id,
        why=row.why,
        component_id=row.component_id,
        from_=row.from_,
        changed_keys=row.changed_keys,
    )
