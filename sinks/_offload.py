"""An OtelSink in a process of its own: the watched run pays for encoding only.

Pattern: a watcher that encodes the events the OTel projection reads
         (msgpack, batched) and sends them down a pipe to a spawned child
         process, which runs ``OtelSink`` and the SDK's exporters there.
Role:    sinks layer; ``.watch(OtelProcess(url))`` where a run's throughput
         matters more than a second process (bench/sinks.py measures both).
Emits:   through the child's exporters; raises ``ExportError`` at
         ``flush``/``close``.

Laws: R16 (a sink never drives the run: ``on_event`` never raises; a failure,
the child's death included, is kept and raised where the caller asks, at
``flush`` or ``close``), R4 (the child's ``OtelSink`` is idempotent by
``(session_id, seq)``), R6 (the spans are those an in-process ``OtelSink``
makes from the same events).

Why a process and not a thread: the SDK's span and record handling is pure
Python, so a thread holds the same GIL the loop needs; on a second core the
projection costs the run only the encoding and one pipe write per batch. The
watcher is ``readonly`` (it only encodes), so the run hands it its own events
and makes no copies for it.

Why the child projects onto ``FinishedTelemetry`` (``sinks/_direct.py``): it
owns its exporters, so it needs no live spans; building the SDK's export
types once, at each span's end, costs about half the SDK providers' path, and
the child keeps up with a run on one core instead of becoming the bottleneck.

Why the child collects garbage seldom: it only projects events into the
SDK, whose objects form no cycles that outlive an export; collecting per the
default 700 allocations walks the spans the batch processors still hold, a
tenth or more of its time per turn.

Why a turn is encoded at its end but written at most every ``linger_s``: a
pipe write wakes the child, and on a small VM each wake-up costs the run far
more than the bytes (bench/sinks.py measured a child that only read, woken
once per turn, costing a memory-store run more than the projection saves).
So the run's thread keeps the events it is handed (frozen records) until a
turn's end (``agent.turn_end``, a pause, a fatal error) or ``batch`` events,
encodes them in one call and lets the events go; the encoded turns are
written as one message when ``WRITE_AT`` bytes are held, or by a lingering
thread ``linger_s`` after the first of them was held, so a finished turn
reaches the child within ``linger_s`` even when the run goes quiet, and a
busy run pays one write per a few dozen turns. The message is one msgpack
array whose items are the turns' arrays as encoded (``msgspec.Raw``), so
nothing is encoded twice and nothing is pickled on the way.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import msgspec
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.sdk.trace.export import SpanExporter

from helmlog.events import AnyEvent, FatalError, PauseRequested, TurnEnded

from ._direct import FinishedTelemetry
from ._export import ExportError, OtlpExport
from ._otel import _HANDLERS, DEFAULT_AGENT_NAME, OtelSink

Setup = Callable[[], tuple[SpanExporter, LogRecordExporter]]
# The pipe's messages, parent to child: a kind byte, then (for events) one
# msgpack array of turns, each an array of events. The child answers
# flush/close with the failure's reason, or ``None``.
_EVENTS, _FLUSH, _CLOSE = b"e", b"f", b"c"
# The child's cycle collector runs per 20,000 allocations, not per 700.
_CHILD_GC_THRESHOLDS = (20_000, 20, 20)
_ENDS_A_TURN = frozenset((TurnEnded, PauseRequested, FatalError))
DEFAULT_BATCH = 256
DEFAULT_LINGER_S = 0.02
# Encoded turns are written once this much is held: within what a local
# socket buffers, so the write seldom waits for the child to read.
WRITE_AT = 64 * 1024


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
        self._conn, child = context.Pipe()
        self.target = endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
        self._process = context.Process(
            target=_serve,
            args=(child, endpoint, timeout, values, agent_name, setup),
            name="helmlog-otel",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._encoder = msgspec.msgpack.Encoder()
        self._batch = batch
        self._linger_s = linger_s
        self._turn: list[Any] = []  # the run's thread's, until a turn's end
        self._lock = threading.Lock()  # the encoded turns below, and the pipe
        self._encoded: list[msgspec.Raw] = []
        self._held = 0  # bytes in ``_encoded``
        self._due = threading.Event()  # set while an encoded turn waits
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

    def _seal(self) -> None:
        """Encode the held events; write once enough is encoded."""
        turn, self._turn = self._turn, []
        if not turn:
            return
        encoded = msgspec.Raw(self._encoder.encode(turn))
        with self._lock:
            self._encoded.append(encoded)
            self._held += len(encoded)
            if self._held >= WRITE_AT:
                self._write()
            elif len(self._encoded) == 1:
                self._due.set()

    def _write(self) -> None:
        """One pipe message of every encoded turn (``_lock`` held)."""
        encoded, self._encoded, self._held = self._encoded, [], 0
        if not encoded or self._failure is not None:
            return
        message = bytearray(_EVENTS)
        self._encoder.encode_into(encoded, message, 1)
        try:
            self._conn.send_bytes(message)
        except OSError as exc:  # the child died: kept, raised by flush/close
            self._failure = f"the export process is gone ({exc})"

    def _linger(self) -> None:
        """Write what waited ``linger_s``, so a quiet run's last turn goes too."""
        while True:
            self._due.wait()
            if self._closed:
                return
            time.sleep(self._linger_s)
            with self._lock:
                if self._closed:  # ``close`` writes what is left itself
                    return
                self._due.clear()
                self._write()

    def _ask(self, verb: bytes) -> None:
        self._seal()
        with self._lock:
            self._write()
            if self._failure is None:
                try:
                    self._conn.send_bytes(verb)
                    reply = self._conn.recv()
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
            self._process.join(timeout=30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()

    def __enter__(self) -> OtelProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(
    conn: Connection,
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
    decoder = msgspec.msgpack.Decoder(list[list[AnyEvent]])
    project = sink.on_event
    while True:
        try:
            message = conn.recv_bytes()
        except EOFError:
            # The parent went away without closing: export what is held; a
            # failure has no one left to be reported to, so it ends the child.
            close()
            return
        verb = message[:1]
        if verb == _EVENTS:
            for turn in decoder.decode(memoryview(message)[1:]):
                for event in turn:
                    project(event)
            continue
        try:
            (close if verb == _CLOSE else flush)()
        except ExportError as exc:
            conn.send(exc.reason)
        else:
            conn.send(None)
        if verb == _CLOSE:
            return
