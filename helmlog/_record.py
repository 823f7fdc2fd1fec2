"""Reading the record from the command line: replay, verify, tail, upgrade-heads.

Pattern: read-only views over an event store, each returning data a test can
         check (a ``Verdict``, rows) and renderers (a Rich table, JSON, lines).
Role:    the face; ``helmlog replay|verify|tail|upgrade-heads`` call these.
         Following the facts stream is ``helmlog.sinks.follow_facts``.
Emits:   nothing into a session.

Laws: R18 (``verify`` exits 0 intact, 1 naming the first broken seq), R3,
R4, R19 (a cut tail or a deleted stream is named), R26 (a stream without its
head on a store that writes heads is broken; ``upgrade_heads`` is explicit).

Why the timeline shows facts built from events, not the fold: an auditor
reads what a watcher sees, in the order things happened.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable
from typing import Any

import msgspec
from rich.table import Table
from rich.text import Text

from helmlog.events import (
    EventStore,
    FactRecord,
    StoredEvent,
    StreamHead,
    StreamTamperedError,
    UnknownEvent,
    decode_event,
    refuse_headless,
    verify_records,
    watched,
)
from helmlog.sinks import follow_facts

CHAIN_KEY_ENV = "HELMLOG_CHAIN_KEY"

_encoder = msgspec.json.Encoder(enc_hook=str)


def chain_key_from_env() -> bytes | None:
    """The chain key from ``$HELMLOG_CHAIN_KEY``, if set.

    Else, with ``$HELMLOG_AUDIT_SECRET`` set, the MCP proxy's audit chain key
    derived from it (P21: ``HMAC-SHA256(secret, b"helmlog/v1/chain")``), so
    ``verify`` checks a proxy session as it checks an agent's.
    """
    value = os.environ.get(CHAIN_KEY_ENV)
    if value:
        return value.encode()
    secret = os.environ.get("HELMLOG_AUDIT_SECRET")
    if secret:
        return hmac.new(secret.encode(), b"helmlog/v1/chain", hashlib.sha256).digest()
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else _encoder.encode(value).decode()
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def timeline_row(event: Any) -> tuple[str, str, str] | None:
    """``(seq, what, detail)`` for one event; ``None`` for the value filing."""
    t = event.type
    seq = str(event.seq)
    if t == "decision.filed":
        return None
    if t == "middleware.decision":
        where = event.moment + (
            f" {event.tool_name}#{event.tool_call_id}" if event.tool_name else ""
        )
        changed = " (changed)" if event.changed else ""
        why = f" — {event.why}" if event.why else ""
        return (
            seq,
            "decision",
            f"{event.middleware} @ {where}: {event.outcome}{changed}{why}"
            + honesty(event),
        )
    if t == "message.committed":
        m = event.message
        if m.tool_calls:
            calls = ", ".join(
                f"{c.name}#{c.id}({_short(c.args, 40)})" for c in m.tool_calls
            )
            return seq, "assistant calls", calls
        label = f"{m.role}" + (
            f" {m.tool_name}#{m.tool_call_id}" if m.role == "tool" else ""
        )
        return seq, label, _short(m.content)
    if t == "agent.turn_start":
        return seq, "turn start", f"turn {event.turn}"
    if t == "agent.turn_end":
        return seq, "turn end", f"turn {event.turn}: {_short(event.final_content)}"
    if t == "stream.llm_start":
        return seq, "model call", f"#{event.iteration} {event.model}"
    if t == "stream.llm_end":
        held = " (draft held)" if event.content_withheld else ""
        return (
            seq,
            "model reply",
            f"#{event.iteration}: {event.tool_call_count} tool calls{held}"
            + (f" ({event.model})" if event.model else ""),
        )
    if t == "stream.tool_start":
        return (
            seq,
            "tool start",
            f"{event.tool_name}#{event.tool_call_id}({_short(event.args, 40)})",
        )
    if t == "stream.tool_end":
        err = " (error)" if event.error else ""
        return (
            seq,
            "tool end",
            f"{event.tool_name}#{event.tool_call_id}{err}: {_short(event.result)}",
        )
    if t == "tool.dispatched":
        return (
            seq,
            "dispatched",
            f"{event.tool_name}#{event.tool_call_id} attempt {event.attempt}",
        )
    if t == "pause.request":
        who = event.middleware or event.kind
        return (
            seq,
            "pause",
            f"{who} asks about {event.tool_name}#{event.tool_call_id}: "
            f"{event.question}",
        )
    if t == "pause.resume":
        verdict = {True: "approved", False: "declined", None: "answered"}[
            event.approved
        ]
        by = f" by {event.by}" if event.by else ""
        return (
            seq,
            "resume",
            f"{event.kind} {verdict}{by}" + (f": {event.note}" if event.note else ""),
        )
    if t == "window.compacted":
        return (
            seq,
            "window",
            (
                f"{event.strategy} at #{event.iteration}: "
                f"{event.removed_message_count} messages out of view"
            ),
        )
    if t == "error.fatal":
        return (
            seq,
            "error",
            f"{event.code}" + (f" at {event.phase}" if event.phase else ""),
        )
    if t == "proxy.call_started":
        return seq, "proxy call", f"{event.tool} ({event.transport})"
    if t == "proxy.call_finished":
        reason = f" {event.rejection_reason}" if event.rejection_reason else ""
        return (
            seq,
            "proxy result",
            f"{event.tool} via {event.route}: {event.outcome}{reason}",
        )
    if t == "proxy.session_closed":
        return seq, "proxy closed", f"{event.manifest.get('event_count')} events"
    if isinstance(event, UnknownEvent):
        return seq, "unknown", f"event type '{t}' this reader does not know"
    return seq, t, ""


def timeline_table(session_id: str, records: list[StoredEvent]) -> Table:
    """The session as a Rich table: turns, messages, tool calls, decisions."""
    table = Table(title=f"session {session_id}", title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("what")
    table.add_column("detail", overflow="fold")
    for event in watched(record.decode() for record in records):
        row = timeline_row(event)
        if row is not None:
            # Text, not markup: recorded values may contain "[...]".
            table.add_row(*(Text(cell) for cell in row))
    return table


def records_json(records: list[StoredEvent]) -> list[Any]:
    """Every stored event as JSON (the stored bytes, decoded as JSON), with the
    session id its store read it under where the bytes leave it out."""
    out = []
    for record in records:
        body = json.loads(record.data)
        if isinstance(body, dict) and record.session_id and not body.get("session_id"):
            body["session_id"] = record.session_id
        out.append(body)
    return out


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What ``verify`` found: how many events, the head, and the first break."""

    count: int
    head: StreamHead | None
    broken: int | None = None
    reason: str | None = None
    hint: str | None = None

    def text(self, session_id: str) -> str:
        """The line ``helmlog verify`` prints."""
        if self.broken is None:
            chain = "" if self.head is not None else " (no head record: chain only)"
            return f"intact: session {session_id} — {self.count} events verify{chain}"
        said = self.head.seq if self.head is not None else "?"
        if self.reason == "truncated":
            what = f"truncated after seq {self.count} (head says {said})"
        elif self.reason == "deleted" and self.head is None:
            what = "deleted: its stream and head record are gone (R25)"
        elif self.reason == "deleted":
            what = f"deleted: its stream is gone (head says {said})"
        elif self.reason == "head":
            what = f"its head record does not verify (head says {said})"
        elif self.reason == "no-head":
            what = f"its head record is missing ({self.count} events, no head)"
        else:
            what = f"the chain breaks at seq {self.broken} ({self.reason})"
        hint = f"; {self.hint}" if self.hint else ""
        return f"broken: session {session_id} — {what}{hint}"


