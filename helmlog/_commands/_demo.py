"""``helmlog demo``: the refund desk, run as N governed scripted sessions.

Pattern: one thin command over ``helmlog._demo``: pick the store, run the
         sessions behind a progress bar, export the record if asked, print.
Role:    the face; registers ``demo`` on the one app.
Emits:   nothing itself; the sessions record through the agents they run.

Laws: R18 (no server needed; ``--sessions N``, ``--store URL``,
``--cluster`` on a redis-server it starts itself; ``--otlp``/``--jsonl``);
issue 28 (it says Ray is starting, and when its ids end with it).

Why the export runs before the store closes: a memory store's record ends
with it, so the sessions are exported inside the loop that ran them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from helmlog import HelmlogError
from helmlog._demo import (
    DEFAULT_CONCURRENCY,
    DemoError,
    DemoRun,
    decision_table,
    render_transcript,
    run_sessions,
    summary,
)
from helmlog._embedded import RedisServerMissingError, embedded_redis
from helmlog.events import EventStore, open_event_store
from helmlog.sinks import ExportError, JsonlSink, OtlpExport, export

from ._app import OTLP_HELP, STORE_ENV, app

SESSIONS_HELP = "How many independent sessions to run."
CONCURRENCY_HELP = "How many sessions run at once."
STORE_HELP = (
    "Event store URL to record into: memory:// or redis://host:port/db "
    "(default: memory://, or with --cluster a redis-server the demo starts)."
)
JSON_HELP = "Print a machine-readable summary instead of tables."
CLUSTER_HELP = (
    "Run the sessions on a local Ray cluster of session hosts, recording into "
    "--store redis://... or, without --store, a redis-server the demo starts "
    "and stops itself (its sessions are gone when the demo exits)."
)
JSONL_HELP = "Export the recorded events into a JSON-lines file."
DEMO_EXPORT_NOTE = " The sessions are exported from the record once they have run."
SHOWN_IDS = 10
DEMO_HOSTS = 2
KEEP_THEM = (
    "cannot be read back (replay, verify, whatif); run it with "
    "--store redis://HOST:PORT/DB to keep them"
)
EMBEDDED_NOTE = (
    f"note: the embedded redis-server stopped with the demo, so these session ids "
    f"{KEEP_THEM}"
)
MEMORY_NOTE = f"note: memory:// ended with the demo, so these session ids {KEEP_THEM}"
# Events delivered between flushes of a many-session OTLP export, so the
# exporters' bounded queues (2,048 spans, 2,048 records) never drop any.
FLUSH_EVERY = 1_000


@app.command()
def demo(
    sessions: Annotated[int, typer.Option(min=1, help=SESSIONS_HELP)] = 1,
    store: Annotated[
        str | None, typer.Option(help=STORE_HELP, envvar=STORE_ENV)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    cluster: Annotated[bool, typer.Option("--cluster", help=CLUSTER_HELP)] = False,
    concurrency: Annotated[
        int, typer.Option(min=1, help=CONCURRENCY_HELP)
    ] = DEFAULT_CONCURRENCY,
    otlp: Annotated[str | None, typer.Option(help=OTLP_HELP + DEMO_EXPORT_NOTE)] = None,
    jsonl: Annotated[
        str | None, typer.Option(help=JSONL_HELP + DEMO_EXPORT_NOTE)
    ] = None,
) -> None:
    """Run the governed refund-desk scenario on a scripted model (no network)."""
    out = Console()
    err = Console(stderr=True)
    embedded = cluster and store is None
    try:
        with contextlib.ExitStack() as stack:
            # The embedded server stops when this block exits: after the last
            # append and the hosts' shutdown, on an answer, an error or Ctrl-C.
            url = store
            if url is None:
                url = stack.enter_context(embedded_redis()) if embedded else "memory://"
            run = _run_demo(
                sessions,
                url,
                err,
                progress=not as_json,
                cluster=cluster,
                concurrency=concurrency,
                otlp=otlp,
                jsonl=jsonl,
            )
            finished, elapsed, recorded = asyncio.run(run)
    except ExportError as exc:
        typer.echo(f"helmlog demo failed: {exc}", err=True)  # one line
        raise typer.Exit(1) from None
    except RedisServerMissingError as exc:
        typer.echo(str(exc), err=True)  # one line, never wrapped
        raise typer.Exit(1) from None
    except (HelmlogError, DemoError, ValueError, OSError, ImportError) as exc:
        reason = escape(f"{type(exc).__name__}: {exc}")
        err.print(f"[bold red]helmlog demo failed:[/] {reason}")
        raise typer.Exit(1) from None
    where = (
        f"an embedded redis-server ({recorded}, stopped at exit)"
        if embedded
        else recorded
    )
    report = summary(finished, where, elapsed)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        say_ids_are_gone(err, embedded=embedded, recorded=recorded)
        return
    first = finished.first
    render_transcript(out, first)
    out.print(decision_table(first))
    if sessions > 1:
        out.print(f"(the table shows the first of {sessions} sessions)")
    ids = report["session_ids"]
    shown = ", ".join(ids[:SHOWN_IDS])
    if len(ids) > SHOWN_IDS:
        shown += f", ... ({len(ids) - SHOWN_IDS} more; --json lists them all)"
    out.print(f"recorded in {where}: {shown}", highlight=False, soft_wrap=True)
    out.print(
        f"sessions: {report['sessions']}  turns: {report['turns']}  "
        f"rows: {report['rows']}  elapsed: {elapsed:.2f}s",
        highlight=False,
    )
    say_ids_are_gone(err, embedded=embedded, recorded=recorded)


def say_starting_ray(err: Console, hosts: int = DEMO_HOSTS) -> None:
    """Say, before the wait, that Ray is starting: the first start of a local
    cluster takes 5 to 40 seconds, with nothing else on the screen."""
    err.print(
        f"starting Ray: a local cluster of {hosts} session hosts "
        "(5-40 s the first time) ...",
        highlight=False,
        soft_wrap=True,
    )


def say_ids_are_gone(err: Console, *, embedded: bool, recorded: str) -> None:
    """Where the store ended with the demo (its embedded redis-server, or
    memory://), say so: the session ids printed point into nothing."""
    if embedded:
        err.print(EMBEDDED_NOTE, highlight=False, soft_wrap=True)
    elif recorded.startswith("memory://"):
        err.print(MEMORY_NOTE, highlight=False, soft_wrap=True)


async def _run_demo(
    count: int,
    url: str,
    err: Console,
    *,
    progress: bool,
    cluster: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    otlp: str | None = None,
    jsonl: str | None = None,
) -> tuple[DemoRun, float, str]:
    """Run the sessions; return them, the time taken and where they were
    recorded (the store's own URL, which a Redis store keeps free of
    credentials). The progress bar goes to stderr, never into --json.
    With otlp/jsonl the recorded sessions are exported before the
    store closes (a memory store's record ends with it)."""
    store = open_event_store(url)
    where = str(getattr(store, "url", url))
    hosts = None
    started = time.perf_counter()
    try:
        if cluster:
            from helmlog._demo import demo_agent
            from helmlog.actors import Cluster

            # Hosts of its own, named for this run and stopped at its end: a
            # cluster name serves one agent factory on one store.
            say_starting_ray(err)
            hosts = Cluster.local(
                url, n_hosts=DEMO_HOSTS, name=f"demo-{uuid.uuid4().hex[:8]}"
            )
        with Progress(
            TextColumn("sessions"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not progress,
        ) as bar:
            task = bar.add_task("sessions", total=count)
            finished = await run_sessions(
                count,
                store,
                lambda _: bar.advance(task),
                cluster_agent=None if hosts is None else hosts.agent(demo_agent),
                concurrency=concurrency,
            )
        if jsonl:
            await _export_jsonl(store, finished.session_ids, jsonl)
        if otlp:
            await _export_otlp(store, finished.session_ids, otlp)
    finally:
        await store.close()
        if hosts is not None:
            await hosts.shutdown(hosts=True)
    return finished, time.perf_counter() - started, where


async def _export_jsonl(store: EventStore, session_ids: list[str], path: str) -> int:
    """Export each session's record into one JSON-lines file; ExportError
    (or OSError for a path that cannot be opened) when it fails."""
    sink = JsonlSink(path)
    return sum(
        [await export(await store.read(s), sink, target=path) for s in session_ids]
    )


async def _export_otlp(store: EventStore, session_ids: list[str], url: str) -> int:
    """Export each session's record to a collector, flushing as it goes;
    ExportError as soon as a batch fails."""
    with OtlpExport(url) as collector:
        count = since_flush = 0
        for sid in session_ids:
            delivered = await export(await store.read(sid), collector.sink, target=url)
            count += delivered
            since_flush += delivered
            if since_flush >= FLUSH_EVERY:
                collector.flush()
                since_flush = 0
    return count
