"""Every ``module:attr`` option is imported one way: the current directory first
(issue 28 item 4).

The ``helmlog`` console script (not ``python -m``, which puts the current
directory on the path by itself) runs in a directory holding the agent
module; ``PYTHONPATH`` names only the repository (for the test helpers the
module re-exports), never that directory. ``whatif`` used to fail there with
"No module named 'stricter'" where ``approve``, ``serve`` and ``recover``
imported it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helmlog.events import open_event_store
from tests.polling import until_sync
from tests.unit.runtime.whatif_agents import record

REPO = Path(__file__).resolve().parents[2]
HELMLOG = Path(sys.executable).parent / "helmlog"

STRICTER = """
from pathlib import Path

from tests.unit.runtime.whatif_agents import same, tight as stricter_desk

Path("imported").write_text(__name__)  # where the command ran from
POLICY = {}
"""
AUTH = """
[[tokens]]
identity = "app"
roles = ["session"]
token = "t-app"
"""


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HELMLOG_") and k != "PYTHONPATH"
    }
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _dir(tmp_path: Path) -> Path:
    (tmp_path / "stricter.py").write_text(STRICTER)
    (tmp_path / "auth.toml").write_text(AUTH)
    return tmp_path


async def _record(url: str, *amounts: float) -> list[str]:
    store = open_event_store(url)
    try:
        return [await record(store, (a,)) for a in amounts]
    finally:
        await store.close()


@pytest.mark.redis
def test_whatif_imports_its_agent_from_the_current_directory(
    tmp_path: Path, redis_url: str
) -> None:
    """Issue 28 item 4: ``helmlog whatif --agent stricter:stricter_desk`` run
    beside ``stricter.py`` re-judges with it: a tightened ceiling flips one
    of two recorded sessions (exit 1)."""
    asyncio.run(_record(redis_url, 100, 400))
    done = subprocess.run(
        [str(HELMLOG), "whatif", "--all", "--json", "--agent",
         "stricter:stricter_desk"],
        cwd=_dir(tmp_path),
        env=_env(HELMLOG_STORE=redis_url),
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert 1 == done.returncode, done.stderr
    doc = json.loads(done.stdout)
    assert (2, 1) == (doc["whatif"]["sessions"], doc["whatif"]["flipped"])


# Each command with an option naming stricter.py, and what ends it here.
COMMANDS = {
    "approve": ["approve", "s-1", "--agent", "stricter:same", "--store", "memory://"],
    "decline": ["decline", "s-1", "--agent", "stricter:same", "--store", "memory://"],
    "recover": ["recover", "--agent", "stricter:same", "--store", "memory://"],
    "whatif": ["whatif", "--all", "--agent", "stricter:same", "--store", "memory://"],
    "serve": ["serve", "--agent", "stricter:same", "--auth", "auth.toml",
              "--port", "0"],
    "mcp-proxy": ["mcp-proxy", "--policy", "stricter:POLICY", "--upstream",
                  f"{sys.executable} -c pass"],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_imports_module_attr_from_the_current_directory(
    command: str, tmp_path: Path
) -> None:
    """Issue 28 item 4: approve, decline, recover, whatif, serve and
    mcp-proxy's --policy each import ``stricter`` from the directory they run
    in, through the console script, with no "cannot import"."""
    cwd = _dir(tmp_path)
    proc = subprocess.Popen(
        [str(HELMLOG), *COMMANDS[command]],
        cwd=cwd,
        env=_env(HELMLOG_APPROVER="dana@ops"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    marker = cwd / "imported"

    def done() -> bool:
        if proc.poll() is not None:
            return True
        # Only serve runs on: it is interrupted once the import is complete.
        return command == "serve" and marker.exists() and marker.read_text() != ""

    try:
        until_sync(f"helmlog {command} imported stricter or exited", done, 90)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # serve runs until interrupted
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert "cannot import" not in err.decode()
    assert "stricter" == marker.read_text()
