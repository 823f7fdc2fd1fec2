"""The export child of ``OtelProcess``: its pipes, and what it runs.

Pattern: a length-prefixed message stream on a pipe (one ``writev`` out, bulk
         non-blocking reads in), a control socket for ``flush``/``close``, and
         the child's loop that decodes each message and projects it through
         an ``OtelSink`` onto ``FinishedTelemetry``.
Role:    sinks layer; ``_offload.py`` starts ``python -P -c CHILD_ENTRY``
         (``main`` here) and writes with ``write_all``.

Laws: R4, R6, R28 (helmlog's own program, never the caller's ``__main__``).
Why not multiprocessing's spawn: it re-imports ``__main__``, running a script
without a main guard twice (issue 23). A busy child sleeps on the control
pipe alone, so the run's writes wake no one; it collects garbage seldom (the
SDK's objects form no lasting cycles).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import msgspec

try:
    import fcntl
except ImportError:  # not on Windows: the pipe keeps its default size
    fcntl = None  # type: ignore[assignment]
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.trace.export import SpanExporter

from helmlog.events import (
    AnyEvent,
    DecisionFiled,
    MiddlewareDecisionEvent,
    StoredEvent,
)

from ._direct import FinishedTelemetry
from ._export import ExportError, OtlpExport, overflowed
from ._otel import _HANDLERS, OtelSink

log = logging.getLogger("helmlog")
Setup = Callable[[], tuple[SpanExporter, LogRecordExporter]]
# A data message, parent to child: one sealed turn, a msgpack array of items,
# each ``[form, payload]``: ``AS_EVENTS`` an array of events, ``AS_RECORDS``
# an array of appends, each an array of ``StoredEvent``s. On the control pipe
# the parent asks flush or close, and the child answers with the failure's
# reason, or ``None``.
FLUSH, CLOSE = b"f", b"c"
AS_EVENTS, AS_RECORDS = 0, 1
# The child's cycle collector runs per 20,000 allocations, not per 700.
_CHILD_GC_THRESHOLDS = (20_000, 20, 20)
# The stored types the child projects: a row stands for its fact (R4); a
# live append never stores a fact, so a stored one is not taken.
_TAKEN_TYPES = frozenset(
    kind.type for kind in _HANDLERS if kind is not MiddlewareDecisionEvent
) | {DecisionFiled.type}
# Parts handed to one writev: within the system's IOV_MAX (1,024 on Linux).
_IOV_MOST = min(512, os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16)
# A busy child sleeps this long between drains of the data pipe, which
# holds what a run writes meanwhile (a turn is a few KiB), and stays busy
# this long after a drain last found something.
CHILD_TICK_S = 0.002
CHILD_IDLE_S = 0.1
PIPE_BYTES = 1024 * 1024
# What the child runs: ``python -P -c CHILD_ENTRY <data fd> <control fd>``.
CHILD_ENTRY = "from helmlog.sinks._export_child import main; main()"


class ChildSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The first message on the control socket, parent to child: how to
    export (``setup``: a pickled exporters function, and the parent's
    ``sys.path`` to import its module by name from)."""

    endpoint: str | None
    timeout: float | None
    values: bool
    agent_name: str
    setup: bytes | None = None
    path: list[str] = []


def main() -> None:
    """The child's entry: take the inherited pipe and socket (their numbers
    are its arguments), read its settings, and ``serve`` until closed."""
    # A terminal's Ctrl-C reaches the whole group: the run decides when the
    # export ends (``close``, or its end of the pipes closing), not the signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data_fd, control_fd = (int(arg) for arg in sys.argv[1:3])
    data = Connection(data_fd, writable=False)
    control = Connection(control_fd)
    try:
        settings = msgspec.msgpack.decode(control.recv_bytes(), type=ChildSettings)
    except EOFError:
        return  # the run went away before it said how to export
    setup: Setup | None = None
    if settings.setup is not None:
        sys.path.extend(entry for entry in settings.path if entry not in sys.path)
        setup = pickle.loads(settings.setup)  # the run's own, pickled by name
    serve(
        data,
        control,
        settings.endpoint,
        settings.timeout,
        settings.values,
        settings.agent_name,
        setup,
    )


def write_all(fd: int, parts: list[bytes]) -> None:
    """Write all of ``parts`` (each message a 4-byte length, then its bytes)
    to the blocking pipe ``fd``: one ``writev`` unless the pipe takes less."""
    if len(parts) > _IOV_MOST:  # past what one writev takes: joined first
        parts = [b"".join(parts)]
    while parts:
        written = os.writev(fd, parts)
        done = 0  # the parts the pipe took whole
        while done < len(parts) and written >= len(parts[done]):
            written -= len(parts[done])
            done += 1
        parts = parts[done:]  # a copy: the caller's list is left as it was
        if written:
            parts[0] = parts[0][written:]


