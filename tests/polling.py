"""Waiting in tests: poll a condition with a deadline, never sleep a fixed time.

Pattern: one polling helper (STYLE.md: "wait by polling with a deadline").
Role:    imported by tests that wait on another process (a Ray host, a
         restarted Redis) to reach a state.
Emits:   nothing.

Why one helper: a test that waits for a fixed time is slow where the machine
is fast and flaky where it is slow; this one returns as soon as the state is
reached and fails naming what it waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(
    what: str, check: Callable[[], Awaitable[T]], within: float = 60.0
) -> T:
    """Poll ``check()`` until it returns something truthy, or fail naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found = await check()
        if found:
            return found
        assert loop.time() < deadline, f"{what}: not within {within} s"
        await asyncio.sleep(0.05)
