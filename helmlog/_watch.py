"""``helmlog watch``: a consumer-group watcher of the facts streams, as a command.

Pattern: a sink named by a spec string (``jsonl:PATH``, ``otlp:URL``,
         ``console``), driven by ``helmlog.sinks.FactsConsumer``.
Role:    the face (CLI plumbing); ``helmlog watch --store URL --group NAME``.
         The sinks themselves live in ``helmlog.sinks`` (``OtlpFactsSink``).
Emits:   nothing itself; the group's position and acknowledgements only.

Laws: R4 (read through a consumer group, acknowledged only after the sink
returned), R16 (the watcher reads; it never drives a run).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helmlog.events import EventStore, HelmlogError
from helmlog.sinks import ConsoleSink, FactsConsumer, JsonlSink, OtlpFactsSink

SINK_HELP = "Where facts go: jsonl:PATH, otlp:URL or console."


class WatchSinkError(HelmlogError):
    """A sink spec names no sink helmlog knows, or one it cannot open."""

    code = "ERR_WATCH_SINK"


def default_consumer() -> str:
    """A consumer name stable across restarts on one machine: its host name."""
    return socket.gethostname() or "helmlog-watch"


def open_sink(spec: str) -> tuple[Any, Callable[[], None]]:
    """The sink a spec names and how to close it; ``WatchSinkError`` if none."""
    kind, _, target = spec.partition(":")
    if kind == "console" and not target:
        return ConsoleSink(), _nothing
    if kind == "jsonl" and target:
        path = Path(target)
        try:
            # Fail now, not at the first fact: the file must be writable.
            with path.open("ab"):
                pass
        except OSError as exc:
            raise WatchSinkError(f"cannot write {target}: {exc}") from exc
        return JsonlSink(path), _nothing
    if kind == "otlp" and target:
        sink = OtlpFactsSink(target)
        return sink, sink.close
    raise WatchSinkError(f"unknown sink {spec!r}: use jsonl:PATH, otlp:URL or console")


async def watch(
    store: EventStore,
    *,
    group: str,
    consumer: str,
    sink: Any,
    from_start: bool = True,
    claim_idle_ms: int | None = 30_000,
    count: int | None = None,
    idle_exit_s: float | None = None,
) -> int:
    """Run a ``FactsConsumer`` until ``count`` facts or ``idle_exit_s`` idle."""
    consumer_loop = FactsConsumer(
        store,
        group,
        consumer,
        sink,
        from_start=from_start,
        claim_idle_ms=claim_idle_ms,
        claim_every_s=max(0.5, (claim_idle_ms or 0) / 2000),
        block_ms=500,
    )
    return await consumer_loop.run(limit=count, idle_exit_s=idle_exit_s)


def _nothing() -> None:
    return None
