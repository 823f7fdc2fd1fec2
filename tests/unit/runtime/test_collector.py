"""``settle_collector``: a warmed process's objects out of the collector's view.

Pattern: unit tests on the process's own collector, each restoring it
         (``gc.unfreeze``, the thresholds and hooks it found) whatever
         happens.
Role:    unit tests of ``runtime/_collector.py``.
Emits:   nothing.

Laws: issue 29 item 2 (after warm-up, the long-lived objects are out of the
collector's view and the thresholds fit a server); bad input is a typed
error (STYLE.md).
"""

from __future__ import annotations

import gc
import resource
import weakref
from collections.abc import Iterator

import pytest

from helmlog.runtime import _collector
from helmlog.runtime._collector import peak_kib
from helmlog.runtime.lowlevel import settle_collector


@pytest.fixture
def collector() -> Iterator[None]:
    """The process's collector as it was, whatever the test did to it (its
    hooks too: a frozen later test could not collect its own cycles)."""
    before = gc.get_threshold()
    hooks = list(gc.callbacks)
    try:
        yield
    finally:
        gc.callbacks[:] = hooks
        gc.unfreeze()
        gc.set_threshold(*before)


class Warm:
    """A long-lived object (tracked: it has a ``__dict__``)."""


# The frozen set's own count, beside the recording one ``reads`` installs.
count = gc.get_freeze_count


@pytest.fixture
def reads(collector: None, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The collector settled, and every count of its frozen set the hook
    makes from then on (``gc.get_freeze_count``, a walk of it), recorded."""
    settle_collector()
    made: list[int] = []

    def counted() -> int:
        made.append(count())
        return made[-1]

    monkeypatch.setattr(gc, "get_freeze_count", counted)
    return made


def _watched(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_settled_objects_are_out_of_view_and_later_ones_are_not(
    collector: None,
) -> None:
    """Issue 29 item 2: what lived before the call is frozen (never walked);
    what is made after is collected as usual."""
    warm = Warm()
    assert _watched(warm)
    frozen = settle_collector()
    later = Warm()
    assert (False, True) == (_watched(warm), _watched(later))
    assert frozen == gc.get_freeze_count() > 0


def test_thresholds_fit_a_server(collector: None) -> None:
    """Issue 29 item 2: young and middle walks stay short (a young walk per
    200 allocations, a middle one after every second: after ten, one walked
    up to 38,000 objects in flight, bench/sessions.py); given thresholds are
    set as given."""
    settle_collector()
    assert (200, 1, 10) == gc.get_threshold()
    settle_collector((5_000, 10, 10))
    assert (5_000, 10, 10) == gc.get_threshold()


def test_survivors_of_a_middle_collection_are_frozen_in_turn(
    collector: None,
) -> None:
    """Issue 29 item 2: a long-lived object made after settling (a resident
    session) leaves the collector's view once a middle-generation collection
    has found it alive, so no later full collection walks it."""
    settle_collector()
    resident = Warm()
    assert _watched(resident)
    gc.collect(1)
    assert (False, True) == (_watched(resident), gc.get_freeze_count() > 0)


def test_young_cycles_are_still_collected_after_settling(collector: None) -> None:
    """Issue 29 item 2: freezing leaves young garbage to the collector: a
    cycle dropped before any collection saw it alive is freed."""
    settle_collector()
    cycle = Warm()
    cycle.self = cycle  # type: ignore[attr-defined]
    ref = weakref.ref(cycle)
    del cycle
    gc.collect(0)
    assert ref() is None


def test_cycles_frozen_while_alive_are_freed_once_the_peak_passes_its_limit(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 item 2, bounded: a cycle frozen while alive and dropped
    later is not held for the process's life; once the process's peak memory
    has passed its limit, the next full collection frees it, freezing
    resumes after it, and the limit is set again from the peak."""
    settle_collector()
    cycle = Warm()
    cycle.self = cycle  # type: ignore[attr-defined]
    ref = weakref.ref(cycle)
    gc.collect(1)  # alive: frozen by the hook
    del cycle
    gc.collect(1)
    assert ref() is not None  # held by the freeze, for now
    # The peak (a real reading) has passed the limit.
    monkeypatch.setattr(_collector._Freezer, "limit_kib", peak_kib() - 1)
    residents = [Warm() for _ in range(1_000)]
    gc.collect(1)  # thawed: nothing frozen until the full walk
    assert _watched(residents[0])
    gc.collect(2)
    assert ref() is None
    assert not _watched(residents[0])
    assert _collector._Freezer.limit_kib == _limit_now()


def _limit_now() -> float:
    return _collector.RECLAIM_FACTOR * max(peak_kib(), _collector.RECLAIM_FLOOR_KIB)


def test_the_limit_is_twice_the_peak_and_never_below_the_floor(
    collector: None,
) -> None:
    """Issue 29 item 2: a full walk is paid once per doubling of the
    process's peak memory (``getrusage``, one system call), and never before
    512 MiB: a server whose memory has stopped growing walks its frozen set
    never again."""
    settle_collector()
    assert (2.0, 256 * 1024) == (
        _collector.RECLAIM_FACTOR,
        _collector.RECLAIM_FLOOR_KIB,
    )
    assert _collector._Freezer.limit_kib == _limit_now() >= 512 * 1024
    assert peak_kib() == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_the_hook_never_walks_the_frozen_set_to_count_it(
    reads: list[int],
) -> None:
    """Issue 29 item 2: turns in flight frozen by a middle collection and
    freed soon after, and resident sessions that accumulate, never make the
    hook count the frozen set: a walk of all of it (15-24 ms at 130,000 to
    185,000 objects under load, bench/sessions.py)."""
    residents: list[list[Warm]] = []
    for _ in range(24):
        in_flight = [Warm() for _ in range(5_000)]
        residents.append([Warm() for _ in range(1_000)])
        gc.collect(1)  # alive: frozen by the hook
        assert not _watched(in_flight[0])
        del in_flight
    gc.collect(2)
    assert ([], False) == (reads, any(_watched(r[0]) for r in residents))


def test_settling_twice_installs_one_hook(collector: None) -> None:
    """Issue 29 item 2: a host that settles again (a restart of its sweep)
    does not freeze twice per collection."""
    hooks = len(gc.callbacks)
    settle_collector()
    settle_collector()
    assert hooks + 1 == len(gc.callbacks)


@pytest.mark.parametrize("bad", [(0, 10, 10), (700, 10), (700.0, 10, 10)])
def test_bad_thresholds_are_a_value_error_and_change_nothing(
    collector: None, bad: tuple[int, int, int]
) -> None:
    """Bad input is a typed error, raised before the collector is touched."""
    before = gc.get_threshold(), gc.get_freeze_count(), list(gc.callbacks)
    with pytest.raises(ValueError, match="three positive integer thresholds"):
        settle_collector(bad)
    assert before == (gc.get_threshold(), gc.get_freeze_count(), gc.callbacks)
