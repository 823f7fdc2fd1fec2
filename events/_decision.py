"""One ledger row: ``MiddlewareDecision``.

Pattern: a frozen record with optional fields omitted when encoded.
Role:    events layer; the runtime's walkers produce rows, the stream stores
         them inside ``decision.filed`` events, ``fold`` lists them.
Emits:   nothing.

Laws: G44–G48 (presence, ``why``, ``changed``, ``iteration``).

Why ``changed`` and ``iteration`` have no default: G45 wants ``changed=False``
and ``iteration=0`` always encoded, and ``omit_defaults`` drops defaults.

Why a row interns its vocabulary (link name, moment, at, outcome, phase, tool
name): a host keeps thousands of sessions resident (R21), each holding every
row it folded, and every decoded row would otherwise carry its own copy of
the same few words — about a fifth of a resident session's memory. Interning
changes no value, only how many copies of it exist.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec

_intern = sys.intern
_set = msgspec.structs.force_setattr


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

    def __post_init__(self) -> None:
        # Runs on construction and on decoding; see the module docstring.
        _set(self, "middleware", _intern(self.middleware))
        _set(self, "moment", _intern(self.moment))
        _set(self, "at", _intern(self.at))
        _set(self, "outcome", _intern(self.outcome))
        if self.phase is not None:
            _set(self, "phase", _intern(self.phase))
        if self.tool_name is not None:
            _set(self, "tool_name", _intern(self.tool_name))