async def verify(store: EventStore, session_id: str, key: bytes | None) -> Verdict:
    """The chain and the head record of one session, checked (R3, R19)."""
    head: StreamHead | None = None
    try:
        head = await store.read_head(session_id)
    except StreamTamperedError as exc:  # a head no append wrote
        records = await store.read(session_id)
        return Verdict(count=len(records), head=None, broken=exc.seq, reason="head")
    records = await store.read(session_id)
    if not records and head is None and await store.remembers(session_id):
        # R25: the store created it, and its stream and head are gone.
        return Verdict(count=0, head=None, broken=1, reason="deleted")
    try:
        verify_records(session_id, records, key, head=head)
        await refuse_headless(store, session_id, records, head)
    except StreamTamperedError as exc:
        hint = _key_hint(session_id, records, key) if exc.seq == 1 else None
        if exc.reason == "no-head":
            hint = (
                "this store writes head records, so a stream without one lost it; "
                "`helmlog upgrade-heads` is only for streams written before heads"
            )
        return Verdict(
            count=len(records), head=head, broken=exc.seq, reason=exc.reason, hint=hint
        )
    return Verdict(count=len(records), head=head)


async def upgrade_heads(
    store: EventStore, sessions: list[str] | None = None
) -> list[tuple[str, bool, str]]:
    """Give streams written before head records their heads (R26).

    The explicit upgrade: each session (every one the store holds when
    ``sessions`` is ``None``) is verified by its chain under the store's
    chain key and given the head of its last record; a session with its head
    is only remembered (R25). Returns ``(session, ok, line)`` per session;
    a stream that fails its chain is not upgraded (``ok`` false).
    """
    out: list[tuple[str, bool, str]] = []
    for session_id in sessions if sessions is not None else await store.sessions():
        try:
            head = await store.upgrade_head(session_id)
        except StreamTamperedError as exc:
            why = f"the chain breaks at seq {exc.seq} ({exc.reason})"
            line = f"broken: session {session_id} — {why}; not upgraded"
            out.append((session_id, False, line))
            continue
        if head is not None:
            line = f"upgraded: session {session_id} — head at seq {head.seq}"
        else:
            line = f"kept: session {session_id} — it has its head record"
        out.append((session_id, True, line))
    return out


