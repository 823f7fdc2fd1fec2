"""The commands that read the record: ``replay``, ``verify``, ``tail``, ``watch``.

Pattern: thin commands over ``helmlog._record`` (timeline, fact lines),
         ``helmlog.events``' chain check (``verify_session``) and
         ``helmlog._watch`` (the sink spec); the followers are
         ``helmlog.sinks``' (``follow_facts``, ``FactsConsumer``).
Role:    the face; registers ``replay``, ``verify``, ``tail``, ``watch`` and
         ``upgrade-heads``.
Emits:   nothing to the record; ``replay --jsonl/--otlp``, ``watch`` to a sink.

Laws: R18, R3/R19/R26 (``verify`` names what broke), R6 (replayed), R4
(``watch`` acknowledges after its sink took it), G49 (facts, never values).

Why together: none runs an agent; each fails the same way (exit 1 for a
missing session, 2 for a store or input it cannot use).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from helmlog import HelmlogError
from helmlog._record import chain_key_from_env, records_json, timeline_table
from helmlog._record import tail as follow_facts
from helmlog._watch import SINK_HELP, default_consumer, open_sink
from helmlog._watch import watch as run_watch
from helmlog.events import EventStore, StoredEvent, verify_session
from helmlog.events import upgrade_heads as upgrade_session_heads
from helmlog.sinks import ExportError, JsonlSink, OtlpExport, export

from ._app import OTLP_HELP, SESSION_ARG, ReadStore, app, fail, on_store, store_or_exit


async def _replay_otlp(records: list[StoredEvent], url: str) -> int:
    """Export one session to a collector; ExportError if it did not take it."""
    with OtlpExport(url) as collector:
        return await export(records, collector.sink, target=url)


def _terminal() -> bool:
    """Whether stdout is a terminal (a person reads it), not a pipe or a file."""
    return sys.stdout.isatty()


@app.command()
def replay(
    session: Annotated[str, typer.Argument(help=SESSION_ARG)],
    store: ReadStore = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the events as JSON.")
    ] = False,
    jsonl: Annotated[
        str | None, typer.Option(help="Re-emit the session into a JSON-lines file.")
    ] = None,
    otlp: Annotated[
        str | None,
        typer.Option(help="Re-emit the session to a collector. " + OTLP_HELP),
    ] = None,
) -> None:
    """Print a session as a timeline: turns, messages, tool calls, decisions."""
    store = store_or_exit(store, "replay")
    err = Console(stderr=True)
    try:
        records = on_store(store, lambda opened: opened.read(session))
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "replay", exc) from None
    if not records:
        err.print(f"[bold red]no session '{escape(session)}' in {escape(store)}[/]")
        raise typer.Exit(1)
    try:
        if jsonl:
            count = asyncio.run(export(records, JsonlSink(jsonl), target=jsonl))
            err.print(f"replayed {count} events into {escape(jsonl)}")
        if otlp:
            count = asyncio.run(_replay_otlp(records, otlp))
            err.print(f"replayed {count} events to {escape(otlp)}")
    except (ExportError, ValueError, OSError) as exc:
        # One line, never wrapped: a script reads the reason from stderr.
        typer.echo(f"helmlog replay failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        # Indented for a person at a terminal; one line for a pipe or a file.
        indent = 2 if _terminal() else None
        typer.echo(json.dumps(records_json(records), ensure_ascii=False, indent=indent))
    elif not (jsonl or otlp):
        Console().print(timeline_table(session, records))


@app.command()
def verify(
    session: Annotated[str, typer.Argument(help=SESSION_ARG)],
    store: ReadStore = None,
) -> None:
    """Check a session's hash chain and head; exit 1 naming what broke.

    With $HELMLOG_CHAIN_KEY set, the chain is checked as HMAC-SHA-256.
    A cut tail reads "truncated after seq N (head says M)"; a stream deleted
    while its head remains, "deleted"; a stream without its head on a store
    that writes heads, "its head record is missing".
    """
    store = store_or_exit(store, "verify")
    err = Console(stderr=True)
    key = chain_key_from_env()
    try:
        verdict = on_store(store, lambda opened: verify_session(opened, session, key))
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "verify", exc) from None
    if verdict.count == 0 and verdict.head is None and verdict.broken is None:
        err.print(f"[bold red]no session '{escape(session)}' in {escape(store)}[/]")
        raise typer.Exit(1)
    typer.echo(verdict.text(session))
    if verdict.broken is not None:
        raise typer.Exit(1)


@app.command("upgrade-heads")
def upgrade_heads(
    sessions: Annotated[
        list[str] | None,
        typer.Argument(help="Sessions to upgrade (default: every one stored)."),
    ] = None,
    store: ReadStore = None,
) -> None:
    """Give streams written before head records their heads; exit 1 if one fails.

    The explicit upgrade: on a store that writes head records a stream
    without one is refused, so an older stream is verified by its chain
    (keyed by $HELMLOG_CHAIN_KEY) and given its head here, never silently.
    """
    store = store_or_exit(store, "upgrade-heads")
    err = Console(stderr=True)
    key = chain_key_from_env()

    async def go(opened: EventStore) -> list[tuple[str, bool, str]]:
        opened.chain_key = key
        return await upgrade_session_heads(opened, sessions or None)

    try:
        outcome = on_store(store, go)
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "upgrade-heads", exc) from None
    for _sid, _ok, line in outcome:
        typer.echo(line)
    if not all(ok for _sid, ok, _line in outcome):
        raise typer.Exit(1)


@app.command()
def tail(
    store: ReadStore = None,
    from_start: Annotated[
        bool, typer.Option("--from-start", help="Show facts already published.")
    ] = False,
    count: Annotated[
        int | None, typer.Option(help="Stop after this many facts (1 or more).", min=1)
    ] = None,
    idle_exit: Annotated[
        float | None, typer.Option(help="Stop after this many idle seconds.", min=0)
    ] = None,
) -> None:
    """Follow middleware.decision facts live (facts only, never values)."""
    store = store_or_exit(store, "tail")
    err = Console(stderr=True)
    try:
        on_store(
            store,
            lambda opened: follow_facts(
                opened,
                typer.echo,
                from_start=from_start,
                count=count,
                idle_exit_s=idle_exit,
            ),
        )
    except KeyboardInterrupt:
        return
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "tail", exc) from None


@app.command()
def watch(
    group: Annotated[
        str, typer.Option(help="The consumer group; its members share the facts.")
    ],
    sink: Annotated[str, typer.Option(help=SINK_HELP)],
    store: ReadStore = None,
    consumer: Annotated[
        str | None,
        typer.Option(
            help="This consumer's name (default: the host name); a "
            "restart under it resumes its unacknowledged facts."
        ),
    ] = None,
    from_start: Annotated[
        bool,
        typer.Option(
            "--from-start/--from-now",
            help="Where a new group starts: the oldest retained fact, or the next.",
        ),
    ] = True,
    claim_idle: Annotated[
        int,
        typer.Option(help="Claim facts another consumer left pending this many ms."),
    ] = 30_000,
    count: Annotated[
        int | None, typer.Option(help="Stop after this many facts (1 or more).", min=1)
    ] = None,
    idle_exit: Annotated[
        float | None, typer.Option(help="Stop after this many idle seconds.", min=0)
    ] = None,
) -> None:
    """Deliver decision facts to a sink through a consumer group.

    Each fact is acknowledged only after the sink took it; a watcher that
    dies leaves it pending, for its restart or another consumer to deliver.
    """
    err = Console(stderr=True)
    try:
        opened_sink, close_sink = open_sink(sink)
    except HelmlogError as exc:
        # One line, never wrapped: a script reads it.
        typer.echo(f"helmlog watch failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(2) from None
    name = consumer or default_consumer()
    try:
        # After the sink: a sink that cannot be opened is named first.
        url = store_or_exit(store, "watch")
        delivered = on_store(
            url,
            lambda opened: run_watch(
                opened,
                group=group,
                consumer=name,
                sink=opened_sink,
                from_start=from_start,
                claim_idle_ms=claim_idle,
                count=count,
                idle_exit_s=idle_exit,
            ),
        )
    except KeyboardInterrupt:
        return
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "watch", exc) from None
    finally:
        close_sink()
    err.print(f"watched {delivered} facts as {escape(name)} of {escape(group)}")
