"""Where each command finds its store: --store or $HELMLOG_STORE (issue 28 item 4).

A command that reads the record, given neither, refuses with one line naming
both ways (exit 2) instead of reading an empty memory store and answering
"0 pending questions". The commands that write (``demo``, ``serve``,
``mcp-proxy``) keep their embedded defaults. Every command is classified here,
so a new one must say which it is.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from helmlog.cli import app

# A command with these arguments gets past its own checks to the store.
READERS: dict[str, list[str]] = {
    "replay": ["replay", "s-1"],
    "verify": ["verify", "s-1"],
    "upgrade-heads": ["upgrade-heads"],
    "tail": ["tail", "--count", "1", "--idle-exit", "0.2"],
    "watch": ["watch", "--group", "g", "--sink", "console", "--idle-exit", "0.2"],
    "asks": ["asks"],
    "approve": ["approve", "s-1", "--agent", "no_such_module:f"],
    "decline": ["decline", "s-1", "--agent", "no_such_module:f"],
    "recover": ["recover", "--agent", "no_such_module:f"],
    "whatif": ["whatif", "s-1", "--agent", "no_such_module:f"],
}
WRITERS = {"demo", "serve", "mcp-proxy"}
REFUSAL = "needs a store: pass --store redis://HOST:PORT/DB or set $HELMLOG_STORE"


def _commands(command: Any = None, prefix: str = "") -> dict[str, Any]:
    """Every runnable command by its words ("replay", "evidence export"),
    walking sub-groups."""
    if command is None:
        command = typer.main.get_command(app)
    if not isinstance(command, typer.core.TyperGroup):
        return {prefix: command}
    found: dict[str, Any] = {}
    for name, sub in command.commands.items():
        found |= _commands(sub, f"{prefix} {name}".strip())
    return found


def _invoke(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, args, env={"HELMLOG_STORE": "", **env})
    return result.exit_code, result.stdout, result.stderr


def test_every_command_is_a_reader_or_a_writer_and_takes_helmlog_store() -> None:
    """Issue 28 item 4: each command's ``--store`` defaults to ``$HELMLOG_STORE``;
    only the commands that write have a default store of their own, so a new
    command that reads cannot silently read an empty memory store."""
    commands = _commands()
    assert set(READERS) | WRITERS <= set(commands)
    for name, command in commands.items():
        stores = [p for p in command.params if p.name == "store"]
        if name in READERS or name in WRITERS:
            assert 1 == len(stores), name
        for store in stores:
            assert "HELMLOG_STORE" == store.envvar, name
            if name not in WRITERS:
                assert store.default is None, name


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_reading_command_with_no_store_refuses_in_one_line(command: str) -> None:
    """Issue 28 item 4: neither ``--store`` nor ``$HELMLOG_STORE``: exit 2 and
    one line naming both, never an answer from an empty memory store."""
    code, out, err = _invoke(READERS[command], {})
    assert (2, "", [f"helmlog {command} {REFUSAL}"]) == (
        code,
        out,
        err.strip().splitlines(),
    )


@pytest.mark.redis
@pytest.mark.parametrize("command", sorted(READERS))
def test_a_reading_command_takes_its_store_from_helmlog_store(
    command: str, redis_url: str
) -> None:
    """Issue 28 item 4: ``$HELMLOG_STORE`` is the store when ``--store`` is not
    given: the command goes on to its own work (an empty Redis database)."""
    code, out, err = _invoke(READERS[command], {"HELMLOG_STORE": redis_url})
    assert REFUSAL not in err
    expected_exit = {
        "replay": 1,  # no session 's-1' in redis://...
        "verify": 1,
        "approve": 1,  # no approver configured in this shell
        "decline": 1,
        "recover": 2,  # the --agent module does not import
        "whatif": 2,
    }.get(command, 0)
    assert expected_exit == code, (out, err)
    if command in ("replay", "verify", "asks"):
        assert redis_url.rsplit("/", 1)[0] in out + err


def test_an_explicit_memory_store_is_still_accepted() -> None:
    """``--store memory://`` is a choice, not a default: it is read (empty)."""
    code, out, _ = _invoke(["asks", "--json", "--store", "memory://"], {})
    assert (0, "[]") == (code, out.strip())
