"""How soon an upstream that failed is started again (``RestartPacing``).

Pattern: the pacing on a clock the test moves (a number), so every wait is
         exact and nothing sleeps.
Role:    unit tests of ``gateway/upstream/_pacing.py``; the proxy under a real
         crash-looping child: ``test_proxy_transports.py``.
Emits:   nothing.

Laws: P25 (a failed upstream is started again by a later request, the first
time at once), H4 (a refused request's wait is in the log only).
"""

from __future__ import annotations

from helmlog.gateway.upstream._pacing import BASE_S, CAP_S, STABLE_S, RestartPacing


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_p25_the_first_restart_and_the_one_after_it_are_at_once() -> None:
    """P25: an upstream that failed once is started again at once, and so is
    the next (an attempt that failed while it was still coming back)."""
    clock = Clock()
    pacing = RestartPacing(clock)
    assert 0.0 == pacing.wait_s()
    pacing.started()
    assert 0.0 == pacing.wait_s()
    pacing.started()
    assert BASE_S == pacing.wait_s()


def test_p25_restarts_that_keep_coming_wait_twice_as_long_up_to_the_cap() -> None:
    """P25: each restart that follows its wait closely doubles the next
    wait, BASE_S, 2 BASE_S, ... never more than CAP_S."""
    clock = Clock()
    pacing = RestartPacing(clock)
    pacing.started()
    waits = []
    for _ in range(10):
        clock.now += pacing.wait_s()
        pacing.started()
        waits.append(pacing.wait_s())
    assert [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0] == waits
    assert (BASE_S, CAP_S) == (0.5, 30.0)


def test_p25_an_upstream_that_ran_well_is_started_again_at_once() -> None:
    """P25: once an upstream has run STABLE_S past its wait without another
    restart, its next failure is started again at once, as the first was."""
    clock = Clock()
    pacing = RestartPacing(clock)
    for _ in range(4):
        clock.now += pacing.wait_s()
        pacing.started()
    owed = pacing.wait_s()
    assert owed > BASE_S
    clock.now += owed + STABLE_S
    pacing.started()
    assert 0.0 == pacing.wait_s()
