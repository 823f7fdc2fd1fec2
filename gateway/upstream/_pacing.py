"""How soon an upstream that failed may be started again.

Pattern: a small state object the connection holds (``Upstream._pacing``):
         ``wait_s()`` before a restart, ``started()`` when one begins.
Role:    gateway layer; ``Upstream._heal`` asks it before starting a stdio
         child that exited, or connecting again after a failed attempt (not
         before a new session for an HTTP 404: nothing failed there).
Emits:   nothing; the refused request gets the proxy's withheld error.

Laws: P25 (the next request starts a failed upstream again), H4 (a request
refused while it waits gets the withheld error, the wait in the log only).

Why: without a pace, an upstream that fails at every start (a crash-looping
child, a server down) is started again by every request, each a process
spawned or a connection refused and a WARNING logged: a request storm is a
fork storm. The first restart is at once (an upstream that failed once is
back as soon as it can be); while restarts keep coming, each waits twice as
long as the last (BASE_S to CAP_S); once an upstream has run STABLE_S past
its wait without needing another, it is at once again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Final

BASE_S: Final = 0.5
CAP_S: Final = 30.0
STABLE_S: Final = 10.0


class RestartPacing:
    """The restarts of one upstream: when the last began, and the wait now
    owed before the next.

    Args:
        clock: seconds, monotonic (``time.monotonic``).
    """

    __slots__ = ("_clock", "gap_s", "last")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.last = -math.inf
        self.gap_s = 0.0

    def wait_s(self) -> float:
        """Seconds before a restart may begin (0: at once)."""
        return max(0.0, self.last + self.gap_s - self._clock())

    def started(self) -> None:
        """A restart begins now: the next one waits twice as long as this one
        did (at least BASE_S, at most CAP_S), unless this one came STABLE_S
        after its wait had passed (the upstream ran well meanwhile)."""
        now = self._clock()
        if now - self.last >= self.gap_s + STABLE_S:
            self.gap_s = 0.0
        else:
            self.gap_s = min(max(2 * self.gap_s, BASE_S), CAP_S)
        self.last = now
