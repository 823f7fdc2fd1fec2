"""The ``helmlog`` command line.

Pattern: one Typer app; each command is one thin function that parses its
         options, calls the library, and prints.
Role:    the face; ``[project.scripts] helmlog = "helmlog.cli:main"``.
Emits:   nothing itself; commands record through the agents they run.

Laws: R18 (the command line; ``demo`` runs governed scripted sessions with no
server, ``--sessions N``, ``--store URL``).

Why commands stay thin: the scenario, the stores and the renderers live in
modules a test can call directly; a command only wires them to options, so
``replay``, ``verify`` and ``tail`` can join ``demo`` as sibling functions.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from helmlog import HelmlogError
from helmlog._demo import (
    DemoError,
    DemoSession,
    decision_table,
    render_transcript,
    run_sessions,
    summary,
)
from helmlog.events import open_event_store

app = typer.Typer(
    name="helmlog",
    help="helmlog: an event-sourced runtime for governed LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """helmlog: an event-sourced runtime for governed LLM agents."""


SESSIONS_HELP = "How many independent sessions to run concurrently."
STORE_HELP = "Event store URL to record into: memory:// or redis://host:port/db."
JSON_HELP = "Print a machine-readable summary instead of tables."


@app.command()
def demo(
    sessions: Annotated[int, typer.Option(min=1, help=SESSIONS_HELP)] = 1,
    store: Annotated[str, typer.Option(help=STORE_HELP)] = "memory://",
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Run the governed refund-desk scenario on a scripted model (no network)."""
    out = Console()
    err = Console(stderr=True)
    try:
        run = _run_demo(sessions, store, err, progress=not as_json)
        finished, elapsed, where = asyncio.run(run)
    except (HelmlogError, DemoError, ValueError, OSError) as exc:
        reason = escape(f"{type(exc).__name__}: {exc}")
        err.print(f"[bold red]helmlog demo failed:[/] {reason}")
        raise typer.Exit(1) from None
    report = summary(finished, where, elapsed)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    first = finished[0]
    render_transcript(out, first)
    out.print(decision_table(first))
    if sessions > 1:
        out.print(f"(the table shows the first of {sessions} sessions)")
    out.print(
        f"recorded in {where}: " + ", ".join(report["session_ids"]), highlight=False
    )
    out.print(
        f"sessions: {report['sessions']}  turns: {report['turns']}  "
        f"rows: {report['rows']}  elapsed: {elapsed:.2f}s",
        highlight=False,
    )


async def _run_demo(
    count: int, url: str, err: Console, *, progress: bool
) -> tuple[list[DemoSession], float, str]:
    """Run the sessions; return them, the time taken and where they were
    recorded (the store's own URL, which a Redis store keeps free of
    credentials)."""
    store = open_event_store(url)
    where = str(getattr(store, "url", url))
    started = time.perf_counter()
    try:
        with Progress(
            TextColumn("sessions"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            transient=True,
            disable=not progress,
        ) as bar:
            task = bar.add_task("sessions", total=count)
            finished = await run_sessions(count, store, lambda _: bar.advance(task))
    finally:
        await store.close()
    return finished, time.perf_counter() - started, where


def main() -> None:
    """Entry point of the ``helmlog`` script."""
    app()


if __name__ == "__main__":
    main()
