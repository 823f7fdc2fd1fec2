"""The cycle collector of a long-lived process, settled once it has warmed.

Pattern: one call at a documented point, once a server or session host has
         imported and built what lives as long as it does: collect once,
         freeze the survivors (``gc.freeze``), set thresholds for a server.
Role:    runtime layer; ``helmlog.runtime.lowlevel.settle_collector``, for
         servers, session hosts and bench/sessions.py; the library never
         calls it on its own (the process is its user's).

Laws: none changes (what the collector does is invisible to the record);
issue 29 item 2 (full collections of 122-134 ms set the p99).

Why freeze: a full collection walks every tracked object, modules and
classes included; frozen ones are never walked, yet still freed by
reference counting (only cycles among them wait for ``gc.unfreeze``).
Why a young threshold of 20,000: at 700 a turn's in-flight objects were
collected every few turns and promoted to where only a full collection frees.
"""

from __future__ import annotations

import gc
from typing import Final

SERVER_THRESHOLDS: Final = (20_000, 20, 20)


def settle_collector(thresholds: tuple[int, int, int] = SERVER_THRESHOLDS) -> int:
    """Collect, freeze what survives, and set the collector's thresholds.

    Call it once a process has warmed (imports done, agents built, a first
    turn run); objects made later are collected as usual.

    Args:
        thresholds: ``gc.set_threshold``'s three, each a positive integer.

    Returns:
        How many objects the collector no longer walks (``gc.get_freeze_count``).

    Raises:
        ValueError: the thresholds are not three positive integers.
    """
    if len(thresholds) != 3 or not all(type(t) is int and t > 0 for t in thresholds):
        raise ValueError(
            f"settle_collector takes three positive integer thresholds, "
            f"not {thresholds!r}"
        )
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return gc.get_freeze_count()
