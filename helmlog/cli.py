"""The helmlog command line.

Pattern: one Typer app; each command is one thin function that parses its
         options, calls the library, and prints.
Role:    the face; [project.scripts] helmlog = "helmlog.cli:main".
Emits:   nothing itself; commands record through the agents they run.

Laws: R18 (the command line; demo runs governed scripted sessions with no
server, --sessions N, --store URL, --cluster on a redis-server it
starts itself when no store is given; asks reads the pending-asks index),
R18's mcp-proxy (helmlog/_proxy_cli.py), R22 (recover finishes,
per R7, the unfinished turns the open-turns index names, or one named
session).

Why commands stay thin: the scenario, the stores and the renderers live in
modules a test can call directly; a command only wires them to options, so
replay, verify and tail can join demo as sibling functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import msgspec
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
from rich.table import Table
from rich.text import Text

import helmlog
from helmlog import AskPause, HelmlogError
from helmlog._asks import decide, load_factory, pending_questions
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
from helmlog._record import (
    chain_key_from_env,
    records_json,
    timeline_table,
)
from helmlog._record import (
    tail as follow_facts,
)
from helmlog._record import (
    verify as verify_session,
)
from helmlog._recover import recover_sessions
from helmlog._watch import SINK_HELP, default_consumer, open_sink
from helmlog._watch import watch as run_watch
from helmlog._whatif import (
    load_agent,
    parse_since,
    render,
    sessions_since,
    whatif_store,
)
from helmlog.events import EventStore, StoredEvent, open_event_store
from helmlog.sinks import ExportError, JsonlSink, OtlpExport, export

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


SESSIONS_HELP = "How many independent sessions to run."
STORE_ENV = "HELMLOG_STORE"  # --store's default, where it is not given
CONCURRENCY_HELP = "How many sessions run at once."
STORE_HELP = (
    "Event store URL to record into: memory:// or redis://host:port/db "
    "(default: memory://, or with --cluster a redis-server the demo starts)."
)
JSON_HELP = "Print a machine-readable summary instead of tables."
CLUSTER_HELP = (
    "Run the sessions on a local Ray cluster of session hosts, recording into "
    "--store redis://... or, without --store, a redis-server the demo starts "
    "and stops itself."
)
OTLP_HELP = (
    "Export to an OTLP/HTTP collector: its base URL or its /v1/traces URL "
    "(spans per turn, model call and tool call; decision facts as log records). "
    "Headers, certificates and timeout come from OTEL_EXPORTER_OTLP_*."
)
JSONL_HELP = "Export the recorded events into a JSON-lines file."
DEMO_EXPORT_NOTE = " The sessions are exported from the record once they have run."
SHOWN_IDS = 10
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
            hosts = Cluster.local(url, n_hosts=2, name=f"demo-{uuid.uuid4().hex[:8]}")
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


async def _replay_otlp(records: list[StoredEvent], url: str) -> int:
    """Export one session to a collector; ExportError if it did not take it."""
    with OtlpExport(url) as collector:
        return await export(records, collector.sink, target=url)


def _terminal() -> bool:
    """Whether stdout is a terminal (a person reads it), not a pipe or a file."""
    return sys.stdout.isatty()


SESSION_ARG = "The session id (helmlog demo --store URL prints them)."
READ_STORE_HELP = "Event store URL to read: redis://host:port/db (or memory://)."


T = TypeVar("T")


def _on_store(url: str, use: Callable[[EventStore], Awaitable[T]]) -> T:
    """Open the store at url, run use on it, close it: one event loop."""

    async def go() -> T:
        opened = open_event_store(url)
        try:
            return await use(opened)
        finally:
            await opened.close()

    return asyncio.run(go())


def _fail(err: Console, what: str, exc: BaseException) -> typer.Exit:
    err.print(
        f"[bold red]helmlog {what} failed:[/] {escape(f'{type(exc).__name__}: {exc}')}"
    )
    return typer.Exit(2)


@app.command()
def replay(
    session: Annotated[str, typer.Argument(help=SESSION_ARG)],
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
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
    err = Console(stderr=True)
    try:
        records = _on_store(store, lambda opened: opened.read(session))
    except (HelmlogError, ValueError, OSError) as exc:
        raise _fail(err, "replay", exc) from None
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
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
) -> None:
    """Check a session's hash chain and head; exit 1 naming what broke.

    With $HELMLOG_CHAIN_KEY set, the chain is checked as HMAC-SHA-256.
    A cut tail reads "truncated after seq N (head says M)"; a stream deleted
    while its head remains, "deleted".
    """
    err = Console(stderr=True)
    key = chain_key_from_env()
    try:
        verdict = _on_store(store, lambda opened: verify_session(opened, session, key))
    except (HelmlogError, ValueError, OSError) as exc:
        raise _fail(err, "verify", exc) from None
    if verdict.count == 0 and verdict.head is None and verdict.broken is None:
        err.print(f"[bold red]no session '{escape(session)}' in {escape(store)}[/]")
        raise typer.Exit(1)
    typer.echo(verdict.text(session))
    if verdict.broken is not None:
        raise typer.Exit(1)


@app.command()
def tail(
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
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
    err = Console(stderr=True)
    try:
        _on_store(
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
        raise _fail(err, "tail", exc) from None


@app.command()
def watch(
    group: Annotated[
        str, typer.Option(help="The consumer group; its members share the facts.")
    ],
    sink: Annotated[str, typer.Option(help=SINK_HELP)],
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
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
    """Deliver decision facts to a sink through a consumer group (R4).

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
        delivered = _on_store(
            store,
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
        raise _fail(err, "watch", exc) from None
    finally:
        close_sink()
    err.print(f"watched {delivered} facts as {escape(name)} of {escape(group)}")


AGENT_HELP = "The agent that paused: module:function taking the store, returning it."


@app.command()
def asks(
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the pauses waiting on a person: session, tool, call, who asks, what."""
    err = Console(stderr=True)
    try:
        found = _on_store(store, pending_questions)
    except (HelmlogError, ValueError, OSError) as exc:
        raise _fail(err, "asks", exc) from None
    if as_json:
        typer.echo(json.dumps([msgspec.to_builtins(q) for q in found]))
        return
    table = Table(
        title=f"{len(found)} pending question(s) in {store}", title_justify="left"
    )
    for column in ("session", "kind", "tool", "call", "asked by", "question"):
        table.add_column(column, overflow="fold")
    for q in found:
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    q.session_id,
                    q.kind,
                    q.tool_name,
                    q.tool_call_id,
                    q.middleware or "(the tool)",
                    q.question,
                )
            )
        )
    Console().print(table)


def _decide(
    session: str,
    store: str,
    agent: str,
    approved: bool,
    by: str | None,
    note: str | None,
    call: str | None,
    auth: str | None,
) -> None:
    import os

    from helmlog._http import AuthConfigError, approver_from_environment

    err = Console(stderr=True)
    verb = "approve" if approved else "decline"
    try:
        # Who decides comes from configuration, never from a free-text flag:
        # --by may only repeat it (issue 11 item 2).
        who = approver_from_environment(os.environ, auth).identity
        if by is not None and by != who:
            raise ValueError(
                f"--by {by!r} is not who this shell is configured as ({who!r})"
            )
        factory = load_factory(agent)
        out = _on_store(
            store,
            lambda opened: decide(
                opened,
                session,
                factory,
                approved=approved,
                by=who,
                note=note,
                call_id=call,
            ),
        )
    except (HelmlogError, AuthConfigError, ValueError, OSError) as exc:
        err.print(f"[bold red]helmlog {verb} failed:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    if isinstance(out, AskPause):
        typer.echo(
            f"paused again: {out.ask.middleware or out.kind} asks: {out.ask.question}"
        )
    else:
        typer.echo(out)


BY_HELP = (
    "Who decides, as configured ($HELMLOG_TOKEN with the auth file, or "
    "$HELMLOG_APPROVER); given, it must match."
)
CALL_HELP = "The paused call's id (default: the session's pending ask)."
DECIDE_AUTH_HELP = "The auth file that $HELMLOG_TOKEN is looked up in ($HELMLOG_AUTH)."


@app.command()
def approve(
    session: Annotated[str, typer.Argument(help=SESSION_ARG)],
    agent: Annotated[str, typer.Option(help=AGENT_HELP)],
    by: Annotated[str | None, typer.Option(help=BY_HELP, show_default=False)] = None,
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
    note: Annotated[str | None, typer.Option(help="Why (recorded).")] = None,
    call: Annotated[
        str | None, typer.Option(help=CALL_HELP, show_default=False)
    ] = None,
    auth: Annotated[
        str | None, typer.Option(help=DECIDE_AUTH_HELP, show_default=False)
    ] = None,
) -> None:
    """Approve a session's pending ask as check_in_approved would; run on.

    The ask must be in the store's pending-asks index; the approver is who
    this shell is configured as.
    """
    _decide(session, store, agent, True, by, note, call, auth)


@app.command()
def decline(
    session: Annotated[str, typer.Argument(help=SESSION_ARG)],
    agent: Annotated[str, typer.Option(help=AGENT_HELP)],
    by: Annotated[str | None, typer.Option(help=BY_HELP, show_default=False)] = None,
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
    note: Annotated[str | None, typer.Option(help="Why (recorded).")] = None,
    call: Annotated[
        str | None, typer.Option(help=CALL_HELP, show_default=False)
    ] = None,
    auth: Annotated[
        str | None, typer.Option(help=DECIDE_AUTH_HELP, show_default=False)
    ] = None,
) -> None:
    """Decline a session's pending ask as check_in_declined would; run on.

    The ask must be in the store's pending-asks index; the decliner is who
    this shell is configured as.
    """
    _decide(session, store, agent, False, by, note, call, auth)


SERVE_AGENT_HELP = (
    "The agent to serve: module:function taking the store, returning the agent "
    "(the current directory is importable)."
)
SERVE_CLUSTER_HELP = (
    "Run the sessions on a Ray cluster's session hosts: a cluster NAME (a local "
    "Ray) or a Ray ADDRESS (host:port) to join; needs --store redis://..."
)
AUTH_HELP = (
    "The auth file (TOML): bearer tokens mapped to identities and roles, and an "
    "optional trusted proxy header (default: $HELMLOG_AUTH). Required."
)
ASK_TIMEOUT_HELP = (
    "Decline, as 'timeout', an ask not answered within this many seconds "
    "(an ask's own timeout_s wins)."
)


@app.command()
def serve(
    agent: Annotated[str, typer.Option(help=SERVE_AGENT_HELP)],
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
    cluster: Annotated[
        str | None, typer.Option(help=SERVE_CLUSTER_HELP, show_default=False)
    ] = None,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8000,
    auth: Annotated[
        str | None, typer.Option(help=AUTH_HELP, show_default=False)
    ] = None,
    ask_timeout: Annotated[
        float | None, typer.Option(help=ASK_TIMEOUT_HELP, show_default=False)
    ] = None,
) -> None:
    """Serve the HTTP API and the approvals page (issue 11).

    Sessions, their snapshots and facts (SSE), the pending asks and their
    decisions; the approver is whoever authenticated, never a field.
    """
    import os

    from helmlog._http import AuthConfigError, Authenticator, ServeConfig
    from helmlog._http import serve as run_server

    err = Console(stderr=True)
    path = auth or os.environ.get("HELMLOG_AUTH")
    if not path:
        typer.echo(
            "helmlog serve needs --auth FILE (or $HELMLOG_AUTH): with no one "
            "authorized, nothing would be served",
            err=True,
        )
        raise typer.Exit(2)
    try:
        authenticator = Authenticator.from_file(path)
        factory = load_factory(agent)
    except (AuthConfigError, ValueError) as exc:
        raise _fail(err, "serve", exc) from None
    config = ServeConfig(
        factory=factory,
        auth=authenticator,
        store_url=store,
        cluster=cluster,
        chain_key=chain_key_from_env(),
        ask_timeout_s=ask_timeout,
    )
    try:
        run_server(config, host, port)
    except KeyboardInterrupt:
        return  # uvicorn re-raises the Ctrl-C it shut down on: a clean stop
    except (HelmlogError, ValueError, OSError) as exc:
        raise _fail(err, "serve", exc) from None


RECOVER_SESSION_ARG = (
    "The session to recover; without it, every session the store's open-turns "
    "index names."
)
RECOVER_AGENT_HELP = (
    "The agent that runs the sessions: module:function taking the store, returning it."
)


@app.command()
def recover(
    agent: Annotated[str, typer.Option(help=RECOVER_AGENT_HELP)],
    session: Annotated[
        str | None, typer.Argument(help=RECOVER_SESSION_ARG, show_default=False)
    ] = None,
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
) -> None:
    """Finish turns a stopped host left unfinished (R7): one session, or all.

    A call recorded as dispatched without a result is not run again (unless
    its tool is idempotent); the model reads that its outcome is unknown, and
    the turn goes on. Exits 1 if any session could not be recovered.
    """
    err = Console(stderr=True)
    try:
        factory = load_factory(agent)
        done = _on_store(
            store, lambda opened: recover_sessions(opened, factory, session)
        )
    except (HelmlogError, ValueError, OSError) as exc:
        raise _fail(err, "recover", exc) from None
    for item in done:
        typer.echo(item.line())
    if session is None:
        finished = sum(d.outcome in ("finished", "paused") for d in done)
        typer.echo(
            f"finished {finished} turn(s) of {len(done)} session(s) "
            "the open-turns index named"
        )
    if any(d.outcome == "failed" for d in done):
        raise typer.Exit(1)


UPSTREAM_HELP = 'The upstream MCP server as a command line ("python server.py").'
UPSTREAM_URL_HELP = "The upstream MCP server's Streamable HTTP URL."
HTTP_HELP = "Serve clients over Streamable HTTP on HOST:PORT (default: stdio)."
POLICY_HELP = (
    "module:attr naming a mapping of McpProxy options, importable from the "
    "current directory."
)
PROXY_STORE_HELP = (
    "Event store URL for the proxy's sessions (governance rows, the audit with "
    "$HELMLOG_AUDIT_SECRET set): memory:// or redis://host:port/db."
)


@app.command("mcp-proxy")
def mcp_proxy(
    upstream: Annotated[str | None, typer.Option(help=UPSTREAM_HELP)] = None,
    upstream_url: Annotated[str | None, typer.Option(help=UPSTREAM_URL_HELP)] = None,
    http: Annotated[str | None, typer.Option(help=HTTP_HELP)] = None,
    policy: Annotated[str | None, typer.Option(help=POLICY_HELP)] = None,
    store: Annotated[
        str | None, typer.Option(help=PROXY_STORE_HELP, envvar=STORE_ENV)
    ] = None,
) -> None:
    """Run the MCP governance proxy in front of an MCP server (section P)."""
    from helmlog._proxy_cli import ProxyCliError, build_proxy, run_proxy

    try:
        proxy = build_proxy(upstream, upstream_url, policy, store)
        asyncio.run(run_proxy(proxy, http, lambda line: typer.echo(line, err=True)))
    except KeyboardInterrupt:
        return
    except (ProxyCliError, HelmlogError, OSError) as exc:
        # One line, never wrapped: a script reads the reason from stderr.
        typer.echo(f"helmlog mcp-proxy failed: {exc}", err=True)
        raise typer.Exit(2) from None


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
    store: Annotated[
        str, typer.Option(help=READ_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
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
        report = _on_store(store, judge)
    except (HelmlogError, ValueError, OSError) as exc:
        raise _fail(err, "whatif", exc) from None
    if as_json:
        typer.echo(json.dumps(report.document(), ensure_ascii=False))
    else:
        render(Console(), report)
    if report.flipped:
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the helmlog script."""
    app()


if __name__ == "__main__":
    main()
