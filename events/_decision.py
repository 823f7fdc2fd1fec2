"""One ledger row: ``MiddlewareDecision``.

Pattern: a frozen record with optional fields omitted when encoded.
Role:    events layer; the runtime's walkers produce rows, the stream stores
         them inside ``decision.filed`` events, ``fold`` lists them.
Emits:   nothing.

Laws: G44–G48 (presence, ``why``, ``changed``, ``iteration``), G93 (the
honesty fields: ``from`` only when the link declared it, ``changed_keys``
on a before-tool rewrite: names, never values).

Why ``changed`` and ``iteration`` have no default: G45 wants ``changed=False``
and ``iteration=0`` always encoded, and ``omit_defaults`` drops defaults.
"""

from __future__ import annotations

from typing import Any

import msgspec


class MiddlewareDecision(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False
):
    """One decision a rule made, pass-throughs included.

    Attributes:
        middleware: the link's name.
        moment: ``"input"``, ``"before-tool"``, ``"after-tool"`` or ``"output"``.
        at: ``"tool"`` or ``"message"``.
        iteration: the model call this decision belongs to (G48).
        outcome: ``"allow"``, ``"deny"`` or ``"ask"``.
        changed: whether the value that flows on changed.
        phase: ``"input"``/``"output"`` on message rows, else ``None``.
        tool_name: on tool rows.
        tool_call_id: on tool rows.
        why: the reason (G46), absent on a plain ``allow()``.
        before: the value before a change (only when ``changed``).
        after: the value after a change (only when ``changed``).
        component_id: on the resume-side row of an ask that carried one.
        from_: encoded ``from``; where a rewrite's values came from, name by
            name (``"person"``, ``"default"``, ``"app"``), only when the link
            declared it (``allow(value, why, from_=...)``).
        changed_keys: the names of the arguments a before-tool rewrite
            changed (added, removed or given another value), never values.
        masked: ``True`` when the link masks what it replaces (a PII scrub,
            ``masks_values``): ``before`` holds the placeholder, never the
            value (issue 28 item 7); the row survives, the value does not.
    """

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
    before: Any = None
    after: Any = None
    component_id: str | None = None
    from_: dict[str, str] | None = msgspec.field(default=None, name="from")
    changed_keys: tuple[str, ...] | None = None
    masked: bool | None = None
