"""JSON-lines and console sinks: the simplest watchers.

Pattern: idempotent sinks keyed by ``(session_id, seq)``.
Role:    sinks layer; attach live (``.watch(JsonlSink(path))``) or replay into.
Emits:   nothing into helmlog; writes lines to a file or a console.

Laws: R4 (every sink is idempotent by ``(session_id, seq)``: a fact delivered
twice has the effect of one), R16 (``JsonlSink(path)`` writes one JSON line
per event, skipping a ``(session_id, seq)`` already written; ``ConsoleSink()``
prints one line per event).

Why a line spells out every field, defaults included: events are stored
without their defaults (``omit_defaults``, events/_types.py), but a line is
read by tools that know no schema, so each says all of its event (``replayed:
false`` as well as ``true``), as lines always did.

Why the JSONL sink re-reads its file on open: idempotency must survive a
restart, and the file itself is the only record of what it already wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ._once import SeenOnce

_encoder = msgspec.json.Encoder(enc_hook=str)


class _Key(msgspec.Struct):
    session_id: str = ""
    seq: int | None = None


class JsonlSink:
    """Append one JSON line per event to ``path``; transient tokens included."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._once = SeenOnce()
        if self.path.exists():
            decoder = msgspec.json.Decoder(_Key)
            for line in self.path.read_bytes().splitlines():
                if line.strip():
                    key = decoder.decode(line)
                    if key.seq is not None:
                        self._once.mark(key.session_id, key.seq)

    def on_event(self, event: Any) -> None:
        if not self._once.first(event):
            return
        with self.path.open("ab") as fh:
            fh.write(_encoder.encode(_whole(event)) + b"\n")


def _whole(event: Any) -> Any:
    """The event with every field, defaults included, its ``type`` first."""
    if not isinstance(event, msgspec.Struct):
        return event
    body = msgspec.structs.asdict(event)
    tag = getattr(event, "type", None)
    return {"type": tag, **body} if "type" not in body and tag else body


class ConsoleSink:
    """Print one line per event: seq, type, and its facts."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._once = SeenOnce()

    def on_event(self, event: Any) -> None:
        if not self._once.first(event):
            return
        seq = getattr(event, "seq", None)
        out = self._stream or sys.stdout
        body = msgspec.json.decode(_encoder.encode(event))
        for k in ("type", "session_id", "seq", "timestamp", "prev_hash", "replayed"):
            body.pop(k, None)
        mark = " (replayed)" if getattr(event, "replayed", False) else ""
        out.write(f"{seq if seq is not None else '-':>5} {event.type}{mark} {body}\n")
