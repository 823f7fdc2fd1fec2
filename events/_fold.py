"""Fold a session stream into its state: the stream is the truth.

Pattern: a left fold with one handler per event type; the live session and
         ``fold`` use the same ``Folder``, so live state equals the fold.
Role:    events layer; snapshots, activation, checkpoint validation and
         replay read state through here; what it yields is
         ``events/_session_state.py``.
Emits:   nothing. Pure: no clock, no randomness, no I/O.

Laws: R1, R10, R15, R20 (a turn's dispatch bookkeeping is its own), R7/R22
(``Folder.unfinished``), R9 (``session.imported``), issue 8 item 8
(``Folder.trace``), issue 22 (``Folder.approvals``).

Why checkpoints are kept as lines, not copies: a copy per checkpoint made
folding quadratic. "Unfinished" and the rest: docs/design.md.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from ._checkpoint import Checkpoint
from ._decision import MiddlewareDecision
from ._decision_events import DecisionFiled
from ._envelope import Event, UnknownEvent
from ._messages import Message
from ._pause_events import (
    ConversationSeeded,
    PausedCall,
    PauseRequested,
    PauseResumed,
    SessionImported,
)
from ._session_state import (
    Approval,
    PendingPause,
    SessionState,
    approval_of,
    pause_of,
)
from ._turn_events import (
    FatalError,
    LlmStarted,
    MessageCommitted,
    OutputRejected,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnEnded,
    TurnStarted,
    WindowCompacted,
)

# One empty set every folder shares until it holds a seq (never mutated).
_NO_SEQS: frozenset[int] = frozenset()


class Folder:
    """The mutable accumulator behind ``fold``; ``apply`` one event at a time."""

    __slots__ = (
        "_asking_source",
        "_conversation",
        "_conversation_seq",
        "_history_at",
        "_line_base",
        "_line_start",
        "approvals",
        "dispatched",
        "failed",
        "history",
        "identity",
        "in_turn",
        "iteration",
        "last_seq",
        "original_input",
        "output_rejections",
        "pause_checkpoint",
        "pause_seqs",
        "pending",
        "resolved_pauses",
        "rows",
        "session_id",
        "tool_calls",
        "trace",
        "turn",
        "unknown",
        "window_records",
    )

    def __init__(self, session_id: str = "") -> None:
        self.session_id = session_id
        self.history: list[Message] = []
        self.rows: list[MiddlewareDecision] = []
        # Containers most sessions never fill start as empty immutables and
        # become a list or set on first use: a resident session is a few
        # objects fewer for the collector to walk (issue 29).
        self.window_records: list[WindowCompacted] | tuple[()] = ()
        self.pending: PendingPause | None = None
        self.pause_checkpoint: Checkpoint | None = None
        # The last conversation checkpoint's seq, and that checkpoint once built.
        self._conversation_seq: int | None = None
        self._conversation: Checkpoint | None = None
        self.unknown: list[tuple[int, str]] | tuple[()] = ()
        self.last_seq = 0
        self.turn = 0
        self.iteration = 0
        self.tool_calls = 0  # calls the current turn proposed so far
        self.output_rejections = 0  # its answers that failed the output type
        self.original_input: str | None = None
        self.in_turn = False
        # The current turn was ended by error.fatal (it is not unfinished).
        self.failed = False
        self.identity: Any = None
        # (traceparent, tracestate) of the current turn, as last recorded.
        self.trace: tuple[str, str] = ("", "")
        self.dispatched: dict[str, ToolDispatched] = {}
        self.resolved_pauses: set[int] | frozenset[int] = _NO_SEQS
        # Every pause.request seq, so a checkpoint naming another seq is known forged.
        self.pause_seqs: set[int] | frozenset[int] = _NO_SEQS
        # seq -> (base checkpoint's seq or None, messages added, original input)
        self._history_at: dict[
            int, tuple[int | None, tuple[Message, ...], str | None]
        ] = {}
        # Invariant: history[:_line_start] is the history of checkpoint
        # _line_base (empty when None); only appends follow it.
        self._line_base: int | None = None
        self._line_start = 0
        # Every approved ask, oldest first; a tuple, replaced on each (rare)
        # approval, so a call site shares it without a copy.
        self.approvals: tuple[Approval, ...] = ()
        # The pending pause's tool source, as its record named it.
        self._asking_source: str | None = None

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The pending pause's checkpoint, else the last conversation checkpoint."""
        if self.pending is not None:
            return self.pause_checkpoint
        seq = self._conversation_seq
        if self._conversation is None and seq is not None:
            self._conversation = Checkpoint(
                kind="conversation",
                session_id=self.session_id,
                seq=seq,
                history=self._history_of(seq),
                original_input=self._history_at[seq][2],
            )
        return self._conversation

    @property
    def unfinished(self) -> bool:
        """A turn started, ended neither by ``agent.turn_end`` nor by
        ``error.fatal``, with no pause pending: what recovery finishes (R7)."""
        return self.in_turn and not self.failed and self.pending is None

    def history_at(self, seq: int) -> tuple[tuple[Message, ...], str | None] | None:
        """History and original input of the conversation checkpoint at ``seq``."""
        line = self._history_at.get(seq)
        return None if line is None else (self._history_of(seq), line[2])

    def _history_of(self, seq: int) -> tuple[Message, ...]:
        if self._line_base == seq and len(self.history) == self._line_start:
            return tuple(self.history)
        parts: list[tuple[Message, ...]] = []
        at: int | None = seq
        while at is not None:
            base, added, _ = self._history_at[at]
            parts.append(added)
            at = base
        if len(parts) == 1:
            return parts[0]
        return tuple(itertools.chain.from_iterable(reversed(parts)))

    def _accept(self, seq: int, added: tuple[Message, ...], base: int | None) -> None:
        # Invariant: a base is an earlier seq, so a history's line ends; a
        # malformed stream that repeats a seq gets a copy, never a cycle.
        if base is not None and base >= seq:
            added, base = self._history_of(base) + added, None
        self._history_at[seq] = (base, added, self.original_input)
        self._line_base, self._line_start = seq, len(self.history)
        self._conversation_seq, self._conversation = seq, None

    def apply(self, event: Event | UnknownEvent) -> None:
        """Fold one event. Events of types with no state effect are skipped."""
        if event.seq is not None:
            self.last_seq = event.seq
        if not self.session_id:
            self.session_id = event.session_id
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def state(self) -> SessionState:
        """A frozen snapshot of what has been folded so far."""
        return SessionState(
            session_id=self.session_id,
            history=tuple(self.history),
            middleware_decisions=tuple(self.rows),
            window_records=tuple(self.window_records),
            pending=self.pending,
            checkpoint=self.checkpoint,
            unknown_events=tuple(self.unknown),
            last_seq=self.last_seq,
            turn=self.turn,
            iteration=self.iteration,
            original_input=self.original_input,
            in_turn=self.in_turn,
            dispatched=tuple(self.dispatched.values()),
            resolved_pauses=frozenset(self.resolved_pauses),
            conversation_seqs=frozenset(self._history_at),
            identity=self.identity,
        )

    # -- handlers ---------------------------------------------------------

    def _seeded(self, ev: ConversationSeeded) -> None:
        self.history = list(ev.history)
        self.original_input = ev.original_input
        self._accept(ev.seq or 0, tuple(ev.history), None)

    def _filed(self, ev: DecisionFiled) -> None:
        self.rows.append(_shared_words(ev.row))

    def _turn_started(self, ev: TurnStarted) -> None:
        base = ev.base_seq
        if base not in self._history_at:
            self.history = []
            self._line_base, self._line_start = None, 0
        elif self._line_base != base or len(self.history) != self._line_start:
            self.history = list(self._history_of(base))
            self._line_base, self._line_start = base, len(self.history)
        # else: the history already is exactly that checkpoint's; keep it.
        self.turn = ev.turn
        self.identity = ev.identity
        self.trace = (ev.traceparent, ev.tracestate)
        self.iteration = 0
        self.tool_calls = 0
        self.output_rejections = 0
        self.original_input = None
        self.in_turn = True
        self.failed = False
        # R20: call ids are the provider's, and providers reuse them per turn.
        self.dispatched = {}

    def _turn_ended(self, ev: TurnEnded) -> None:
        added = tuple(self.history[self._line_start :])
        self._accept(ev.seq or 0, added, self._line_base)
        self.in_turn = False

    def _fatal(self, ev: FatalError) -> None:
        if self.in_turn:
            self.failed = True

    def _llm_started(self, ev: LlmStarted) -> None:
        self.iteration = ev.iteration

    def _tool_started(self, ev: ToolStarted) -> None:
        self.tool_calls += 1

    def _output_rejected(self, ev: OutputRejected) -> None:
        self.output_rejections += 1

    def _committed(self, ev: MessageCommitted) -> None:
        msg = ev.message
        if msg.role == "user" and self.original_input is None and self.in_turn:
            self.original_input = msg.content
        self.history.append(msg)

    def _pause_requested(self, ev: PauseRequested) -> None:
        if ev.identity is not None:
            # A served call's pause names its caller (S10): no turn did.
            self.identity = ev.identity
        call = PausedCall(
            kind=ev.kind,
            args=ev.args,
            middleware=ev.middleware,
            link_index=ev.link_index,
            iteration=ev.iteration,
            question=ev.question,
            component_id=ev.component_id,
            turn=self.turn,
            identity=self.identity,
        )
        self._pause(
            ev.seq or 0, ev, call, tuple(self.history), self.original_input, ev.detail
        )

    def _pause(
        self,
        seq: int,
        ev: PauseRequested | SessionImported,
        call: PausedCall,
        history: tuple[Message, ...],
        original_input: str | None,
        detail: Any,
    ) -> None:
        if isinstance(self.pause_seqs, set):
            self.pause_seqs.add(seq)
        else:
            self.pause_seqs = {seq}
        self._asking_source = ev.tool_source if isinstance(ev, PauseRequested) else None
        self.pending, self.pause_checkpoint = pause_of(
            self.session_id, seq, ev, call, history, original_input, detail
        )

    def _imported(self, ev: SessionImported) -> None:
        # The turn the checkpoint paused goes on here: its history, its
        # number and identity, its model call, and the pause itself, pending
        # at the seq it had where it was taken (R9: so a second resume of the
        # same checkpoint is "replayed").
        self.history = list(ev.history)
        self.original_input = ev.original_input
        self._line_base, self._line_start = None, 0
        call = ev.call
        if call is None:
            return
        self.turn = call.turn
        self.identity = call.identity
        self.trace = (ev.traceparent, ev.tracestate)
        self.iteration = call.iteration
        self.in_turn = True
        self.failed = False
        self.dispatched = {}
        self._pause(
            ev.checkpoint_seq, ev, call, tuple(ev.history), ev.original_input, None
        )

    def _pause_resumed(self, ev: PauseResumed) -> None:
        p = self.pending
        if p is not None:
            if isinstance(self.resolved_pauses, set):
                self.resolved_pauses.add(p.seq)
            else:
                self.resolved_pauses = {p.seq}
            approved = approval_of(p, self._asking_source, ev)
            if approved is not None:
                self.approvals = (*self.approvals, approved)
        self.pending = None
        self.pause_checkpoint = None
        self._continued(ev)

    def _continued(self, ev: PauseResumed | ToolOutcomeUnknown) -> None:
        # A continuation recorded without a context (an older stream) keeps
        # the turn's.
        if ev.traceparent:
            self.trace = (ev.traceparent, ev.tracestate)

    def _dispatched(self, ev: ToolDispatched) -> None:
        self.dispatched[ev.tool_call_id] = ev

    def _tool_ended(self, ev: ToolEnded) -> None:
        self.dispatched.pop(ev.tool_call_id, None)

    def _outcome_unknown(self, ev: ToolOutcomeUnknown) -> None:
        self.dispatched.pop(ev.tool_call_id, None)
        self._continued(ev)

    def _window(self, ev: WindowCompacted) -> None:
        if isinstance(self.window_records, list):
            self.window_records.append(ev)
        else:
            self.window_records = [ev]

    def _unknown(self, ev: UnknownEvent) -> None:
        if isinstance(self.unknown, list):
            self.unknown.append((ev.seq or 0, ev.type))
        else:
            self.unknown = [(ev.seq or 0, ev.type)]


