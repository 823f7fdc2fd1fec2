"""Reading the record from the command line: replay, verify, tail.

Pattern: renderers over the record: a session's timeline as a Rich table,
         its records as JSON, decision facts as lines; the chain key from
         the environment. The checks are ``helmlog.events``' (``verify_session``,
         ``upgrade_heads``); following facts is ``helmlog.sinks.follow_facts``.
Role:    the face; ``helmlog replay|verify|tail|upgrade-heads`` call these.

Laws: R18 (the chain key from ``$HELMLOG_CHAIN_KEY``), G93 (a fact's honesty
fields, names only). Why the timeline shows facts built from events, not
the fold: an auditor reads what a watcher sees, in the order things happened.
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
    UnknownEvent,
    decode_event,
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
