"""Showing the refund desk: its decision table, its transcript, its summary.

Pattern: renderers over a finished ``DemoSession``: a Rich table of every
         ledger row and window record in stream order, a grid of who said
         what, and the machine-readable summary of a ``DemoRun``.
Role:    the face; ``helmlog demo`` prints these (``--json`` the summary).
Emits:   nothing.

Laws: G80 (the window's records are shown apart, dim, and never as rows:
the window narrows what the model is sent and decides nothing about a
value), G49 (the table shows the rows' reasons, which quote no value).

Why the table follows the stream's order: rows and window records are two
lists in the folded state; the session's timeline says where each happened,
so a reader sees the window engage between the rows it came between.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from helmlog.events import WindowCompacted

from ._run import DemoRun, DemoSession

OUTCOME_STYLE = {"allow": "green", "deny": "bold red", "ask": "bold yellow"}


def decision_table(session: DemoSession) -> Table:
    """What each moment decided, in stream order, one section per turn.

    Ledger rows come from ``last_snapshot().middleware_decisions``; the dim
    ``window`` lines from ``.window_records`` are the window's own records,
    never rows: the window decides nothing about a value, it only narrows
    what the model is sent.
    """
    table = Table(
        title=f"session {session.session_id}",
        caption="dim 'window' lines are the window's own records "
        "(window.compacted), not ledger rows: the window changes only what "
        "the model is sent, and history keeps every message",
        caption_justify="left",
    )
    table.add_column("middleware", no_wrap=True)
    table.add_column("moment", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("changed", no_wrap=True)
    table.add_column("why", overflow="fold", ratio=1)
    rows = iter(session.state.middleware_decisions)
    records = iter(session.state.window_records)
    previous = "input"
    for kind in session.timeline:
        if kind == "row":
            row = next(rows)
            if row.moment == "input" and previous != "input":
                table.add_section()  # a new turn starts with its input rows
            previous = row.moment
            table.add_row(
                row.middleware,
                row.moment,
                Text(row.outcome, style=OUTCOME_STYLE[row.outcome]),
                "yes" if row.changed else "no",
                row.why or "",
            )
        else:
            record = next(records)
            previous = "window"
            table.add_row(
                record.strategy,
                "window",
                "compacted",
                "view",
                _window_why(record),
                style="dim italic",
            )
    return table


def _window_why(record: WindowCompacted) -> str:
    return (
        f"model call {record.iteration} sees {record.turns_after} of "
        f"{record.turns_before} turns; {record.removed_message_count} "
        "messages out of view"
    )


def render_transcript(console: Console, session: DemoSession) -> None:
    """Print who said what, the pause and its approval included."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", style="bold cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    for speaker, text in session.transcript:
        grid.add_row(speaker, text)
    console.print(grid)


def summary(run: DemoRun, store_url: str, elapsed: float) -> dict[str, Any]:
    """The machine-readable result: totals, ids, and the first session's record."""
    first = run.first
    return {
        "sessions": len(run.session_ids),
        "turns": run.turns,
        "rows": run.rows,
        "window_records": run.window_records,
        "elapsed_s": round(elapsed, 4),
        "store": store_url,
        "session_ids": run.session_ids,
        "first_session": {
            "session_id": first.session_id,
            "rows": msgspec.to_builtins(first.state.middleware_decisions),
            "window_records": [
                {field: getattr(record, field) for field in WINDOW_FIELDS}
                for record in first.state.window_records
            ],
            "answer": first.transcript[-1][1],
        },
    }


WINDOW_FIELDS = (
    "strategy",
    "iteration",
    "keep_recent_turns",
    "removed_message_count",
    "turns_before",
    "turns_after",
)
