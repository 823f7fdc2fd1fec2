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
import weakref
from collections.abc import Iterator

import pytest

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
    """Issue 29 item 2: a young walk stays short (per 700 allocations: one
    of 20,000 took 15-20 ms under load, bench/sessions.py); given thresholds
    are set as given."""
    settle_collector()
    assert (700, 10, 10) == gc.get_threshold()
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


def test_cycles_frozen_while_alive_are_freed_once_the_frozen_set_doubles(
    collector: None,
) -> None:
    """Issue 29 item 2, bounded: a cycle frozen while alive and dropped
    later is not held for the process's life; once the frozen set has
    doubled since the last full walk, the next full collection frees it, and
    freezing resumes after it."""
    settle_collector()
    cycle = Warm()
    cycle.self = cycle  # type: ignore[attr-defined]
    ref = weakref.ref(cycle)
    gc.collect(1)  # alive: frozen by the hook
    del cycle
    gc.collect(1)
    assert ref() is not None  # held by the freeze, for now
    residents = [Warm() for _ in range(2 * max(gc.get_freeze_count(), 50_000))]
    # The frozen set has doubled (the allocations' own collections may have
    # seen it first): thawed, then the next full walk frees the cycle and
    # freezes the rest.
    gc.collect(1)
    gc.collect(2)
    assert ref() is None
    assert not _watched(residents[0])
    assert gc.get_freeze_count() >= len(residents)


def test_a_frozen_set_that_only_churns_is_not_walked_to_count_it(
    reads: list[int],
) -> None:
    """Issue 29 item 2: turns in flight frozen by a middle collection and
    freed soon after (the heap does not grow) never make the hook count the
    frozen set, a walk of all of it (15-34 ms at 120,000 objects under load),
    however far its upper bound has passed the limit."""
    frozen_at_start = count()
    for _ in range(24):
        # A quarter of the limit's room: about half of it in heap blocks (an
        # instance and its attribute values).
        in_flight = [Warm() for _ in range(max(frozen_at_start, 50_000) // 4)]
        gc.collect(1)  # alive: frozen by the hook
        assert not _watched(in_flight[0])
        del in_flight
    # Six times the limit's room went through the freeze, none of it kept.
    assert ([], True) == (reads, count() < 2 * max(frozen_at_start, 50_000))


def test_a_frozen_set_held_near_its_limit_is_counted_once_per_quarter_of_growth(
    reads: list[int],
) -> None:
    """Issue 29 item 2: a live set that grows (resident sessions) holds the
    frozen count just under its limit, where little room is left; the heap
    growing in steps wider than that room is counted at most once per
    quarter of the limit of growth (a count walks the whole frozen list,
    18-38 ms at 1,000 users), not at every step, and still counted as it
    grows (frozen garbage is still found)."""
    limit = 2 * max(count(), 50_000)
    residents = [Warm() for _ in range(int(limit * 0.92) - count())]
    gc.collect(1)  # alive: frozen by the hook, 0.08 of the limit left
    steps, ballast = 9, []
    for _ in range(steps):
        for _ in range(16):  # turns in flight: the bound grows, not the count
            in_flight = [Warm() for _ in range(limit // 32)]
            gc.collect(1)
            del in_flight
        # The heap grows by more than the room left, less than a quarter.
        ballast.append([bytes(100) for _ in range(limit // 10)])
        gc.collect(1)
    assert (True, False) == (1 <= len(reads) <= steps // 2, _watched(residents[0]))


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
