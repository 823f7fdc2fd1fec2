"""An OtelSink in a process of its own: the watched run hands over bytes only.

Pattern: a record taker (``on_records``) that forwards the stored bytes of
         the events the OTel projection reads, batched, down a pipe to a
         spawned child process, which decodes them and runs ``OtelSink`` and
         the SDK's exporters there.
Role:    sinks layer; ``.watch(OtelProcess(url))`` where a run's throughput
         matters more than a second process (bench/sinks.py measures both).
Emits:   through the child's exporters; raises ``ExportError`` at
         ``flush``/``close``.

Laws: R16 (a sink never drives the run: ``on_records``/``on_event`` never
raise; a failure, the child's death included, is kept and raised where the
caller asks, at ``flush`` or ``close``), R4 (the child turns each row into
its fact, ``fact_of``, and its ``OtelSink`` is idempotent by ``(session_id,
seq)``), R6 (the spans are those an in-process ``OtelSink`` makes of the same
run: the child decodes the bytes the fold decoded), G86 (a redacting agent
hands it its served events instead, which it encodes, since the stored bytes
may keep values the served form hides).

Why a process and not a thread: the SDK's span and record handling is pure
Python, so a thread holds the same GIL the loop needs; on a second core the
projection costs the run only the hand-over.

Why stored bytes: the journal encoded every event to hash it, so the run
hands over an append's records in one call (``runtime/_watchers.py``), and
this watcher keeps the bytes of the types the projection reads; nothing is
encoded again, no fact is built and no watcher is called per event in the
run (a watcher called per event that did nothing cost a memory-store run
about 5 %; a record taker that does nothing costs it nothing measurable).

Why the child projects onto ``FinishedTelemetry`` (``sinks/_direct.py``): it
owns its exporters, so it needs no live spans; building the SDK's export
types once, at each span's end, costs about half the SDK providers' path, and
the child keeps up with a run on one core instead of becoming the bottleneck.

Why the child collects garbage seldom: it only projects events into the
SDK, whose objects form no cycles that outlive an export; collecting per the
default 700 allocations walks the spans the batch processors still hold, a
tenth or more of its time per turn.

Why nothing wakes anyone while a run is busy: on a small VM a wake-up of a
process or thread that sleeps on the other core costs the waker far more
than the bytes (a child woken per turn, only to read, cost a memory-store
run more than the projection saves). So:

- the run's thread seals a turn at its end (``agent.turn_end``, a pause, a
  fatal error, or ``batch`` records) into one msgpack item, the bytes as they
  are, and writes the held items as one message once ``WRITE_AT`` bytes are
  held;
- a lingering thread writes what is held every ``linger_s`` while turns are
  sealed, so a finished turn reaches the child within ``linger_s`` even when
  the run goes quiet, and parks (woken by the next seal) after a tick with
  none;
- data and control go on two pipes: a busy child drains the data pipe
  (``PIPE_BYTES``, so a run seldom waits on a full one), then sleeps
  ``CHILD_TICK_S`` on the control pipe alone, so the run's writes meanwhile
  wake no one while ``flush`` and ``close`` still wake it at once; an idle
  child waits on both.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.connection
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

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
    FatalError,
    MiddlewareDecisionEvent,
    PauseRequested,
    StoredEvent,
    TurnEnded,
    fact_of,
)

from ._direct import FinishedTelemetry
from ._export import ExportError, OtlpExport
from ._otel import _HANDLERS, DEFAULT_AGENT_NAME, OtelSink

log = logging.getLogger("helmlog")
Setup = Callable[[], tuple[SpanExporter, LogRecordExporter]]
# A data message, parent to child: one msgpack array of sealed items, each
# ``[form, payload]``: ``_AS_EVENTS`` an array of events, ``_AS_RECORDS`` an
# array of appends, each ``[session_id, b"[stored, ...]"]`` (the stored
# JSON objects joined into one JSON array). On the
# control pipe the parent asks flush or close, and the child answers with
# the failure's reason, or ``None``.
_FLUSH, _CLOSE = b"f", b"c"
_AS_EVENTS, _AS_RECORDS = 0, 1
# The child's cycle collector runs per 20,000 allocations, not per 700.
_CHILD_GC_THRESHOLDS = (20_000, 20, 20)
_ENDS_A_TURN = frozenset((TurnEnded, PauseRequested, FatalError))
_ENDS_A_TURN_TYPES = frozenset((TurnEnded.type, PauseRequested.type, FatalError.type))
# The stored types the child projects: a row stands for its fact (R4); a
# live append never stores a fact, so a stored one is not taken.
_TAKEN_TYPES = frozenset(
    kind.type for kind in _HANDLERS if kind is not MiddlewareDecisionEvent
) | {DecisionFiled.type}
DEFAULT_BATCH = 256
DEFAULT_LINGER_S = 0.02
# Encoded turns are written once this much is held: within what a local
# socket buffers, so the write seldom waits for the child to read.
WRITE_AT = 64 * 1024
# A busy child sleeps this long between drains of the data pipe, which
# holds what a run writes meanwhile (a turn is a few KiB).
CHILD_TICK_S = 0.01
PIPE_BYTES = 1024 * 1024


class OtelProcess:
    """An ``OtelSink`` exporting from a child process.

    Args:
        endpoint: as ``OtlpExport`` (``None``: the ``OTEL_EXPORTER_OTLP_*``
            variables).
        timeout: as ``OtlpExport``.
        values: passed to the child's sink (R16: off by default).
        agent_name: ``gen_ai.agent.name`` of the turn spans.
        setup: instead of OTLP, a module-level function the child calls for
            its ``(span_exporter, log_record_exporter)`` (it must pickle).
        batch: events held before they are encoded (a turn's end always
            encodes them).
        linger_s: the longest an encoded turn waits for its pipe write.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float | None = None,
        values: bool = False,
        agent_name: str = DEFAULT_AGENT_NAME,
        setup: Setup | None = None,
        batch: int = DEFAULT_BATCH,
        linger_s: float = DEFAULT_LINGER_S,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        # Data one way (parent to child), control both ways: see the header.
        child_data, self._conn = context.Pipe(duplex=False)
        _widen(self._conn)
        self._control, child_control = context.Pipe()
        self.target = endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
        self._process = context.Process(
            target=_serve,
            args=(
                child_data,
                child_control,
                endpoint,
                timeout,
                values,
                agent_name,
                setup,
            ),
            name="helmlog-otel",
            daemon=True,
        )
        self._process.start()
        child_data.close()
        child_control.close()
        self._encoder = msgspec.msgpack.Encoder()
        self._batch = batch
        self._linger_s = linger_s
        self._turn: list[Any] = []  # the run's thread's, until a turn's end
        self._appends: list[tuple[str, bytes]] = []  # likewise, as stored
        self._taken = 0  # records in ``_appends``
        self._lock = threading.Lock()  # the encoded turns below, and the pipe
        self._encoded: list[msgspec.Raw] = []
        self._held = 0  # bytes in ``_encoded``
        self._due = threading.Event()  # wakes a parked lingering thread
        self._parked = True  # the lingering thread waits on ``_due``
        self._sealed = 0  # seals since the lingering thread's last tick
        self._failure: str | None = None
        self._closed = False
        # It only encodes what it is handed: the run's own events, no copies.
        self.readonly = True
        self._lingering = threading.Thread(
            target=self._linger, name="helmlog-otel-linger", daemon=True
        )
        self._lingering.start()

    def on_event(self, event: Any) -> None:
        """Hold one event for the child; never raises into the run (R16)."""
        kind = type(event)
        if kind not in _HANDLERS or self._failure is not None:
            return
        turn = self._turn
        turn.append(event)
        if kind in _ENDS_A_TURN or len(turn) >= self._batch:
            self._seal()

    def on_records(self, records: list[StoredEvent]) -> None:
        """Hold one append's records as stored; never raises into the run (R16).

        The run hands these instead of events whenever it serves no redacted
        form: the stored bytes go to the child as they are, so the run
        neither encodes them again nor calls this watcher per event.
        """
        if self._failure is not None:
            return
        taken: list[bytes] = []
        ends = False
        for record in records:
            kind = record.type
            if kind in _TAKEN_TYPES:
                taken.append(record.data)
                if kind in _ENDS_A_TURN_TYPES:
                    ends = True
        if not taken:
            return
        # One JSON array of the stored objects: the child decodes it in one call.
        self._appends.append((records[0].session_id, b"[" + b",".join(taken) + b"]"))
        self._taken += len(taken)
        if ends or self._taken >= self._batch:
            self._seal()

    def _seal(self) -> None:
        """Encode the held events and records; write once enough is encoded."""
        batches: list[msgspec.Raw] = []
        if self._turn:
            turn, self._turn = self._turn, []
            batches.append(msgspec.Raw(self._encoder.encode((_AS_EVENTS, turn))))
        if self._appends:
            appends, self._appends, self._taken = self._appends, [], 0
            batches.append(msgspec.Raw(self._encoder.encode((_AS_RECORDS, appends))))
        if not batches:
            return
        with self._lock:
            for encoded in batches:
                self._encoded.append(encoded)
                self._held += len(encoded)
            self._sealed += 1
            if self._held >= WRITE_AT:
                self._write()
            elif self._parked:
                self._parked = False
                self._due.set()

    def _write(self) -> None:
        """One pipe message of every encoded turn (``_lock`` held)."""
        encoded, self._encoded, self._held = self._encoded, [], 0
        if not encoded or self._failure is not None:
            return
        message = self._encoder.encode(encoded)
        try:
            self._conn.send_bytes(message)
        except OSError as exc:  # the child died: kept, raised by flush/close
            self._failure = f"the export process is gone ({exc})"

    def _linger(self) -> None:
        """Every ``linger_s`` while the run seals, write what is held, so a
        quiet run's last turn goes too; park once a tick saw no seal."""
        while True:
            if self._parked:
                self._due.wait()
                self._due.clear()
            if self._closed:
                return
            time.sleep(self._linger_s)
            with self._lock:
                if self._closed:  # ``close`` writes what is left itself
                    return
                self._write()
                if self._sealed == 0:
                    self._parked = True
                self._sealed = 0

    def _ask(self, verb: bytes) -> None:
        self._seal()
        with self._lock:
            self._write()
            if self._failure is None:
                try:
                    self._control.send_bytes(verb)
                    reply = self._control.recv()
                except (OSError, EOFError) as exc:
                    reply = f"the export process is gone ({type(exc).__name__})"
                if reply is not None:
                    self._failure = str(reply)
        if self._failure is not None:
            raise ExportError(target=self.target, reason=self._failure)

    def flush(self) -> None:
        """Wait until the child exported all sent; ``ExportError`` if it failed."""
        self._ask(_FLUSH)

    def close(self) -> None:
        """Export what is left and stop the child; ``ExportError`` if it failed."""
        if self._closed:
            if self._failure is not None:
                raise ExportError(target=self.target, reason=self._failure)
            return
        self._closed = True
        try:
            self._ask(_CLOSE)
        finally:
            self._due.set()  # the lingering thread sees ``_closed`` and ends
            self._lingering.join()
            self._conn.close()
            self._control.close()
            self._process.join(timeout=30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()

    def __enter__(self) -> OtelProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _widen(conn: Connection) -> None:
    """Let the data pipe hold ``PIPE_BYTES`` (Linux; elsewhere as it comes)."""
    size = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if size is None:
        return
    try:
        fcntl.fcntl(conn.fileno(), size, PIPE_BYTES)
    except OSError:  # above /proc/sys/fs/pipe-max-size: the default stays
        log.info("helmlog OtelProcess: the data pipe keeps its default size")


def _serve(
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
            endpoint, timeout=timeout, values=values, agent_name=agent_name, direct=True
        )
        sink, flush, close = export.sink, export.flush, export.close
    else:
        spans, records = setup()
        telemetry = FinishedTelemetry(spans, records)
        sink = OtelSink(telemetry, telemetry, values=values, agent_name=agent_name)

        def flush() -> None:
            telemetry.flush()

        def close() -> None:
            telemetry.shutdown()

    # The child is ours alone: what it has loaded stays, and the SDK's spans
    # and records (each a handful of tracked objects, alive in the batch
    # queues until exported) would otherwise trigger a collection every few
    # turns that walks them all.
    gc.freeze()
    gc.set_threshold(*_CHILD_GC_THRESHOLDS)
    project = _projector(sink.on_event)
    busy = False
    while True:
        # Busy: drain, then sleep on the control pipe alone, so the run's
        # writes meanwhile wake no one. Idle: wait on both.
        try:
            while data.poll(0):
                project(data.recv_bytes())
                busy = True
            if busy:
                busy = False
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
        while data.poll(0):  # everything written before the ask
            project(data.recv_bytes())
        try:
            (close if verb == _CLOSE else flush)()
        except ExportError as exc:
            control.send(exc.reason)
        else:
            control.send(None)
        if verb == _CLOSE:
            return


def _projector(project: Callable[[Any], None]) -> Callable[[bytes], None]:
    """What the child does with one data message: decode, project in order."""
    batches = msgspec.msgpack.Decoder(list[tuple[int, msgspec.Raw]])
    as_events = msgspec.msgpack.Decoder(list[AnyEvent])
    as_records = msgspec.msgpack.Decoder(list[tuple[str, bytes]])
    # The parent's journal decoded these bytes (depth-checked) and kept only
    # types this version knows, so the union decodes them as they are.
    stored_events = msgspec.json.Decoder(list[AnyEvent])
    stamp = msgspec.structs.force_setattr

    def handle(message: bytes) -> None:
        for form, payload in batches.decode(message):
            if form == _AS_EVENTS:
                for event in as_events.decode(payload):
                    project(event)
                continue
            for session_id, stored in as_records.decode(payload):
                for event in stored_events.decode(stored):
                    if not event.session_id:  # stored without it after seq 1
                        stamp(event, "session_id", session_id)
                    if isinstance(event, DecisionFiled):
                        project(fact_of(event))
                    else:
                        project(event)

    return handle
