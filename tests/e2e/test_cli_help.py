"""Help texts speak to the operator, not to the project (issue 28 item 4).

Every command's ``--help`` (and the app's) is walked; none may cite an issue
(``issue 11``), a law id (``R4``, ``G59``, ``S10``, ``P14``, ``H1``) or a
section of the laws (``section P``): those are the project's index, not an
operator's words.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from helmlog.cli import app

INTERNAL = re.compile(r"(?i:\bissues? \d+)|\b[GRSPH]\d{1,3}\b|\bsection [GRSPH]\b")


def _command_names(command: Any = None, prefix: str = "") -> list[str]:
    """Every command and group by its words ("demo", "evidence export")."""
    if command is None:
        command = typer.main.get_command(app)
    if not isinstance(command, typer.core.TyperGroup):
        return [prefix]
    names = [prefix] if prefix else []
    for name, sub in sorted(command.commands.items()):
        names += _command_names(sub, f"{prefix} {name}".strip())
    return names


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert 0 == result.exit_code, result.output
    return result.output


def test_there_are_commands_to_walk() -> None:
    """The walk below covers every registered command (not an empty list)."""
    assert {"demo", "serve", "asks", "whatif", "mcp-proxy"} <= set(_command_names())


@pytest.mark.parametrize("command", ["", *_command_names()])
def test_help_names_no_issue_or_law_id(command: str) -> None:
    """Issue 28 item 4: ``helmlog [COMMAND] --help`` cites no internal id."""
    text = _help(*command.split())
    assert [] == INTERNAL.findall(text)
