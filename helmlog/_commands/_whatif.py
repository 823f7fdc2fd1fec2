"""``helmlog whatif``: re-judge recorded sessions under a changed agent.

Pattern: one thin command over the runtime's ``whatif_store``: load the agent,
         pick the sessions (named, or ``--all`` since a time), re-judge them
         behind a progress bar on stderr, print a table or one JSON document.
Role:    the face; registers ``whatif`` on the one app.
Emits:   nothing: no model or tool is called, nothing is appended.

Laws: issue 13 (exit 0 when nothing flipped, 1 when a decision flipped, 2 on
bad input), R19 (a stream that does not verify is refused), R18.

Why the exit code says whether anything flipped: a CI job re-judging last
week's sessions under a rule change fails with no parsing of the report.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from helmlog import HelmlogError
from helmlog._record import chain_key_from_env
from helmlog._whatif import load_agent, parse_since, render
from helmlog.events import EventStore
from helmlog.runtime.lowlevel import sessions_since, whatif_store

from ._app import ReadStore, app, fail, on_store, store_or_exit

WHATIF_SESSIONS_ARG = "The sessions to re-judge (or --all)."
WHATIF_AGENT_HELP = (
    "The changed agent: module:function taking the store, returning it. Its "
    "rules judge; its model and tools are never called."
)
WHATIF_ALL_HELP = "Re-judge every session the store holds."
WHATIF_SINCE_HELP = (
    "With --all, only sessions active since TIME: ISO 8601 (UTC unless it "
    "names a zone), a duration ago (90s, 30m, 2h, 7d) or epoch milliseconds."
)
WHATIF_JSON_HELP = "Print the report as one JSON document."


@app.command("whatif")
def whatif_command(
    agent: Annotated[str, typer.Option(help=WHATIF_AGENT_HELP)],
    sessions: Annotated[
        list[str] | None,
        typer.Argument(help=WHATIF_SESSIONS_ARG, metavar="SESSION", show_default=False),
    ] = None,
    store: ReadStore = None,
    all_sessions: Annotated[bool, typer.Option("--all", help=WHATIF_ALL_HELP)] = False,
    since: Annotated[str | None, typer.Option(help=WHATIF_SINCE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help=WHATIF_JSON_HELP)] = False,
) -> None:
    """Re-judge recorded sessions under a changed agent, calling no model or tool.

    Each decision is reported unchanged, flipped (and how) or not re-judgeable,
    with each session's divergence point. Exits 0 when nothing flipped, 1 when
    a decision flipped, 2 on bad input (an unknown session, an agent factory
    that does not import, a tampered stream: refused, never re-judged).
    """
    store = store_or_exit(store, "whatif")
    err = Console(stderr=True)
    if bool(sessions) == all_sessions or (since is not None and not all_sessions):
        err.print("[bold red]helmlog whatif:[/] name SESSION... or --all [--since]")
        raise typer.Exit(2)
    key = chain_key_from_env()

    async def judge(opened: EventStore) -> Any:
        changed = load_agent(agent, opened)
        where = str(getattr(opened, "url", store))
        since_ms = parse_since(since) if since is not None else None
        ids = list(sessions or []) or await sessions_since(opened, since_ms)
        with Progress(
            TextColumn("re-judging"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=as_json,
        ) as bar:
            task = bar.add_task("sessions", total=len(ids))
            return await whatif_store(
                opened,
                ids,
                changed,
                key=key,
                where=where,
                advance=lambda: bar.advance(task),
            )

    try:
        report = on_store(store, judge)
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "whatif", exc) from None
    if as_json:
        typer.echo(json.dumps(report.document(), ensure_ascii=False))
    else:
        render(Console(), report)
    if report.flipped:
        raise typer.Exit(1)
