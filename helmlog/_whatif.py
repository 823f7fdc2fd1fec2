"""What-if from the command line: the changed agent, ``--since``, the tables.

Pattern: load the changed agent by ``module:function`` on the store, parse
         ``--since``, render the runtime's ``WhatIfReport`` as Rich tables;
         the re-judging is ``helmlog.runtime``'s (``whatif``, ``whatif_store``).
Role:    the face; ``helmlog whatif`` uses these.

Laws: issue 13 (a factory that does not import is a typed error), R18
(stores by URL, ``$HELMLOG_CHAIN_KEY``; ``--agent`` imported as every
command's is, the current directory first).
Why ``--agent`` takes the store, as ``approve`` does: the factory that runs
the sessions builds the changed agent that judges them.
"""

from __future__ import annotations

import datetime
import re
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from helmlog._asks import load_factory
from helmlog.events import EventStore
from helmlog.runtime import FLIPS, Agent, AgentFactoryError, WhatIfReport

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

    Imported as every command's ``--agent`` is (``load_factory``: the
    current directory first on ``sys.path``).

    Raises:
        AgentFactoryError: naming what is wrong (``reason``).
    """
    factory = load_factory(spec)
    attr = spec.partition(":")[2]
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
