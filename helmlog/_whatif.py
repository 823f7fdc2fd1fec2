"""What-if from the face: verified records in, a report out; its tables.

Pattern: a thin adapter over the runtime's ``WhatIf``: read (or take) a
         session's records, verify them, decode once, re-judge; render the
         report as Rich tables or one JSON document.
Role:    the face; ``helmlog.whatif`` and ``helmlog whatif`` are these.
Emits:   nothing: a what-if appends to no stream, calls no model or tool.

Laws: issue 13 (typed errors for an unknown session, a factory that does not
import, a tampered stream), R19 (each session verified before a single
decision is re-judged), R18 (stores by URL, ``$HELMLOG_CHAIN_KEY``).

Why ``--agent`` takes the store, as ``approve`` does: the factory that runs
the sessions builds the changed agent that judges them.
"""

from __future__ import annotations

import datetime
import importlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from helmlog.events import (
    AgentFactoryError,
    Event,
    EventStore,
    StoredEvent,
    UnknownEvent,
    UnknownSessionError,
    verify_records,
)
from helmlog.runtime import FLIPS, Agent, WhatIfReport
from helmlog.runtime.lowlevel import WhatIf

Records = Iterable[StoredEvent] | Mapping[str, Sequence[StoredEvent]]


async def whatif(
    records: Records, agent: Agent, *, key: bytes | None = None
) -> WhatIfReport:
    """Re-judge recorded sessions under ``agent``'s rules; nothing runs.

    Args:
        records: stored records (``await store.read(session_id)``) of one or
            more sessions, in order, or a mapping of session id to records.
        agent: the changed agent. Its chains, permission gate, tools'
            validation and check-ins, and window decide; its provider and
            tools' ``execute`` are never called.
        key: the chain key the records were hashed under (default: the
            agent's store's).

    Raises:
        StreamTamperedError: a session's records fail verification (R19);
            nothing of any session is re-judged.
    """
    chain_key = key if key is not None else agent.config.store.chain_key
    sessions = _grouped(records)
    verified = [(sid, _verified(sid, recs, chain_key)) for sid, recs in sessions]
    engine = WhatIf(agent.config)
    return WhatIfReport(
        sessions=tuple([await engine.session(sid, ev) for sid, ev in verified])
    )


def _verified(
    session_id: str,
    records: Sequence[StoredEvent],
    key: bytes | None,
    head: Any = None,
) -> list[Event | UnknownEvent]:
    decoded: list[Event | UnknownEvent] = []
    verify_records(session_id, records, key, head=head, decoded=decoded)
    return decoded


def _grouped(records: Records) -> list[tuple[str, list[StoredEvent]]]:
    """Records by session, in order of first appearance; seq 1 opens one."""
    if isinstance(records, Mapping):
        return [(sid, list(recs)) for sid, recs in records.items()]
    groups: dict[str, list[StoredEvent]] = {}
    current: list[StoredEvent] | None = None
    for record in records:
        sid = record.session_id
        if not sid and (record.seq == 1 or current is None):
            sid = record.decode().session_id
        if sid:
            current = groups.setdefault(sid, [])
        assert current is not None
        current.append(record)
    return list(groups.items())


# -- from a store (the command line) -----------------------------------------


async def whatif_store(
    store: EventStore,
    session_ids: Sequence[str],
    agent: Agent,
    *,
    key: bytes | None = None,
    where: str = "",
    advance: Callable[[], None] | None = None,
) -> WhatIfReport:
    """Re-judge sessions read from ``store``, each verified with its head.

    Raises:
        UnknownSessionError: the store holds no such session.
        StreamTamperedError: a stream fails verification (R19).
    """
    chain_key = key if key is not None else store.chain_key
    engine = WhatIf(agent.config)
    judged = []
    for sid in session_ids:
        head = await store.read_head(sid)
        records = await store.read(sid)
        if not records and head is None:
            raise UnknownSessionError(session_id=sid, store=where)
        judged.append(
            await engine.session(sid, _verified(sid, records, chain_key, head))
        )
        if advance is not None:
            advance()
    return WhatIfReport(sessions=tuple(judged))


