"""Follow the facts stream without a consumer group: what ``helmlog tail`` reads.

Pattern: a polling loop over ``EventStore.read_facts`` after a cursor, handing
         each ``FactRecord`` to a callback, until a count or an idle spell.
Role:    sinks layer; the face's ``helmlog tail`` renders each fact it hands.
Emits:   nothing; it reads the facts stream and moves no group's position.

Laws: R4 (each fact once, in stream order, after the cursor), R16 (a
follower reads; it never drives a run).

Why no group: a person tailing a stream wants what happens next, not a share
of a group's work; nothing is acknowledged, so nothing is taken from a watcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from helmlog.events import EventStore, FactRecord


async def follow_facts(
    store: EventStore,
    on_fact: Callable[[FactRecord], None],
    *,
    from_start: bool,
    count: int | None,
    idle_exit_s: float | None,
    block_ms: int = 500,
) -> int:
    """Hand each fact to ``on_fact`` as it is published; return how many.

    Starts at the stream's beginning (``from_start``) or after its current
    end; stops after ``count`` facts, or after ``idle_exit_s`` with none.
    """
    after: str | None = None
    if not from_start:
        existing = await store.read_facts(None)
        after = existing[-1].id if existing else "0"
    shown = 0
    idle = 0.0
    while count is None or shown < count:
        facts = await store.read_facts(after, block_ms=block_ms)
        if not facts:
            idle += block_ms / 1000
            if idle_exit_s is not None and idle >= idle_exit_s:
                break
            if store.url == "memory://":
                await asyncio.sleep(block_ms / 1000)
            continue
        idle = 0.0
        for fact in facts:
            on_fact(fact)
            shown += 1
            after = fact.id
            if count is not None and shown >= count:
                break
    return shown
