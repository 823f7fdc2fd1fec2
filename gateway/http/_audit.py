"""What the pages read from the record: decided asks, a session's timeline.

Pattern: read models (frozen Structs) built by pure functions over decoded
         events, and ``DecisionHistory``, a projection of every session's
         ``pause.resume`` records, caught up incrementally from the streams.
Role:    gateway layer (http); the service builds these, ``pages`` renders.
Emits:   nothing: it reads the store.

Laws: issue 28 items 1–2 (history, conversation, timeline), R3/R18 (each
stream read is verified; a broken one is named, never trusted), G86 (values
are served: the caller redacts before rendering).

Why a projection kept in memory and not an index in the store: the streams
are the only truth; this one is computed from them (after each seq already
read), so a restart rebuilds it and no second record can disagree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

import msgspec

from helmlog.events import (
    ConversationSeeded,
    DecisionFiled,
    EventDecodeError,
    EventStore,
    FatalError,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    MiddlewareDecisionEvent,
    OutputRejected,
    PauseRequested,
    PauseResumed,
    SessionImported,
    StoredEvent,
    StreamTamperedError,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    TurnEnded,
    TurnStarted,
    WindowCompacted,
    verify_records,
)

Outcome = Literal["approved", "declined", "timed out", "answered"]
OUTCOMES: Final = ("approved", "declined", "timed out", "answered")
TIMEOUT_BY: Final = "timeout"


class Resolution(msgspec.Struct, frozen=True, kw_only=True):
    """One ask a person (or the deadline) answered: the pair of a session's
    ``pause.request`` and the ``pause.resume`` that answered it."""

    session_id: str
    tool_call_id: str
    tool_name: str
    rule: str | None
    kind: str
    question: str
    outcome: str
    by: str | None
    note: str | None
    asked_at: int
    decided_at: int
    seq: int


def resolution_of(
    session_id: str, asked: PauseRequested | None, resumed: PauseResumed
) -> Resolution:
    """The ``Resolution`` of ``resumed`` (``asked``: its pause, when read)."""
    if resumed.approved is None:
        outcome = "answered"
    elif resumed.approved:
        outcome = "approved"
    elif resumed.by == TIMEOUT_BY:
        outcome = "timed out"
    else:
        outcome = "declined"
    return Resolution(
        session_id=session_id,
        tool_call_id=resumed.tool_call_id,
        tool_name=asked.tool_name if asked is not None else "",
        rule=asked.middleware if asked is not None else None,
        kind=resumed.kind,
        question=asked.question if asked is not None else "",
        outcome=outcome,
        by=resumed.by,
        note=resumed.note,
        asked_at=asked.timestamp if asked is not None else 0,
        decided_at=resumed.timestamp,
        seq=resumed.seq or 0,
    )


def when(ms: int) -> str:
    """A time in ms since the epoch as a person reads it (UTC)."""
    if ms <= 0:
        return "an unknown time"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def said(r: Resolution) -> str:
    """``approved by dana@ops at 2026-12-06 08:40:12 UTC``, in words."""
    if r.outcome == "timed out":
        return f"declined by its deadline at {when(r.decided_at)}"
    return f"{r.outcome} by {r.by or 'someone unnamed'} at {when(r.decided_at)}"


def resolutions(session_id: str, events: Iterable[Any]) -> list[Resolution]:
    """Every answered ask in ``events``, in stream order."""
    asked: dict[str, PauseRequested] = {}
    out: list[Resolution] = []
    for ev in events:
        if isinstance(ev, PauseRequested):
            asked[ev.tool_call_id] = ev
        elif isinstance(ev, PauseResumed):
            out.append(resolution_of(session_id, asked.get(ev.tool_call_id), ev))
    return out


# -- the history projection --------------------------------------------------------


class _Followed:
    """How far one session's stream has been read, and what it held."""

    __slots__ = ("asked", "broken", "hash", "owner", "rows", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.hash = ""
        self.owner: str | None = None
        self.asked: dict[str, PauseRequested] = {}
        self.rows: list[Resolution] = []
        self.broken: int | None = None


class DecisionHistory:
    """Every decided ask of every session the store holds, newest first.

    ``refresh`` reads each stream after the seq it last read (verified from
    there under the store's chain key); a stream that fails verification
    keeps what was verified before and is named in ``broken``.
    """

    def __init__(self, store: EventStore) -> None:
        self._store = store
        self._followed: dict[str, _Followed] = {}
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Catch up with every stream (one read per session)."""
        async with self._lock:
            for sid in await self._store.sessions():
                seen = self._followed.setdefault(sid, _Followed())
                if seen.broken is not None:
                    continue
                records = await self._store.read(sid, seen.seq)
                if records:
                    self._apply(sid, seen, records)

    def _apply(self, sid: str, seen: _Followed, records: list[StoredEvent]) -> None:
        try:
            seen.seq, seen.hash = verify_records(
                sid, records, self._store.chain_key, after=(seen.seq, seen.hash)
            )
        except StreamTamperedError as exc:
            seen.broken = exc.seq
            return
        for record in records:
            ev = record.decode()
            if seen.owner is None and isinstance(ev, (TurnStarted, SessionImported)):
                seen.owner = _owner(ev)
            if isinstance(ev, PauseRequested):
                seen.asked[ev.tool_call_id] = ev
            elif isinstance(ev, PauseResumed):
                asked = seen.asked.pop(ev.tool_call_id, None)
                seen.rows.append(resolution_of(sid, asked, ev))

    def rows(self) -> list[tuple[str | None, Resolution]]:
        """``(owner app, resolution)`` of every decided ask, newest first."""
        out = [(s.owner, r) for s in self._followed.values() for r in s.rows]
        out.sort(key=lambda pair: (pair[1].decided_at, pair[1].seq), reverse=True)
        return out

    def broken(self) -> dict[str, int]:
        """Sessions whose stream failed verification: ``{id: first broken seq}``."""
        return {
            sid: s.broken for sid, s in self._followed.items() if s.broken is not None
        }


def _owner(ev: TurnStarted | SessionImported) -> str | None:
    ident = ev.identity if isinstance(ev, TurnStarted) else None
    if isinstance(ev, SessionImported) and ev.call is not None:
        ident = ev.call.identity
    app = ident.get("app") if isinstance(ident, dict) else None
    return app if isinstance(app, str) and app else None


class HistoryFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What a history page shows: exact matches on each given field, a time
    window in ms since the epoch (``since`` inclusive, ``until`` exclusive),
    and a 1-based page of ``size`` rows."""

    approver: str = ""
    rule: str = ""
    tool: str = ""
    outcome: str = ""
    since: int | None = None
    until: int | None = None
    page: int = 1
    size: int = 20

    def admits(self, r: Resolution) -> bool:
        """Whether ``r`` passes every given filter."""
        return (
            (not self.approver or r.by == self.approver)
            and (not self.rule or r.rule == self.rule)
            and (not self.tool or r.tool_name == self.tool)
            and (not self.outcome or r.outcome == self.outcome)
            and (self.since is None or r.decided_at >= self.since)
            and (self.until is None or r.decided_at < self.until)
        )


class HistoryPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of decided asks and what it was cut from."""

    rows: tuple[Resolution, ...]
    total: int
    page: int
    pages: int
    approvers: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    broken: tuple[tuple[str, int], ...] = ()


# -- a session's timeline ------------------------------------------------------------

EntryKind = Literal[
    "message", "proposal", "decision", "pause", "resolved", "tool", "result",
    "error", "turn-end", "note",
]  # fmt: skip


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One moment of a session, as the session view lists it.

    ``title`` says what happened in words; ``text`` is a value (a message,
    a rule's why) as the policy serves it; ``values`` are labelled values
    (arguments, before/after, a result); ``verified`` is false from the
    first broken seq on.
    """

    seq: int
    at: int
    kind: EntryKind
    title: str
    text: str | None = None
    values: tuple[tuple[str, Any], ...] = ()
    verified: bool = True


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """A turn: what started it (``title``) and its moments in order."""

    number: int
    title: str
    entries: tuple[Entry, ...]


class Timeline(msgspec.Struct, frozen=True, kw_only=True):
    """A whole session for an auditor, with its chain's state."""

    session_id: str
    turns: tuple[Turn, ...]
    count: int
    intact: bool
    verdict: str
    broken: int | None = None


def decoded(records: Sequence[StoredEvent]) -> list[Any]:
    """Each record decoded; one whose bytes no longer decode (an edit) is
    kept as its ``EventDecodeError``, so the timeline names it."""
    out: list[Any] = []
    for record in records:
        try:
            out.append(record.decode())
        except EventDecodeError as exc:
            out.append((record.seq, exc))
    return out


def timeline_of(
    session_id: str, events: Sequence[Any], verdict: str, broken: int | None
) -> Timeline:
    """The turns of ``events`` (served already), ``broken`` from the verdict.

    What is recorded between turns (a message's input rules run before its
    turn starts) opens the next turn; left at the end (an input refused, so
    no turn started), it is a section of its own.
    """
    turns: list[Turn] = []
    pending: list[Entry] = []
    current: tuple[int, str, list[Entry]] | None = None
    last = 0
    for ev in events:
        if isinstance(ev, (TurnStarted, SessionImported)):
            if current is not None:
                turns.append(_turn(*current))
            if isinstance(ev, TurnStarted):
                ident = ev.identity if isinstance(ev.identity, dict) else {}
                who = ident.get("principal")
                last = ev.turn
                title = f"turn {ev.turn}" + (f", for {who}" if who else "")
            else:
                last += 1
                title = f"imported from a checkpoint ({ev.kind} pause)"
            current, pending = (last, title, pending), []
        entry = _entry(ev)
        if entry is not None:
            if broken is not None and entry.seq >= broken:
                entry = msgspec.structs.replace(entry, verified=False)
            (current[2] if current is not None else pending).append(entry)
        if isinstance(ev, TurnEnded) and current is not None:
            turns.append(_turn(*current))
            current = None
    if current is not None:
        turns.append(_turn(*current))
    if pending:
        refused = any(x.kind == "error" for x in pending)
        title = (
            "an input refused before its turn began" if refused else "outside a turn"
        )
        turns.append(_turn(last + 1, title, pending))
    return Timeline(
        session_id=session_id,
        turns=tuple(turns),
        count=len(events),
        intact=broken is None,
        verdict=verdict,
        broken=broken,
    )


def _turn(number: int, title: str, entries: list[Entry]) -> Turn:
    return Turn(number=number, title=title, entries=tuple(entries))


def _calls(message: Message) -> tuple[tuple[str, Any], ...]:
    return tuple((f"{c.name} ({c.id})", c.args) for c in message.tool_calls or ())


def _row_entry(seq: int, at: int, row: MiddlewareDecision | Any) -> Entry:
    where = row.moment + (f" · {row.tool_name}" if row.tool_name else "")
    values: tuple[tuple[str, Any], ...] = ()
    if getattr(row, "changed", False):
        values = (("before", getattr(row, "before", None)),
                  ("after", getattr(row, "after", None)))  # fmt: skip
    return Entry(
        seq=seq,
        at=at,
        kind="decision",
        title=f"{row.middleware}: {row.outcome} at {where}"
        + (" (changed the value)" if row.changed else ""),
        text=row.why,
        values=values,
    )


def _entry(ev: Any) -> Entry | None:
    if isinstance(ev, tuple):
        seq, exc = ev
        return Entry(seq=seq, at=0, kind="error", title=f"unreadable record: {exc}")
    seq, at = ev.seq or 0, ev.timestamp
    if isinstance(ev, MessageCommitted):
        m = ev.message
        if m.role == "assistant" and m.tool_calls:
            return Entry(seq=seq, at=at, kind="proposal",
                         title="the model proposes a tool call", text=m.content,
                         values=_calls(m))  # fmt: skip
        who = {"user": "the user", "assistant": "the model"}.get(m.role, m.role)
        if m.role == "tool":
            who = f"tool {m.tool_name} result, as the model reads it"
        return Entry(seq=seq, at=at, kind="message", title=who, text=m.content)
    if isinstance(ev, DecisionFiled):
        return _row_entry(seq, at, ev.row)
    if isinstance(ev, MiddlewareDecisionEvent):
        return _row_entry(seq, at, ev)
    if isinstance(ev, PauseRequested):
        asker = ev.middleware or "the tool"
        return Entry(seq=seq, at=at, kind="pause",
                     title=f"paused: {asker} asks a person about {ev.tool_name}",
                     text=ev.question, values=(("detail", ev.detail),))  # fmt: skip
    if isinstance(ev, PauseResumed):
        r = resolution_of(ev.session_id, None, ev)
        return Entry(seq=seq, at=at, kind="resolved",
                     title=f"{r.outcome} by {r.by or 'someone unnamed'}",
                     text=ev.note)  # fmt: skip
    if isinstance(ev, ToolDispatched):
        return Entry(seq=seq, at=at, kind="tool",
                     title=f"tool {ev.tool_name} dispatched ({ev.tool_call_id})",
                     values=(("arguments", ev.args),))  # fmt: skip
    if isinstance(ev, ToolEnded):
        what = "failed" if ev.error else "returned"
        return Entry(seq=seq, at=at, kind="result",
                     title=f"tool {ev.tool_name} {what} ({ev.duration_ms} ms)",
                     values=(("result", ev.result),))  # fmt: skip
    if isinstance(ev, ToolOutcomeUnknown):
        return Entry(seq=seq, at=at, kind="error",
                     title=f"tool {ev.tool_name}: its outcome is unknown "
                     "(dispatched, no result recorded)")  # fmt: skip
    if isinstance(ev, FatalError):
        where = " ".join(p for p in (ev.phase, ev.middleware) if p)
        return Entry(
            seq=seq,
            at=at,
            kind="error",
            title=f"error {ev.code}" + (f" ({where})" if where else ""),
        )
    if isinstance(ev, OutputRejected):
        return Entry(
            seq=seq,
            at=at,
            kind="error",
            title=f"output rejected (attempt {ev.attempt})",
            text=ev.error,
        )
    if isinstance(ev, TurnEnded):
        return Entry(seq=seq, at=at, kind="turn-end", title="the turn ended",
                     text=ev.final_content)  # fmt: skip
    if isinstance(ev, WindowCompacted):
        return Entry(seq=seq, at=at, kind="note",
                     title=f"window compacted: {ev.removed_message_count} "
                     "message(s) left out")  # fmt: skip
    if isinstance(ev, ConversationSeeded):
        return Entry(seq=seq, at=at, kind="note",
                     title="seeded from a conversation checkpoint")  # fmt: skip
    return None  # model calls, turn starts, proxy marks: shown by what follows


def card_context(
    events: Sequence[Any], pause_seq: int, keep: int = 6
) -> tuple[tuple[Entry, ...], tuple[Entry, ...]]:
    """What an approver reads on a card: the last ``keep`` messages up to the
    pause, and the decisions and answered pauses of its turn before it."""
    messages: list[Entry] = []
    turn: list[Entry] = []
    for ev in events:
        if isinstance(ev, tuple):
            continue
        if (ev.seq or 0) >= pause_seq:
            break
        if isinstance(ev, (TurnStarted, SessionImported)):
            turn = []
        entry = _entry(ev)
        if entry is None:
            continue
        if entry.kind in ("message", "proposal"):
            messages.append(entry)
        elif entry.kind in ("decision", "resolved"):
            turn.append(entry)
    return tuple(messages[-keep:]), tuple(turn)
