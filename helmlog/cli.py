"""The helmlog command line.

Pattern: one Typer app (``helmlog._commands``); each command is one thin
         function that parses its options, calls the library, and prints.
Role:    the face; [project.scripts] helmlog = "helmlog.cli:main", and
         ``python -m helmlog.cli`` runs the same app.
Emits:   nothing itself; commands record through the agents they run.

Commands, by module of ``helmlog/_commands/``: ``demo`` (``_demo``);
``replay``, ``verify``, ``tail``, ``watch`` (``_record``); ``asks``,
``approve``, ``decline`` (``_approvals``); ``serve``, ``recover``,
``mcp-proxy`` (``_serving``); ``whatif`` (``_whatif``).

Laws: R18 (the command line; demo runs governed scripted sessions with no
server, --sessions N, --store URL, --cluster on a redis-server it
starts itself when no store is given; asks reads the pending-asks index),
R18's mcp-proxy (helmlog/_proxy_cli.py), R22 (recover finishes,
per R7, the unfinished turns the open-turns index names, or one named
session).

Why this module only re-exports: the commands are grouped by what they work
on, one module each, so a newcomer changing ``verify`` reads the record's
commands and nothing else; the app they register on is defined once, in
``helmlog._commands._app``, because this file also runs as ``__main__``.
"""

from __future__ import annotations

from helmlog._commands import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the helmlog script."""
    app()


if __name__ == "__main__":
    main()