async def sessions_since(store: EventStore, since_ms: int | None) -> list[str]:
    """Every session of the store (``--all``), or those active since a time:
    whose last event's timestamp is at or after ``since_ms``."""
    ids = sorted(await store.sessions())
    if since_ms is None:
        return ids
    kept = []
    for sid in ids:
        tail = await store.read(sid)
        if tail and (tail[-1].decode().timestamp or 0) >= since_ms:
            kept.append(sid)
    return kept


_AGO = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now_ms: int | None = None) -> int:
    """``--since``: an ISO 8601 time (UTC when it names no zone), a duration
    ago (``90s``, ``30m``, ``2h``, ``7d``) or epoch milliseconds."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ago = _AGO.match(text.strip())
    if ago:
        return now - int(ago[1]) * _UNIT_S[ago[2]] * 1000
    if text.strip().isdigit():
        return int(text.strip())
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since takes an ISO 8601 time, a duration such as 2h, or epoch "
            f"milliseconds, got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def load_agent(spec: str, store: EventStore) -> Agent:
    """``module:function`` → the agent it builds on ``store``.

    Raises:
        AgentFactoryError: naming what is wrong (``reason``).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AgentFactoryError(
            spec=spec, reason="malformed", detail="expected module:function"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 — any import failure is this error
        raise AgentFactoryError(
            spec=spec,
            reason="import",
            detail=f"cannot import {module_name!r}: {type(exc).__name__}: {exc}",
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AgentFactoryError(
            spec=spec, reason="missing", detail=f"{module_name!r} has no {attr!r}"
        )
    try:
        agent = factory(store)
    except Exception as exc:  # noqa: BLE001 — the factory's failure, named
        raise AgentFactoryError(
            spec=spec,
            reason="not-an-agent",
            detail=f"{attr}(store) raised {type(exc).__name__}: {exc}",
        ) from None
    if not isinstance(agent, Agent):
        raise AgentFactoryError(
            spec=spec,
            reason="not-an-agent",
            detail=f"{attr}(store) returned {type(agent).__name__}, not an Agent",
        )
    return agent


# -- rendering ----------------------------------------------------------------


def summary_table(report: WhatIfReport) -> Table:
    """The summary: sessions, decisions, statuses, flips by kind."""
    s = report.summary()
    table = Table(title="what-if summary", title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    rows: list[tuple[str, int]] = [
        ("sessions", s["sessions"]),
        ("decisions", s["decisions"]),
        ("unchanged", s["unchanged"]),
        ("flipped", s["flipped"]),
        *((f"  {kind}", s["flips"][kind]) for kind in FLIPS),
        ("not re-judgeable", s["not_rejudgeable"]),
        ("sessions diverged", s["diverged_sessions"]),
        ("decisions past a divergence", s["not_rejudged"]),
    ]
    for name, count in rows:
        table.add_row(name, str(count))
    return table


def decisions_table(report: WhatIfReport) -> Table:
    """Every decision that flipped or could not be re-judged."""
    table = Table(title="decisions that changed", title_justify="left")
    for column in ("session", "seq", "moment", "call", "was", "now", "flip", "by"):
        table.add_column(column, overflow="fold")
    for s in report.sessions:
        for d in s.decisions:
            if d.status == "unchanged":
                continue
            call = f"{d.tool_name} {d.tool_call_id}" if d.tool_call_id else ""
            flip = d.flip or f"not re-judgeable: {d.reason}"
            if d.diverges:
                flip += " (divergence)"
            by = d.middleware or d.step or ""
            cells = (s.session_id, str(d.seq), d.moment, call, d.was or "")
            table.add_row(*(Text(c) for c in (*cells, d.now or "", flip, by)))
    return table


def render(console: Console, report: WhatIfReport) -> None:
    """The report as a person reads it: changes, divergences, the summary."""
    if report.flipped or any(s.count("not-rejudgeable") for s in report.sessions):
        console.print(decisions_table(report))
    for s in report.diverged:
        d = s.divergence
        assert d is not None
        console.print(
            Text(
                f"session {s.session_id} diverges at seq {d.seq} ({d.moment}, "
                f"{d.flip}): past it the recorded replies no longer apply, so "
                f"{s.not_rejudged} recorded decision(s) were not re-judged"
            )
        )
    console.print(summary_table(report))
