"""``helmlog serve`` from the shell (issue 11 items 1, 2).

It refuses to start without an auth file (fail closed), and started in a
directory holding the agent module, it imports ``--agent desk:desk`` from
there (no ``PYTHONPATH``), serves the API and stops on SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner

from helmlog.cli import app
from tests.fixtures_redis import free_port
from tests.polling import until_sync

pytestmark = [pytest.mark.redis, pytest.mark.slow]

DESK = """
from helmlog import Agent
from helmlog.runtime.providers import scripted


def desk(store):
    model = scripted(reply="Hello.")
    return Agent.create(provider=model, model="m", store=store).build()
"""
AUTH = """
[[tokens]]
identity = "app"
roles = ["session"]
token = "t-app"
"""


def test_serve_refuses_to_start_without_an_auth_file() -> None:
    """No one authorized, nothing served: exit 2 naming --auth."""
    result = CliRunner().invoke(
        app, ["serve", "--agent", "x:y"], env={"HELMLOG_AUTH": ""}
    )
    assert 2 == result.exit_code
    assert "--auth" in result.output


def test_serve_imports_the_agent_from_the_current_directory_and_serves(
    tmp_path: Path, redis_url: str
) -> None:
    """A real ``helmlog serve`` process answers a session over HTTP, then stops."""
    (tmp_path / "desk.py").write_text(DESK)
    (tmp_path / "auth.toml").write_text(AUTH)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "helmlog.cli", "serve", "--agent", "desk:desk",
         "--store", redis_url, "--auth", "auth.toml", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                if httpx2.get(url + "/healthz", timeout=1).status_code == 200:
                    return True
            except httpx2.TransportError:
                pass  # not listening yet
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode() if proc.stderr else "")
            return False

        until_sync("helmlog serve answers /healthz", healthy, 30)
        reply = httpx2.post(
            url + "/sessions",
            json={"message": "hi"},
            headers={"Authorization": "Bearer t-app"},
        )
        assert ("answered", "Hello.") == (
            reply.json()["status"],
            reply.json()["answer"],
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    assert 0 == proc.returncode
