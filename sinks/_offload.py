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

Why events are sent only at a batch or a turn's end, as one msgpack array:
one pipe write (or one encoder call and a pickle) per event costs more than
the projection saves; the run's thread keeps the events it is handed (frozen
records) and, at every ``agent.turn_end``, pause and fatal error, encodes the
batch in one call and writes it as raw bytes, so a finished turn is never
held and nothing is pickled on the way.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
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
# msgpack array of events. The child answers flush/close with the failure's
# reason, or ``None``.
_EVENTS, _FLUSH, _CLOSE = b"e", b"f", b"c"
# The child's cycle collector runs per 20,000 allocations, not per 700.
_CHILD_GC_THRESHOLDS = (20_000, 20, 20)
_ENDS_A_TURN = (TurnEnded, PauseRequested, FatalError)
DEFAULT_BATCH = 256


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
        batch: events held before a pipe write (a turn's end always writes).
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
        self._pending: list[Any] = []
        self._lock = threading.Lock()
        self._failure: str | None = None
        self._closed = False
        # It only encodes what it is handed: the run's own events, no copies.
        self.readonly = True

    def on_event(self, event: Any) -> None:
        """Queue one event for the child; never raises into the run (R16)."""
        kind = type(event)
        if kind not in _HANDLERS or self._failure is not None:
            return
        pending = self._pending
        pending.append(event)
        if kind in _ENDS_A_TURN or len(pending) >= self._batch:
            self._send()

    def _send(self) -> None:
        pending, self._pending = self._pending, []
        if not pending or self._failure is not None:
            return
        try:
            data = _EVENTS + self._encoder.encode(pending)
            with self._lock:
                self._conn.send_bytes(data)
        except OSError as exc:  # the child died: kept, raised by flush/close
            self._failure = f"the export process is gone ({exc})"

    def _ask(self, verb: bytes) -> None:
        self._send()
        if self._failure is None:
            try:
                with self._lock:
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
    decoder = msgspec.msgpack.Decoder(list[AnyEvent])
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
            for event in decoder.decode(memoryview(message)[1:]):
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
