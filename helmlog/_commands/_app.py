"""The one Typer app every ``helmlog`` command registers on, and its wiring.

Pattern: one ``typer.Typer``; command modules decorate their functions with
         ``@app.command()``; what several share (the store option, opening a
         store for one command, the failure line) lives here.
Role:    the face; ``helmlog.cli`` imports ``app`` from this package.
Emits:   nothing.

Laws: R18 (one app; every ``--store`` defaults to ``$HELMLOG_STORE``, and a
command that reads the record refuses with neither: ``store_or_exit``).

Why not in ``helmlog/cli.py``: ``python -m helmlog.cli`` runs that file as
``__main__``, so a command importing ``helmlog.cli`` would register on a
second copy of the app that nobody runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

import helmlog
from helmlog.events import EventStore, open_event_store

app = typer.Typer(
    name="helmlog",
    help="helmlog: an event-sourced runtime for governed LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: Typer's rich panels print <bool> beside flags.
    rich_markup_mode=None,
)


def _version(show: bool) -> None:
    if show:
        typer.echo(f"helmlog {helmlog.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """helmlog: an event-sourced runtime for governed LLM agents."""


STORE_ENV = "HELMLOG_STORE"  # --store's default, where it is not given
SESSION_ARG = "The session id (helmlog demo --store URL prints them)."
READ_STORE_HELP = (
    "Event store URL to read: redis://host:port/db (or memory://). "
    "Default: $HELMLOG_STORE; one of the two is needed."
)
OTLP_HELP = (
    "Export to an OTLP/HTTP collector: its base URL or its /v1/traces URL "
    "(spans per turn, model call and tool call; decision facts as log records). "
    "Headers, certificates and timeout come from OTEL_EXPORTER_OTLP_*."
)

ReadStore = Annotated[
    str | None,
    typer.Option(
        help=READ_STORE_HELP, envvar=STORE_ENV, show_default=False, metavar="URL"
    ),
]
"""The ``--store`` of a command that reads the record (``store_or_exit``)."""

T = TypeVar("T")


def store_or_exit(store: str | None, command: str) -> str:
    """The store a command that reads the record works on: ``--store`` or
    ``$HELMLOG_STORE``; with neither, one line on stderr and exit 2.

    An empty memory store would answer every read with nothing (an inbox
    silently empty, a session "not found"): that is refused, not guessed.
    """
    if store:
        return store
    typer.echo(
        f"helmlog {command} needs a store: pass --store redis://HOST:PORT/DB "
        f"or set ${STORE_ENV}",
        err=True,
    )
    raise typer.Exit(2)


def on_store(url: str, use: Callable[[EventStore], Awaitable[T]]) -> T:
    """Open the store at url, run use on it, close it: one event loop."""

    async def go() -> T:
        opened = open_event_store(url)
        try:
            return await use(opened)
        finally:
            await opened.close()

    return asyncio.run(go())


def fail(err: Console, what: str, exc: BaseException) -> typer.Exit:
    """Print "helmlog WHAT failed: Type: reason" to err; the exit (2) to raise."""
    err.print(
        f"[bold red]helmlog {what} failed:[/] {escape(f'{type(exc).__name__}: {exc}')}"
    )
    return typer.Exit(2)
