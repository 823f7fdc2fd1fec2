"""JSON-lines and console sinks: the simplest watchers.

Pattern: idempotent sinks keyed by ``(session_id, seq)``.
Role:    sinks layer; attach live (``.watch(JsonlSink(path))``) or replay
         into; an unwritable file or console is an ``ExportError``.

Laws: R4 (idempotent; an event is marked seen only after its write), R16.
Why a line spells out every field, defaults included: lines are read by
tools that know no schema. Why the file is re-read on open: it is the only
record of what was written; a last line cut short is cut off and rewritten.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ._export import ExportError
from ._once import SeenOnce

_encoder = msgspec.json.Encoder(enc_hook=str)


class _Key(msgspec.Struct):
    session_id: str = ""
    seq: int | None = None


def _failed(target: str, exc: BaseException) -> ExportError:
    return ExportError(target=target, reason=f"{type(exc).__name__}: {exc}")


class JsonlSink:
    """Append one JSON line per event to ``path``; transient tokens included.

    Raises:
        ExportError: when built, for a path that cannot be opened for
            appending or read; from ``on_event``, for a write that failed
            (that event is not counted as written).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._once = SeenOnce()
        try:
            with self.path.open("ab"):  # fail now, not at the first event
                pass
            held = self.path.read_bytes()
            if held and not held.endswith(b"\n"):
                # A writer stopped mid-line (killed): that event never counted
                # as written, so its redelivery writes it whole; the torn
                # line goes, or the next line would be appended to it.
                held = held[: held.rfind(b"\n") + 1]
                os.truncate(self.path, len(held))
        except OSError as exc:
            raise _failed(str(self.path), exc) from exc
        decoder = msgspec.json.Decoder(_Key)
        for number, line in enumerate(held.splitlines(), 1):
            if not line.strip():
                continue
            try:
                key = decoder.decode(line)
            except msgspec.DecodeError as exc:
                reason = f"line {number} is not a JSON event ({exc})"
                raise ExportError(target=str(self.path), reason=reason) from exc
            if key.seq is not None:
                self._once.mark(key.session_id, key.seq)

    def on_event(self, event: Any) -> None:
        """Write ``event`` as one line unless its ``(session_id, seq)`` is in
        the file already (R4)."""
        if self._once.seen(event):
            return
        line = _encoder.encode(_whole(event)) + b"\n"
        try:
            with self.path.open("ab") as fh:
                fh.write(line)
        except OSError as exc:
            raise _failed(str(self.path), exc) from exc
        self._once.done(event)


def _whole(event: Any) -> Any:
    """The event with every field, defaults included, its ``type`` first."""
    if not isinstance(event, msgspec.Struct):
        return event
    body = msgspec.structs.asdict(event)
    tag = getattr(event, "type", None)
    return {"type": tag, **body} if "type" not in body and tag else body


class ConsoleSink:
    """Print one line per event: seq, type, and its fields but the envelope's.

    Args:
        stream: where lines go; ``None`` is ``sys.stdout`` as it is at each
            event.

    Raises:
        ExportError: from ``on_event``, when the stream cannot be written
            (closed, a broken pipe); that event is not counted as printed.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._once = SeenOnce()

    def on_event(self, event: Any) -> None:
        """Print ``event`` unless its ``(session_id, seq)`` was printed (R4)."""
        if self._once.seen(event):
            return
        seq = getattr(event, "seq", None)
        out = self._stream or sys.stdout
        body = msgspec.json.decode(_encoder.encode(event))
        for k in ("type", "session_id", "seq", "timestamp", "prev_hash", "replayed"):
            body.pop(k, None)
        mark = " (replayed)" if getattr(event, "replayed", False) else ""
        line = f"{seq if seq is not None else '-':>5} {event.type}{mark} {body}\n"
        try:
            out.write(line)
        except (OSError, ValueError) as exc:  # ValueError: a closed stream
            raise _failed(str(getattr(out, "name", "the console")), exc) from exc
        self._once.done(event)
