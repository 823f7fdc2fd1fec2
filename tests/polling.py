"""Waiting in tests: poll a condition with a deadline, never sleep a fixed time.

Pattern: one polling helper (STYLE.md: "wait by polling with a deadline"),
         async ``until`` and its sync twin ``until_sync``.
Role:    imported by every test that waits on another task, thread or process
         (a Ray host, a restarted Redis, a server coming up) to reach a state.
Emits:   nothing.

Why one helper: a test that waits for a fixed time is slow where the machine
is fast and flaky where it is slow; this one returns as soon as the state is
reached and fails naming what it waited for and the last value it saw.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def until(
    what: str,
    check: Callable[[], Awaitable[T]] | Callable[[], T],
    within: float = 60.0,
    *,
    ok: Callable[[T], object] = bool,
    every: float = 0.02,
) -> T:
    """Poll ``check()`` (sync or async) until ``ok(value)``; return the value.

    Fails with an AssertionError naming ``what`` and the last value seen.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found: Any = check()
        if inspect.isawaitable(found):
            found = await found
        if ok(found):
            return found  # type: ignore[no-any-return]
        assert loop.time() < deadline, (
            f"{what}: not within {within} s (last: {found!r:.300})"
        )
        await asyncio.sleep(every)


def until_sync(
    what: str,
    check: Callable[[], T],
    within: float = 60.0,
    *,
    ok: Callable[[T], object] = bool,
    every: float = 0.02,
) -> T:
    """The sync twin of :func:`until`, for threads and blocking fixtures."""
    deadline = time.monotonic() + within
    while True:
        found = check()
        if ok(found):
            return found
        assert time.monotonic() < deadline, (
            f"{what}: not within {within} s (last: {found!r:.300})"
        )
        time.sleep(every)
