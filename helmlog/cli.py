"""The helmlog command line.

Pattern: one Typer app (``helmlog._commands``); each command is one thin
         function that parses its options, calls the library, and prints.
Role:    the face; [project.scripts] helmlog = "helmlog.cli:main", and
         ``python -m helmlog.cli`` runs the same app.
Emits:   nothing itself; commands record through the agents they run.

Laws: R18 (the command line), R22 (``recover``), section P (``mcp-proxy``).

Why this module only re-exports: the commands are grouped by what they work
on, one module each, in ``helmlog._commands``; the app is defined once, in
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
