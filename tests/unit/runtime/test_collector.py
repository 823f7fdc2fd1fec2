"""``settle_collector``: a warmed process's objects out of the collector's view.

Pattern: unit tests on the process's own collector, each restoring it
         (``gc.unfreeze``, the thresholds it found) whatever happens.
Role:    unit tests of ``runtime/_collector.py``.
Emits:   nothing.

Laws: issue 29 item 2 (after warm-up, the long-lived objects are out of the
collector's view and the thresholds fit a server); bad input is a typed
error (STYLE.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from helmlog.runtime.lowlevel import settle_collector


@pytest.fixture
def collector() -> Iterator[None]:
    """The process's collector as it was, whatever the test did to it."""
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


class Warm:
    """A long-lived object (tracked: it has a ``__dict__``)."""


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
    """Issue 29 item 2: the young generation is collected per 20,000
    allocations, not per 700; given thresholds are set as given."""
    settle_collector()
    assert (20_000, 20, 20) == gc.get_threshold()
    settle_collector((5_000, 10, 10))
    assert (5_000, 10, 10) == gc.get_threshold()


@pytest.mark.parametrize("bad", [(0, 10, 10), (700, 10), (700.0, 10, 10)])
def test_bad_thresholds_are_a_value_error_and_change_nothing(
    collector: None, bad: tuple[int, int, int]
) -> None:
    """Bad input is a typed error, raised before the collector is touched."""
    before = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(ValueError, match="three positive integer thresholds"):
        settle_collector(bad)
    assert before == (gc.get_threshold(), gc.get_freeze_count())
