"""The commands a person answers pauses with: ``asks``, ``approve``, ``decline``.

Pattern: thin commands over ``helmlog._asks``; who decides comes from the
         shell's configuration (``helmlog.gateway.http``'s
         ``approver_from_environment``).
Role:    the face; registers ``asks``, ``approve`` and ``decline``.
Emits:   nothing itself; the resumed agent records the decision and the run.

Laws: R18 (``asks`` reads the pending-asks index), G59–G62, issue 11 item 2
(the decider is who the shell is configured as; ``--by`` may only repeat it).

Why the identity is never a free-text flag: a decision is an audited fact,
so its ``by`` is what the operator configured, not what a caller typed.
"""

from __future__ import annotations

import json
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from helmlog import AskPause, HelmlogError
from helmlog._asks import decide, load_factory, pending_questions

from ._app import SESSION_ARG, ReadStore, app, fail, on_store, store_or_exit

AGENT_HELP = "The agent that paused: module:function taking the store, returning it."


@app.command()
def asks(
    store: ReadStore = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the pauses waiting on a person: session, tool, call, who asks, what."""
    store = store_or_exit(store, "asks")
    err = Console(stderr=True)
    try:
        found = on_store(store, pending_questions)
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "asks", exc) from None
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

    from helmlog.gateway.http import AuthConfigError, approver_from_environment

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
        out = on_store(
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
# approve and decline take the same arguments: declared once.
DecideSession = Annotated[str, typer.Argument(help=SESSION_ARG)]
DecideAgent = Annotated[str, typer.Option(help=AGENT_HELP)]
DecideBy = Annotated[str | None, typer.Option(help=BY_HELP, show_default=False)]
DecideNote = Annotated[str | None, typer.Option(help="Why (recorded).")]
DecideCall = Annotated[str | None, typer.Option(help=CALL_HELP, show_default=False)]
DecideAuth = Annotated[
    str | None, typer.Option(help=DECIDE_AUTH_HELP, show_default=False)
]


@app.command()
def approve(
    session: DecideSession,
    agent: DecideAgent,
    by: DecideBy = None,
    store: ReadStore = None,
    note: DecideNote = None,
    call: DecideCall = None,
    auth: DecideAuth = None,
) -> None:
    """Approve a session's pending ask as check_in_approved would; run on.

    The ask must be in the store's pending-asks index; the approver is who
    this shell is configured as.
    """
    store = store_or_exit(store, "approve")
    _decide(session, store, agent, True, by, note, call, auth)


@app.command()
def decline(
    session: DecideSession,
    agent: DecideAgent,
    by: DecideBy = None,
    store: ReadStore = None,
    note: DecideNote = None,
    call: DecideCall = None,
    auth: DecideAuth = None,
) -> None:
    """Decline a session's pending ask as check_in_declined would; run on.

    The ask must be in the store's pending-asks index; the decliner is who
    this shell is configured as.
    """
    store = store_or_exit(store, "decline")
    _decide(session, store, agent, False, by, note, call, auth)
