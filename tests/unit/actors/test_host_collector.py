"""A session host settles its collector once its failover sweep has finished.

Pattern: a ``SessionHost`` built outside an actor (no Ray here: no running
         loop, so it spawns no tasks), its failover sweep run on the memory
         store; the process's collector restored whatever happens.
Role:    unit test of ``actors/_host.py``'s call of ``settle_collector``.
Emits:   nothing.

Laws: issue 29 item 2 (a serving host takes its long-lived objects out of
the collector's walk at a documented point, as ``helmlog serve`` does); R22
(the failover sweep runs first, and still finishes the shard's open turns).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from helmlog import Agent
from helmlog.actors import SessionHost
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, scripted


@pytest.fixture
def collector() -> Iterator[None]:
    """The process's collector as it was (thresholds, hooks, nothing frozen)."""
    before = gc.get_threshold()
    hooks = list(gc.callbacks)
    try:
        yield
    finally:
        gc.callbacks[:] = hooks
        gc.unfreeze()
        gc.set_threshold(*before)


def _factory(store: EventStore) -> Agent:
    return Agent.create(provider=scripted([Reply(content="hi")]), store=store).build()


def test_a_host_settles_its_collector_once_its_failover_sweep_has_finished(
    collector: None,
) -> None:
    """Issue 29 item 2: once the sweep has finished, the host's warm objects
    are frozen, the server thresholds set and the hook that freezes later
    survivors installed."""
    host = SessionHost(_factory, "memory://", 0, 1)
    gc.unfreeze()
    gc.set_threshold(700, 10, 10 + 1)  # anything but what the host sets
    hooks = len(gc.callbacks)

    asyncio.run(host._failover())

    assert (True, (200, 1, 10), hooks + 1) == (
        gc.get_freeze_count() > 0,
        gc.get_threshold(),
        len(gc.callbacks),
    )
