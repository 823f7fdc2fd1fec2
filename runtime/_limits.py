"""One operation's limits: model calls, tool calls, its time, deferred cancels.

Pattern: a small budget object the loop consults at its step boundaries.
Role:    runtime layer; ``Loop.drive`` makes one per run, resume or recovery;
         it raises ``TurnLimitError`` (recorded as ``error.fatal``) or the
         ``CancelledError`` it deferred.

Laws: R23 (``max_model_calls``, ``max_tool_calls``, ``max_turn_s``; the session
stays continuable), R7 (a cancel during a sync tool waits for the next step
boundary, so the call's outcome is recorded).
Why counts from the fold and time from the operation: a turn resumed on
another host keeps counting; a person's wait is not charged.
"""

from __future__ import annotations

import asyncio
import contextvars
import time

from helmlog.events import Folder

from ._config import AgentConfig
from ._errors import TurnLimitError
from ._tools import deferred_cancels

YIELD_EVERY_S = 0.001  # the longest a run of steps goes without yielding


class _Deferring:
    """``TurnBudget.deferring``'s manager: a plain class, not a generator
    (one per operation on the hot path, bench/turns.py)."""

    __slots__ = ("_noted", "_token")

    def __init__(self, noted: list[bool]) -> None:
        self._noted = noted
        self._token: contextvars.Token[list[bool] | None] | None = None

    def __enter__(self) -> None:
        self._token = deferred_cancels().set(self._noted)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        deferred_cancels().reset(self._token)


class TurnBudget:
    """The limits of one operation on a session."""

    __slots__ = ("_config", "_yielded", "deadline", "deferred")

    def __init__(self, config: AgentConfig) -> None:
        self._config = config
        ms = config.max_turn_ms
        self.deadline = None if ms is None else config.clock() + ms
        self.deferred: list[bool] = []  # cancellations noted while a tool ran
        self._yielded = time.monotonic()

    def deferring(self) -> _Deferring:
        """While open, a cancellation during a threaded tool is noted here."""
        return _Deferring(self.deferred)

    def before_model_call(self, f: Folder) -> None:
        """A step boundary: the model-call limit, the time, a deferred cancel."""
        limit = self._config.max_model_calls
        if f.iteration + 1 > limit:
            raise TurnLimitError(limit="max_model_calls", value=limit)
        if self.deadline is not None:
            self.check_time()
        if self.deferred:
            raise asyncio.CancelledError

    def before_tool_call(self, f: Folder) -> None:
        """Before a call not yet started: the tool-call limit and the time."""
        limit = self._config.max_tool_calls
        if f.tool_calls >= limit:
            raise TurnLimitError(limit="max_tool_calls", value=limit)
        if self.deadline is not None:
            self.check_time()

    def due_yield(self) -> bool:
        """Whether the run should yield to the event loop at this boundary: it
        has not for ``YIELD_EVERY_S``. A yield is an event-loop turn (a poll
        of its selector), a few percent of a memory-store turn if taken at
        every step; taken at most once a millisecond it still bounds how long
        a run of sync steps keeps other sessions and a cancellation waiting.
        """
        now = time.monotonic()
        if now - self._yielded < YIELD_EVERY_S:
            return False
        self._yielded = now
        return True

    def check_time(self) -> None:
        """``TurnLimitError`` once the operation's ``max_turn_s`` has passed."""
        if self.deadline is not None and self._config.clock() >= self.deadline:
            ms = self._config.max_turn_ms or 0
            raise TurnLimitError(limit="max_turn_s", value=ms / 1000)
