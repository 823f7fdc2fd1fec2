"""An OtelSink in a process of its own: the watched run hands over bytes only.

Pattern: a ``RecordTaker`` (G95's explicit opt-in to stored records) that
         seals each turn's stored records into one msgpack message and writes
         them, batched, down a pipe to a child running helmlog's own entry
         (``_export_child.py``), which projects them through ``OtelSink``.
Role:    sinks layer; ``.watch(OtelProcess(url))``; raises ``ExportError``
         at ``flush``/``close``, never in the run.

Laws: R4, R6, R16 (a sink never drives the run), R28 (``python -P -c``, never
multiprocessing's spawn), G86 (a redacting agent's served events instead).
Why a process: the SDK is pure Python and would hold the loop's GIL. Why
nothing wakes anyone while a run is busy: a cross-core wake-up costs more
than the bytes, so writes go once ``WRITE_AT`` bytes or ``linger_s`` are
held (a loop timer; a sweeper thread for loops that stop first).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import io
import logging
import operator
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from helmlog.events import FatalError, PauseRequested, StoredEvent, TurnEnded
from helmlog.events.lowlevel import RecordTaker

from ._export import ExportError
from ._export_child import (
    AS_EVENTS,
    AS_RECORDS,
    CHILD_ENTRY,
    CLOSE,
    FLUSH,
    ChildSettings,
    Setup,
    widen,
    write_all,
)
from ._otel import _HANDLERS, DEFAULT_AGENT_NAME

log = logging.getLogger("helmlog")

_ENDS_A_TURN = frozenset((TurnEnded, PauseRequested, FatalError))
_ENDS_A_TURN_TYPES = frozenset((TurnEnded.type, PauseRequested.type, FatalError.type))
_TYPE_OF = operator.attrgetter("type")
DEFAULT_BATCH = 256
DEFAULT_LINGER_S = 0.02
# Held messages are written once this much is held: well within the pipe,
# so the write seldom waits for the child to read.
WRITE_AT = 64 * 1024
# What a loop timer could not write (its loop stopped) goes this long after.
SWEEP_S = 1.0


class OtelProcess(RecordTaker):
    """An ``OtelSink`` exporting from a child process.

    Args:
        endpoint: as ``OtlpExport`` (``None``: the ``OTEL_EXPORTER_OTLP_*``
            variables).
        timeout: as ``OtlpExport``.
        values: passed to the child's sink (R16: off by default).
        agent_name: ``gen_ai.agent.name`` of the turn spans.
        setup: instead of OTLP, a module-level function the child calls for
            its ``(span_exporter, log_record_exporter)`` (it must pickle, by
            reference to an importable module: never one of ``__main__``,
            which the child does not import, R28; ``TypeError`` if so).
        batch: events held before they are sealed (a turn's end always
            seals them).
        linger_s: the longest a sealed turn is held before its write.
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
        self.target = endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"
        settings = ChildSettings(
            endpoint=endpoint,
            timeout=timeout,
            values=values,
            agent_name=agent_name,
            setup=None if setup is None else _pickled_setup(setup),
            path=[] if setup is None else list(sys.path),
        )
        if not sys.executable:
            raise ExportError(
                target=self.target,
                reason="no Python to start the export process (sys.executable)",
            )
        # Data one way (parent to child), control both ways: see the header.
        # Both are made non-inheritable; only the child is handed its ends.
        child_data, data = os.pipe()
        ours, theirs = socket.socketpair()
        fds = (child_data, theirs.fileno())
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-c", CHILD_ENTRY, *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(data)
            ours.close()
            raise
        finally:
            os.close(child_data)
            theirs.close()
        self._conn = Connection(data, readable=False)
        widen(self._conn)
        self._data_fd = data  # length-prefixed writes: write_all
        self._control = Connection(ours.detach())
        # Said before anything else: the socket holds it until the child reads.
        self._control.send_bytes(msgspec.msgpack.encode(settings))
        self._encoder = msgspec.msgpack.Encoder()
        self._batch = batch
        self._turn: list[Any] = []  # the run's thread's, until a turn's end
        self._appends: list[list[StoredEvent]] = []  # likewise, as handed
        self._taken = 0  # records in ``_appends``
        self._linger_s = linger_s
        # The held messages and the pipes: a write is never interleaved with
        # a flush's, and a timer's never with a seal's on another thread.
        self._lock = threading.Lock()
        self._held: list[bytes] = []  # sealed messages, each with its header
        self._held_bytes = 0
        # The loop whose timer will write what is held (a timer on a loop
        # that has since stopped never fires: the next seal arms its own,
        # and the sweeper writes what it left).
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._held_at = 0.0  # when the oldest held message was sealed
        self._stopping = threading.Event()
        self._sweeper = threading.Thread(
            target=self._sweep, name="helmlog-otel-sweep", daemon=True
        )
        self._sweeper.start()
        self._failure: str | None = None
        self._closed = False
        # What is held when the interpreter exits is exported before the
        # child is stopped (a child whose run ends unclosed, by ``os._exit``
        # or a kill, reads the end of its pipes and ends by itself).
        self._at_exit = functools.partial(
            _close_at_exit, weakref.ref(self), os.getpid()
        )
        atexit.register(self._at_exit)
        # It only encodes what it is handed: the run's own events, no copies.
        self.readonly = True

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
        form: the list is kept as handed (the journal hands each append a
        list of its own, of frozen records), and the child picks and decodes
        the stored bytes, so the run neither encodes them again nor runs any
        code per record.
        """
        if self._failure is not None:
            return
        self._appends.append(records)
        self._taken += len(records)
        if (
            not _ENDS_A_TURN_TYPES.isdisjoint(map(_TYPE_OF, records))
            or self._taken >= self._batch
        ):
            self._seal()

    def _seal(self) -> None:
        """Hold the turn's events and records as one message; write what is
        held once enough is, or arrange for it to be written soon."""
        items: list[tuple[int, Any]] = []
        if self._turn:
            turn, self._turn = self._turn, []
            items.append((AS_EVENTS, turn))
        if self._appends:
            appends, self._appends, self._taken = self._appends, [], 0
            items.append((AS_RECORDS, appends))
        if not items:
            return
        message = self._encoder.encode(items)
        with self._lock:
            held = self._held
            if not held:
                self._held_at = time.monotonic()
            held.append(len(message).to_bytes(4, "big"))
            held.append(message)
            self._held_bytes += len(message)
            if self._held_bytes >= WRITE_AT:
                self._write_held()
                return
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # sealed outside a loop: no timer to wait for
                self._write_held()
                return
            if self._timer_loop is loop:
                return
            self._timer_loop = loop
        loop.call_later(self._linger_s, self._write_soon)

    def _write_soon(self) -> None:
        """The loop timer's: write what is held."""
        with self._lock:
            self._timer_loop = None
            self._write_held()

    def _sweep(self) -> None:
        """Once per ``SWEEP_S``, write what a loop timer left held: its loop
        stopped first (``asyncio.run`` per turn), or is blocked."""
        while not self._stopping.wait(SWEEP_S):
            with self._lock:
                if self._held and time.monotonic() - self._held_at >= SWEEP_S:
                    self._write_held()

    def _write_held(self) -> None:
        """Write every held message to the child (``_lock`` held)."""
        held, self._held, self._held_bytes = self._held, [], 0
        if not held or self._failure is not None:
            return
        try:
            write_all(self._data_fd, held)
        except OSError as exc:  # the child died: kept, raised by flush/close
            self._failure = f"the export process is gone ({exc})"
            # Said once, now: a run that never flushes still tells its operator.
            log.error(
                "helmlog OtelProcess for %s: %s; the telemetry from here on is"
                " lost (raised at flush and close)",
                self.target,
                self._failure,
            )

    def _ask(self, verb: bytes) -> None:
        """Ask the child to flush or close; raise what it reports (an export
        that failed since the last ask: it goes on) or its loss (for good)."""
        self._seal()
        reply = None
        with self._lock:
            self._write_held()
            if self._failure is None:
                try:
                    self._control.send_bytes(verb)
                    reply = self._control.recv()
                except (OSError, EOFError) as exc:
                    self._failure = f"the export process is gone ({type(exc).__name__})"
        if self._failure is not None:
            raise ExportError(target=self.target, reason=self._failure)
        if reply is not None:
            raise ExportError(target=self.target, reason=str(reply))

    def flush(self) -> None:
        """Wait until the child exported all sent; ``ExportError`` if it failed."""
        self._ask(FLUSH)

    def close(self) -> None:
        """Export what is left and stop the child; ``ExportError`` if it failed."""
        if self._closed:
            if self._failure is not None:
                raise ExportError(target=self.target, reason=self._failure)
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        try:
            self._ask(CLOSE)
        finally:
            self._stopping.set()
            self._sweeper.join()
            self._conn.close()
            self._control.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> OtelProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ByReference(pickle.Pickler):
    """Pickles as ``pickle`` does, but refuses what names ``__main__``."""

    def reducer_override(self, obj: Any) -> Any:
        if getattr(obj, "__module__", None) == "__main__":
            raise TypeError(
                f"OtelProcess setup: {obj!r} is defined in __main__, which"
                " the export process never imports (R28); define it in a"
                " module of its own"
            )
        return NotImplemented


def _pickled_setup(setup: Setup) -> bytes:
    """``setup`` pickled by reference, for the child to import by name."""
    buffer = io.BytesIO()
    _ByReference(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(setup)
    return buffer.getvalue()


def _close_at_exit(ref: weakref.ref[OtelProcess], owner: int) -> None:
    """At exit, close an ``OtelProcess`` its owner left open: the turns it
    holds are exported; a failure is logged, for no one is left to raise to.

    Only in the process that made it: a forked copy that exits holds the
    same pipes, and closing through them would stop the owner's child.
    """
    process = ref()
    if process is None or os.getpid() != owner:
        return
    try:
        process.close()
    except ExportError as exc:
        log.warning("helmlog OtelProcess at exit: %s", exc)