def _key_hint(
    session_id: str, records: list[StoredEvent], key: bytes | None
) -> str | None:
    """Why the very first hash may fail: the chain key, not an edit.

    A first record that fails on its hash fails for one edit as for a key
    the writer did not use; the hint says which key would verify it, when
    that is knowable: none (the stream was written without one), or some
    other (a wrong ``$HELMLOG_CHAIN_KEY``, or none set for a keyed stream).
    """
    if not records:
        return None
    if key is not None:
        try:
            verify_records(session_id, records[:1], None)
        except StreamTamperedError:
            return "the chain key may be wrong ($HELMLOG_CHAIN_KEY)"
        return "the stream was written without a chain key: unset $HELMLOG_CHAIN_KEY"
    return "the stream may be keyed: set $HELMLOG_CHAIN_KEY to its chain key"


def honesty(fact: Any) -> str:
    """A fact's honesty fields as text (G93): which arguments a rewrite
    changed and where the link said their values came from; names only."""
    parts = []
    keys = getattr(fact, "changed_keys", None)
    if keys:
        parts.append("changed: " + ", ".join(keys))
    origins = getattr(fact, "from_", None)
    if origins:
        parts.append(
            "from: " + ", ".join(f"{name}={how}" for name, how in origins.items())
        )
    return f" [{'; '.join(parts)}]" if parts else ""


def fact_line(fact: FactRecord) -> str:
    """One decision fact as a line: session, seq, who decided what, and why."""
    ev = decode_event(fact.data)
    where = str(getattr(ev, "moment", "?"))
    tool_name = getattr(ev, "tool_name", None)
    if tool_name:
        where += f" {tool_name}#{getattr(ev, 'tool_call_id', '?')}"
    why = getattr(ev, "why", None)
    changed = " (changed)" if getattr(ev, "changed", False) else ""
    return (
        f"{fact.session_id} #{fact.seq} {getattr(ev, 'middleware', '?')} @ {where}: "
        f"{getattr(ev, 'outcome', '?')}{changed}"
        + (f" — {why}" if why else "")
        + honesty(ev)
    )


async def tail(
    store: EventStore,
    emit: Callable[[str], None],
    *,
    from_start: bool,
    count: int | None,
    idle_exit_s: float | None,
    block_ms: int = 500,
) -> int:
    """Follow the facts stream, printing each fact; return how many were shown."""
    return await follow_facts(
        store,
        lambda fact: emit(fact_line(fact)),
        from_start=from_start,
        count=count,
        idle_exit_s=idle_exit_s,
        block_ms=block_ms,
    )
