"""The wall clock: milliseconds since the Unix epoch, the runtime's one.

Pattern: one injectable time source (a plain callable returning ``int`` ms).
Role:    runtime layer; the default ``clock`` of ``Agent.create`` and the time
         a person's decision is stamped with (``check_in_approved``/
         ``check_in_declined``); other layers use ``helmlog.runtime.wall_clock_ms``.
Emits:   nothing.

Laws: G63 (a decision's ``at`` is now in ms); the fold never reads a clock
(R1): the loop takes its clock as an argument, so tests pass a fake one.

Why one function and not one per module: the record's timestamps and a
decision's ``at`` are compared (``paused_duration_ms``), so they must come
from the same clock with the same rounding.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (UTC)."""
    return time.time_ns() // 1_000_000
