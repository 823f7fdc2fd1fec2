"""Test helpers for code built on helmlog: a fake clock, ids, a recording watcher.

Pattern: each layer ships its test helpers as public API (STYLE.md), so users'
         tests and ours drive the loop the same deterministic way.
Role:    runtime layer; import from ``helmlog.runtime.testing``.
Emits:   nothing; ``Recorder`` only receives.

Why a fake clock: the loop takes its clock as an argument (``Agent.create(...,
clock=...)``) so that timestamps and durations in a recorded stream are the
same on every run — two runs of one script give equal bytes, equal hashes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from helmlog.events import Event, fold

from ._agent import Agent
from ._builder import counter_ids

__all__ = [
    "FakeClock",
    "Recorder",
    "counter_ids",
    "fold_of_last_session",
]


@dataclasses.dataclass(slots=True)
class FakeClock:
    """Milliseconds that advance by ``step`` on every reading."""

    now: int = 1_700_000_000_000
    step: int = 1

    def __call__(self) -> int:
        value = self.now
        self.now += self.step
        return value

    def advance(self, ms: int) -> None:
        """Move time forward without a reading (e.g. a person thinking)."""
        self.now += ms


class Recorder:
    """A watcher that keeps every event it is handed, in order."""

    def __init__(self, id: str | None = None) -> None:
        self.id = id
        self.events: list[Any] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        """The ``type`` of each event received."""
        return [e.type for e in self.events]

    def of_type(self, event_type: str) -> list[Any]:
        """The events of one type."""
        return [e for e in self.events if e.type == event_type]


async def fold_of_last_session(agent: Agent) -> Any:
    """Fold the agent's last session from its store (what another host sees)."""
    sid = agent.session_id
    if sid is None:
        raise ValueError("the agent has not run yet")
    records = await agent.store.read(sid)
    events: Iterable[Event | Any] = (r.decode() for r in records)
    return fold(events)
