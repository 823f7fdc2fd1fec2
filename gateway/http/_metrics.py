"""Counters for ``GET /metrics``, in the Prometheus text format.

Pattern: a few labelled counters and duration summaries in one process,
         rendered as text exposition format 0.0.4 on each scrape.
Role:    gateway layer (http), for ``helmlog serve``; the app counts
         requests, the service counts sessions, turns, decisions and times
         its store operations.
Emits:   nothing.

Laws: issue 11 item 1 (``/metrics``: sessions, turns, asks pending, store
latency). A gauge that the record can answer (asks pending) is read from the
asks index at scrape time, so it is the same in every replica.

Why no client library: the format is a few lines of text, and a dependency
for it would pull in a registry of its own beside the counters we need.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]

_HELP: Final = {
    "helmlog_http_requests_total": (
        "counter",
        "HTTP requests served, by route and status.",
    ),
    "helmlog_sessions_started_total": ("counter", "Sessions started through the API."),
    "helmlog_turns_total": ("counter", "Turns and resumes run, by how they ended."),
    "helmlog_decisions_total": ("counter", "Asks decided, by decision."),
    "helmlog_turn_seconds": ("summary", "Time to run a turn or a resume."),
    "helmlog_store_seconds": (
        "summary",
        "Time spent in store operations, by operation.",
    ),
    "helmlog_asks_pending": ("gauge", "Pauses waiting on a person (the asks index)."),
}


class Metrics:
    """Counters and summaries; ``render`` adds gauges measured at scrape."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[Labels, float]] = {}
        self._sums: dict[str, dict[Labels, tuple[float, int]]] = {}

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to counter ``name`` with ``labels``."""
        series = self._counts.setdefault(name, {})
        key = tuple(sorted(labels.items()))
        series[key] = series.get(key, 0.0) + amount

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        """Record one duration in summary ``name``."""
        series = self._sums.setdefault(name, {})
        key = tuple(sorted(labels.items()))
        total, count = series.get(key, (0.0, 0))
        series[key] = (total + seconds, count + 1)

    @contextmanager
    def timed(self, name: str, **labels: str) -> Iterator[None]:
        """Observe how long the block took (also when it raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.observe(name, time.perf_counter() - started, **labels)

    def render(self, gauges: dict[str, float]) -> str:
        """The exposition text: every counter, summary and the given gauges."""
        lines: list[str] = []
        for name, series in sorted(self._counts.items()):
            lines.extend(_header(name))
            lines.extend(
                f"{name}{_labels(k)} {_num(v)}" for k, v in sorted(series.items())
            )
        for name, sums in sorted(self._sums.items()):
            lines.extend(_header(name))
            for key, (total, count) in sorted(sums.items()):
                lines.append(f"{name}_sum{_labels(key)} {_num(total)}")
                lines.append(f"{name}_count{_labels(key)} {count}")
        for name, value in sorted(gauges.items()):
            lines.extend(_header(name))
            lines.append(f"{name} {_num(value)}")
        return "\n".join(lines) + "\n"


def _header(name: str) -> list[str]:
    kind, text = _HELP.get(name, ("untyped", name))
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def _labels(key: Labels) -> str:
    if not key:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)
