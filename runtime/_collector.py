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
go. Why a bound: cycles frozen while alive would stay for the process's life;
once the frozen set has doubled, the next full collection walks it again.
More: docs/design.md ("The collector of a server").
"""

from __future__ import annotations

import gc
import sys
from typing import Any, Final

# Python's own: a young walk of 700 objects took ~0.2 ms at 1,000 users, one
# of 20,000 took 15-20 ms (issue 29 item 2, bench/sessions.py).
SERVER_THRESHOLDS: Final = (700, 10, 10)
# The frozen set may grow to this many times what the last full walk left
# (never less than RECLAIM_FLOOR objects) before the next full collection
# walks it all again and frees the cycles it held.
RECLAIM_FACTOR: Final = 2
RECLAIM_FLOOR: Final = 50_000
# Two counts of the frozen set are at least this share of the limit of heap
# growth apart (blocks), however little room is left under the limit.
READ_SPACING: Final = 4


class _Freezer:
    """What the hook knows between collections: the frozen count after the
    last full walk, an upper bound on it now, the exact count and the heap's
    allocated blocks when it was last read, and whether a thaw waits for the
    next full collection."""

    baseline = 0
    bound = 0
    counted = 0
    heap = 0
    thawed = False


def _read() -> int:
    """The exact frozen count (a walk of the frozen list), noted with the
    heap's blocks at that moment."""
    _Freezer.bound = _Freezer.counted = gc.get_freeze_count()
    _Freezer.heap = sys.getallocatedblocks()
    return _Freezer.counted


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    """``gc.callbacks`` hook: once a middle or full collection has ended,
    freeze every object it left, so no later collection walks them again;
    once the frozen set has doubled, thaw it for the next full collection.

    A hook cannot collect (``gc.collect`` inside a collection does nothing),
    so the thaw waits for Python's own next full collection: middle ones
    until then freeze nothing, the full one walks everything and frees the
    cycles the freeze held, and its survivors are the new baseline.
    Why a bound and not ``gc.get_freeze_count()`` each time: that walks the
    whole frozen list (5-10 ms at 75,000 objects, 15-34 ms at 120,000 in a
    fragmented heap); the bound adds what each freeze takes (the old
    generation, survivors only). Under load most of what is frozen is a turn
    in flight that dies soon after, so the bound passes the limit at once
    (the count was read at nearly every middle collection: 33 reads in 11 s
    at 1,000 users). So the count is read only once the bound has also grown
    by half the last count (one walk per half of the frozen list frozen
    anew) and the heap's allocated blocks (``sys.getallocatedblocks``, no
    walk of objects) have grown by the room left under the limit: what the
    freeze holds beyond the live set is garbage, and garbage that is not
    freed is heap that grows; a turn in flight frozen and freed is not.
    Why that room is at least a quarter of the limit: a live set that grows
    (resident sessions) holds the count just under the limit, where the room
    left is small and every heap step passed it (8 walks of 18-38 ms in 8 s
    on Redis at 1,000 users); so the set may pass the limit by a quarter of
    it before the walk that thaws it."""
    if phase != "stop" or info["generation"] < 1:
        return
    if _Freezer.thawed:
        if info["generation"] < 2:
            return
        _Freezer.thawed = False
        gc.freeze()
        _Freezer.baseline = _read()
        return
    _Freezer.bound += len(gc.get_objects(generation=2))
    gc.freeze()
    limit = RECLAIM_FACTOR * max(_Freezer.baseline, RECLAIM_FLOOR)
    if _Freezer.bound <= limit or 2 * (_Freezer.bound - _Freezer.counted) < (
        _Freezer.counted
    ):
        return
    room = max(limit - _Freezer.counted, limit // READ_SPACING)
    if sys.getallocatedblocks() - _Freezer.heap < room:
        return
    if _read() > limit:  # freed objects left the list
        gc.unfreeze()
        _Freezer.thawed = True


def settle_collector(thresholds: tuple[int, int, int] = SERVER_THRESHOLDS) -> int:
    """Collect, freeze what survives, and set the collector's thresholds.

    Call it once a process has warmed (imports done, agents built, a first
    turn run). Objects made later are collected as usual while young; what
    survives a middle-generation (or full) collection is frozen in turn, by
    a ``gc.callbacks`` hook installed once however often this is called.
    Cyclic garbage frozen that way is freed by the full collection that
    follows the frozen set's doubling (one full walk per doubling).

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
    _Freezer.baseline = _read()
    _Freezer.thawed = False
    gc.set_threshold(*thresholds)
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)
    return gc.get_freeze_count()
