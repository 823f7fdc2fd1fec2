"""The command line's small things a new user trips on (issue 12 item 8).

``--version``; help without RST backticks or ``<bool>``; ``$HELMLOG_STORE``
for ``--store``; ``tail --count`` validated; ``verify`` saying when the chain
key, not an edit, may be why the first hash fails; ``replay --json``
indented on a terminal and one line on a pipe.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import helmlog
from helmlog._commands import _record as record_commands
from helmlog.cli import app

runner = CliRunner()

COMMANDS = sorted(c.name for c in app.registered_commands if c.name) + sorted(
    c.callback.__name__.replace("_", "-")
    for c in app.registered_commands
    if not c.name and c.callback is not None
)


def _demo_session(url: str) -> str:
    result = runner.invoke(app, ["demo", "--store", url, "--json"])
    assert 0 == result.exit_code, result.output
    ids: list[str] = json.loads(result.stdout)["session_ids"]
    return ids[0]


def test_version_prints_the_package_version() -> None:
    """``helmlog --version``."""
    result = runner.invoke(app, ["--version"])
    assert 0 == result.exit_code
    assert f"helmlog {helmlog.__version__}\n" == result.stdout


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_shows_no_rst_backticks_and_no_bool_placeholders(command: str) -> None:
    """Every command's ``--help`` reads as plain text."""
    result = runner.invoke(app, [*command.split(), "--help"])
    assert 0 == result.exit_code, result.output
    assert "``" not in result.stdout
    assert "<bool>" not in result.stdout


def test_helmlog_store_is_the_default_store(redis_url: str) -> None:
    """``$HELMLOG_STORE`` stands in for ``--store``; ``--store`` still wins."""
    sid = _demo_session(redis_url)
    result = runner.invoke(app, ["verify", sid], env={"HELMLOG_STORE": redis_url})
    assert 0 == result.exit_code, result.output
    assert result.stdout.startswith(f"intact: session {sid}")
    other = runner.invoke(
        app,
        ["verify", sid, "--store", "memory://"],
        env={"HELMLOG_STORE": redis_url},
    )
    assert 1 == other.exit_code


@pytest.mark.parametrize("count", ["0", "-3", "many"])
def test_tail_count_is_validated(count: str) -> None:
    """``tail --count`` takes an int of at least 1; anything else is a usage error."""
    result = runner.invoke(app, ["tail", "--count", count])
    assert 2 == result.exit_code
    assert "--count" in result.output


def test_verify_with_a_chain_key_on_a_keyless_stream_says_so(redis_url: str) -> None:
    """A key the writer did not use is named as the likely cause, not an edit."""
    sid = _demo_session(redis_url)
    result = runner.invoke(
        app,
        ["verify", sid, "--store", redis_url],
        env={"HELMLOG_CHAIN_KEY": "not-the-key"},
    )
    assert 1 == result.exit_code
    assert "breaks at seq 1 (hash)" in result.stdout
    assert "written without a chain key" in result.stdout


def test_replay_json_is_indented_on_a_terminal_and_one_line_on_a_pipe(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replay --json``: one JSON document either way, laid out for its reader."""
    sid = _demo_session(redis_url)
    piped = runner.invoke(app, ["replay", sid, "--store", redis_url, "--json"])
    assert 0 == piped.exit_code, piped.output
    assert 1 == len(piped.stdout.strip().splitlines())
    monkeypatch.setattr(record_commands, "_terminal", lambda: True)
    shown = runner.invoke(app, ["replay", sid, "--store", redis_url, "--json"])
    assert 0 == shown.exit_code, shown.output
    assert len(shown.stdout.splitlines()) > 10
    assert json.loads(piped.stdout) == json.loads(shown.stdout)