def _shared_words(row: MiddlewareDecision) -> MiddlewareDecision:
    """The row with its vocabulary interned (an equal value, fewer copies).

    Why: a host keeps thousands of sessions resident (R21), each holding every
    row it folded, and every decoded row carries its own copy of the same few
    words (link name, moment, at, outcome, phase, tool name) — about a fifth
    of a resident session's memory. Interning replaces each with an equal
    string, so no value changes; it is done here, where rows are kept, not in
    the decoder, so reading a stream pays nothing for it.
    """
    # Unrolled, and set only where the interned word is another object (a
    # row the runtime built mostly holds interned words already).
    word: str | None = row.middleware
    if type(word) is str and _intern(word) is not word:
        _set(row, "middleware", _intern(word))
    word = row.moment
    if type(word) is str and _intern(word) is not word:
        _set(row, "moment", _intern(word))
    word = row.at
    if type(word) is str and _intern(word) is not word:
        _set(row, "at", _intern(word))
    word = row.outcome
    if type(word) is str and _intern(word) is not word:
        _set(row, "outcome", _intern(word))
    word = row.phase
    if type(word) is str and _intern(word) is not word:
        _set(row, "phase", _intern(word))
    word = row.tool_name
    if type(word) is str and _intern(word) is not word:
        _set(row, "tool_name", _intern(word))
    return row


_intern = sys.intern
_set = msgspec.structs.force_setattr


# One table for every folder: a per-instance table of bound methods would be
# thirteen objects and a reference cycle for every session a host holds.
_HANDLERS: dict[type[Any], Callable[[Folder, Any], None]] = {
    ConversationSeeded: Folder._seeded,
    SessionImported: Folder._imported,
    DecisionFiled: Folder._filed,
    TurnStarted: Folder._turn_started,
    TurnEnded: Folder._turn_ended,
    FatalError: Folder._fatal,
    LlmStarted: Folder._llm_started,
    ToolStarted: Folder._tool_started,
    OutputRejected: Folder._output_rejected,
    MessageCommitted: Folder._committed,
    PauseRequested: Folder._pause_requested,
    PauseResumed: Folder._pause_resumed,
    ToolDispatched: Folder._dispatched,
    ToolEnded: Folder._tool_ended,
    ToolOutcomeUnknown: Folder._outcome_unknown,
    WindowCompacted: Folder._window,
    UnknownEvent: Folder._unknown,
}


def fold(events: Iterable[Event | UnknownEvent]) -> SessionState:
    """The state a stream holds. Pure: the same events give the same state."""
    folder = Folder()
    for event in events:
        folder.apply(event)
    return folder.state()
