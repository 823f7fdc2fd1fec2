"""Replay: re-emit a recorded stream to sinks, marked ``replayed=True``.

Pattern: a read-only projection; sinks see a past run as if they had watched.
Role:    sinks layer; ``helmlog replay --jsonl/--otlp`` and tests use it.
Emits:   the recorded events, in seq order, each with ``replayed=True``.

Laws: R6 (replay never appends and leaves stored events and hashes
untouched), R10 (unknown events are delivered as ``UnknownEvent``), R16
(sinks read; they never drive), R4 (each row is delivered as its fact, with
the row's seq, by ``watched``'s rule: a stream written before facts were
projections replays its stored facts, one per row either way).

Why ``replayed`` is set on a copy: the mark is a delivery fact, not part of
the record; the stored bytes (and so the hash chain) never change.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable
from typing import Any

import msgspec

from helmlog.events import Event, StoredEvent, UnknownEvent, watched

log = logging.getLogger("helmlog")


async def replay(
    events: Iterable[StoredEvent | Event | UnknownEvent],
    *sinks: Any,
    redact: Any = None,
) -> int:
    """Deliver recorded events to each sink's ``on_event`` in seq order,
    each row (``decision.filed``) as its fact (``watched``).

    ``redact`` is the agent's redaction policy (anything with ``served(event)``):
    a replayed run is then served as a watcher saw it live (G86). Returns the
    number of events delivered. A sink that raises is logged and skipped for
    that event; it never stops the replay of the others.
    """
    decoded: list[Event | UnknownEvent] = [
        e.decode() if isinstance(e, StoredEvent) else e for e in events
    ]
    decoded.sort(key=lambda e: e.seq or 0)
    count = 0
    for event in watched(decoded):
        marked = msgspec.structs.replace(event, replayed=True)
        if redact is not None:
            marked = redact.served(marked)
        for sink in sinks:
            try:
                out = sink.on_event(marked)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("sink %r failed on replayed %s", sink, event.type)
        count += 1
    return count
