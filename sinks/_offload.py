"""An OtelSink in a process of its own: the watched run hands over bytes only.

Pattern: a ``RecordTaker`` (``helmlog.events.lowlevel``: the explicit,
         internal opt-in to stored records, G95) that forwards each turn's
         stored records, batched, down a pipe to a child process that runs
         helmlog's own entry (``sinks/_export_child.py``), which decodes
         them and runs ``OtelSink`` and the SDK's exporters there.
Role:    sinks layer; ``.watch(OtelProcess(url))``: live OTLP export of a
         run, the attached sink bench/sinks.py's headline measures (an
         in-process ``OtlpExport`` beside it).
Emits:   through the child's exporters; raises ``ExportError`` at
         ``flush``/``close`` (one left open is closed at interpreter exit,
         a failure then logged).

Laws: R28 (the child is started as ``python -P -c`` helmlog's entry, never
by multiprocessing's spawn, which re-imports the caller's ``__main__``: a
script with no main guard ran its agent again in the child; it runs no user
code but a ``setup`` it is handed, imported by its module's name), R16 (a
sink never drives the run: ``on_records``/``on_event`` never
raise; a failure is kept and raised where the caller asks, at ``flush`` or
``close``: an export that failed since the last ask, after which the child
exports on, or the child's death, which ends it), R4 (the child projects each row as
the fact it stands for, ``OtelSink.on_recorded``; a journal hands each
append once, and served events are de-duplicated by ``(session_id, seq)``),
R6 (the spans are those an in-process ``OtelSink`` makes of the same
run: the child decodes the bytes the fold decoded), G86 (a redacting agent
hands it its served events instead, which it encodes, since the stored bytes
may keep values the served form hides).

Why a process and not a thread: the SDK's span and record handling is pure
Python, so a thread holds the same GIL the loop needs; on a second core the
projection costs the run only the hand-over.

Why stored records, untouched: the journal encoded every event to hash it,
so the run hands over an append's records in one call
(``runtime/_watchers.py``), and this watcher keeps the list as it is handed
until the turn's end, then has msgpack encode the turn's lists in one call.
Nothing is encoded again, no fact is built, and no Python code runs per
record in the run: the child picks the types its projection reads (a
watcher called per event that did nothing cost a memory-store run about
5 %; a record taker that does nothing costs it nothing measurable, and one
that picked and joined each append's bytes in Python cost it about 3 %).

Why the child projects onto ``FinishedTelemetry`` (``sinks/_direct.py``): it
owns its exporters, so it needs no live spans; building the SDK's export
types once, at each span's end, costs about half the SDK providers' path, and
the child keeps up with a run on one core instead of becoming the bottleneck.

Why nothing wakes anyone while a run is busy: on a small VM a wake-up of a
process or thread that sleeps on the other core costs the waker far more
than the bytes (a child woken per turn, only to read, cost a memory-store
run more than the projection saves). So:

- the run's thread seals a turn at its end (``agent.turn_end``, a pause, a
  fatal error, or ``batch`` records) into one msgpack message, the records
  as they are, and holds it; what is held goes to the data pipe in one
  ``writev`` once ``WRITE_AT`` bytes are held, or ``linger_s`` after the
  first, from a timer on the run's own event loop (``call_later``), or at
  once when the seal ran outside one;
- data and control go on two pipes, and a busy child sleeps on the control
  pipe alone (``sinks/_export_child.py``), so the run's writes wake no one
  while ``flush`` and ``close`` still wake it at once.

Why a timer on the loop and not a thread: an earlier version had a thread
write what a quiet run left every 20 ms; each of its ticks took the GIL from
the run (about 3 % of a memory-store run, bench/sinks.py). A write per turn
instead cost the run about 10 us a turn on this VM, the system call more
than the bytes; a loop timer costs neither, and the run's loop turns over
between turns anyway. A timer on a loop that stops first never fires
(``asyncio.run`` per turn), so a sweeper thread, waking once per
``SWEEP_S``, writes what such a timer left: a tick a second takes the GIL
too seldom to show.
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
