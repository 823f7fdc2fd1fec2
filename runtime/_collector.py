"""The cycle collector of a long-lived process, settled once it has warmed.

Pattern: one call at a documented point, once a server or session host has
         imported and built what lives as long as it does: collect once,
         freeze the survivors (``gc.freeze``), set thresholds, and from then
         on freeze what survives each middle or full collection.
Role:    runtime layer; ``helmlog.runtime.lowlevel.settle_collector``, for
         ``helmlog serve``, the actor session host and bench/sessions.py; the
         library never calls it on its own (the process is its user's).

Laws: none changes (what the collector does is invisible to the record);
issue 29 item 2 (full collections of 122-134 ms set the p99).

Why freeze: frozen objects are never walked, yet still freed by reference
counting. Why again after each older collection: resident sessions come and
go. Why a bound: cycles frozen while alive would stay for the process's
life; once the process's peak memory has doubled since the last full walk,
the next full collection walks the frozen set again. Why the peak and not a
count of the frozen set: counting it is a walk of all of it.
More: docs/design.md ("The collector of a server").
"""

from __future__ import annotations

import gc
import resource
import sys
from typing import Any, Final

# A young walk per 200 allocations (net), a middle one after every second:
# every young object of a turn in flight survives its walk, so a middle walk
# after ten young ones (Python's 700/10/10) walked 20,000-38,000 of them,
# 20-39 ms at 1,000 users; after two, at most 9-14 ms, for the same CPU
# per turn (issue 29 item 2, bench/sessions.py).
SERVER_THRESHOLDS: Final = (200, 1, 10)
# The process's peak resident memory may grow to this many times what it was
# after the last full walk (never less than RECLAIM_FLOOR_KIB) before the
# next full collection walks the frozen set again and frees the cycles it
# held.
RECLAIM_FACTOR: Final = 2.0
RECLAIM_FLOOR_KIB: Final = 256 * 1024


class _Freezer:
    """What the hook knows between collections: the peak memory (KiB) past
    which the frozen set is thawed, and whether a thaw waits for the next
    full collection."""

    limit_kib = 0.0
    thawed = False


def peak_kib() -> int:
    """The process's peak resident memory in KiB (``getrusage``: one system
    call, no walk; Linux counts KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def _set_limit() -> None:
    _Freezer.limit_kib = RECLAIM_FACTOR * max(peak_kib(), RECLAIM_FLOOR_KIB)


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    """``gc.callbacks`` hook: once a middle or full collection has ended,
    freeze every object it left, so no later collection walks them again;
    once the process's peak memory has passed its limit, thaw the frozen set
    for the next full collection.

    A hook cannot collect (``gc.collect`` inside a collection does nothing),
    so the thaw waits for Python's own next full collection: middle ones
    until then freeze nothing, the full one walks everything and frees the
    cycles the freeze held, and the limit is set again from the peak after
    it. What the freeze holds beyond the live set is garbage, and garbage
    that is never freed is memory that grows; a turn in flight that was
    frozen and freed by reference counting is not. So a full walk is paid
    once per doubling of the process's peak, and a server whose memory has
    stopped growing walks its frozen set never again. The peak is one system
    call: the frozen set's count (``gc.get_freeze_count``) follows the whole
    frozen list, 15-24 ms at 130,000-185,000 objects in a heap a server has
    fragmented, and pymalloc's block count walks every arena (2-4 ms at
    9 million blocks)."""
    if phase != "stop" or info["generation"] < 1:
        return
    if _Freezer.thawed:
        if info["generation"] < 2:
            return
        _Freezer.thawed = False
        gc.freeze()
        _set_limit()
        return
    gc.freeze()
    if peak_kib() > _Freezer.limit_kib:
        gc.unfreeze()
        _Freezer.thawed = True


def settle_collector(thresholds: tuple[int, int, int] = SERVER_THRESHOLDS) -> int:
    """Collect, freeze what survives, and set the collector's thresholds.

    Call it once a process has warmed (imports done, agents built, a first
    turn run). Objects made later are collected as usual while young; what
    survives a middle-generation (or full) collection is frozen in turn, by
    a ``gc.callbacks`` hook installed once however often this is called.
    Cyclic garbage frozen that way is freed by the full collection that
    follows the doubling of the process's peak memory (at least 512 MiB).

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
    _set_limit()
    _Freezer.thawed = False
    gc.set_threshold(*thresholds)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)
    return gc.get_freeze_count()