class Frames:
    """The child's end of the data pipe: what is there, read in bulk, split
    into messages.

    Why not ``Connection.recv_bytes``: it polls (a selector built per call)
    and reads twice per message, which cost the child more per turn than
    decoding the turn; one non-blocking ``read`` takes all that is waiting.
    """

    def __init__(self, conn: Connection) -> None:
        self._fd = conn.fileno()
        os.set_blocking(self._fd, False)
        self._pending = bytearray()

    def drain(self) -> list[bytes]:
        """The whole messages waiting; ``EOFError`` once the parent is gone."""
        pending = self._pending
        while True:
            try:
                chunk = os.read(self._fd, PIPE_BYTES)
            except BlockingIOError:
                break
            if not chunk:
                raise EOFError("the watched run's end of the data pipe closed")
            pending += chunk
        messages = []
        at, size = 0, len(pending)
        while size - at >= 4:
            length = int.from_bytes(pending[at : at + 4], "big")
            if size - at - 4 < length:
                break  # the rest of it is still being written
            messages.append(bytes(pending[at + 4 : at + 4 + length]))
            at += 4 + length
        if at:
            del pending[:at]
        return messages


def widen(conn: Connection) -> None:
    """Let the data pipe hold ``PIPE_BYTES`` (Linux; elsewhere as it comes)."""
    size = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if size is None:
        return
    try:
        fcntl.fcntl(conn.fileno(), size, PIPE_BYTES)
    except OSError:  # above /proc/sys/fs/pipe-max-size: the default stays
        log.info("helmlog OtelProcess: the data pipe keeps its default size")


def serve(
    data: Connection,
    control: Connection,
    endpoint: str | None,
    timeout: float | None,
    values: bool,
    agent_name: str,
    setup: Setup | None,
) -> None:
    """The child: project what arrives; answer ``flush``/``close`` with the
    failure's reason, or ``None``."""
    flush: Callable[[], None]
    close: Callable[[], None]
    if setup is None:
        export = OtlpExport(
            endpoint,
            timeout=timeout,
            values=values,
            agent_name=agent_name,
            direct=True,
            live=True,
        )
        sink, flush, close = export.sink, export.flush, export.close
    else:
        spans, records = setup()
        telemetry = FinishedTelemetry(spans, records)
        sink = OtelSink(telemetry, telemetry, values=values, agent_name=agent_name)

        def flush() -> None:
            telemetry.flush()
            dropped = telemetry.queue.take_dropped()
            if dropped:
                raise ExportError(
                    target="the setup's exporters",
                    reason=overflowed(dropped),
                )

        def close() -> None:
            sink.release()
            telemetry.shutdown()

    # The child is ours alone: what it has loaded stays, and the SDK's spans
    # and records (each a handful of tracked objects, alive in the batch
    # queues until exported) would otherwise trigger a collection every few
    # turns that walks them all.
    gc.freeze()
    gc.set_threshold(*_CHILD_GC_THRESHOLDS)
    project = projector(sink)
    frames = Frames(data)
    last_data = -CHILD_IDLE_S  # when a drain last found something
    while True:
        # Busy: drain, then sleep on the control pipe alone, so the run's
        # writes meanwhile wake no one. Idle: wait on both.
        try:
            for message in frames.drain():
                project(message)
                last_data = time.monotonic()
            if time.monotonic() - last_data < CHILD_IDLE_S:
                asked = control.poll(CHILD_TICK_S)
            else:
                asked = control in multiprocessing.connection.wait([data, control])
            if not asked:
                continue
            verb = control.recv_bytes()
        except EOFError:
            # The parent went away without closing: export what is held; a
            # failure has no one left to be reported to, so it ends the child.
            close()
            return
        try:
            for message in frames.drain():  # everything written before the ask
                project(message)
        except EOFError:
            pass  # the run closed its end after its ask: all it wrote is read
        try:
            (close if verb == CLOSE else flush)()
        except ExportError as exc:
            control.send(exc.reason)
        else:
            control.send(None)
        if verb == CLOSE:
            return


def projector(sink: OtelSink) -> Callable[[bytes], None]:
    """What the child does with one data message: decode, project in order
    (served events as a watcher's, ``on_event``; records an append at a
    time, ``on_recorded``)."""
    project, recorded = sink.on_event, sink.on_recorded
    batches = msgspec.msgpack.Decoder(list[tuple[int, msgspec.Raw]])
    as_events = msgspec.msgpack.Decoder(list[AnyEvent])
    as_records = msgspec.msgpack.Decoder(list[list[StoredEvent]])
    taken_types = _TAKEN_TYPES
    # The parent's journal decoded these bytes (depth-checked) and kept only
    # types this version knows, so the union decodes them as they are.
    stored_events = msgspec.json.Decoder(list[AnyEvent])
    stamp = msgspec.structs.force_setattr

    def handle(message: bytes) -> None:
        for form, payload in batches.decode(message):
            if form == AS_EVENTS:
                for event in as_events.decode(payload):
                    project(event)
                continue
            for records in as_records.decode(payload):
                taken = [r.data for r in records if r.type in taken_types]
                if not taken:
                    continue
                # One JSON array of the stored objects, decoded in one call.
                events = stored_events.decode(b"[" + b",".join(taken) + b"]")
                session_id = records[0].session_id
                for event in events:
                    if not event.session_id:  # stored without it after seq 1
                        stamp(event, "session_id", session_id)
                recorded(session_id, events)

    return handle
