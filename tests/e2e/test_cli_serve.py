"""``helmlog serve`` from the shell (issue 11 items 1, 2).

It refuses to start without an auth file (fail closed), and started in a
directory holding the agent module, it imports ``--agent desk:desk`` from
there (no ``PYTHONPATH``), serves the API and stops on SIGINT.
"""

from __future__ import annotations

import os
import re
import selectors
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


ACCESS = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
    r"(?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}) (?P<who>\S+) "
    r"(?P<ms>\d+\.\d)ms$"
)


def _serve_port_zero(cwd: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``helmlog serve --port 0`` (memory store, its default) and the
    URL it printed at start."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "HELMLOG_STORE", "HELMLOG_AUTH")
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "helmlog.cli", "serve", "--agent", "desk:desk",
         "--auth", "auth.toml", "--port", "0", *extra],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    ready = selectors.DefaultSelector()
    ready.register(proc.stdout, selectors.EVENT_READ)
    line = b""

    def printed() -> bool:
        nonlocal line
        if ready.select(0.05):
            line += os.read(proc.stdout.fileno(), 4096)  # type: ignore[union-attr]
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode() if proc.stderr else "")
        return line.endswith(b"\n")

    until_sync("helmlog serve prints its address", printed, 30)
    first = line.decode().splitlines()[0]
    assert first.startswith("helmlog serve on http://127.0.0.1:"), first
    return proc, first.removeprefix("helmlog serve on ")


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """SIGINT, wait; the exit code and everything it wrote to stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode()


def _requests(url: str) -> None:
    """An unauthenticated probe, an authenticated POST with a body, a wrong
    token and a query that names a secret."""
    assert 200 == httpx2.get(url + "/healthz", timeout=5).status_code
    reply = httpx2.post(
        url + "/sessions",
        json={"message": "my secret body"},
        headers={"Authorization": "Bearer t-app"},
        timeout=30,
    )
    assert 201 == reply.status_code, reply.text
    wrong = httpx2.get(
        url + "/asks", headers={"Authorization": "Bearer t-wrong"}, timeout=5
    )
    assert 401 == wrong.status_code
    queried = httpx2.get(
        url + "/asks?token=t-app", headers={"Cookie": "helmlog_login=c-secret"}
    )
    assert 401 == queried.status_code


def _access_lines(text: str) -> list[tuple[str, str, str, str]]:
    found = [ACCESS.match(line) for line in text.splitlines()]
    return [
        (m["method"], m["path"], m["status"], m["who"]) for m in found if m is not None
    ]


EXPECTED_ACCESS = [
    ("GET", "/healthz", "200", "-"),
    ("POST", "/sessions", "201", "app"),
    ("GET", "/asks", "401", "-"),
    ("GET", "/asks", "401", "-"),
]


def test_serve_prints_its_bound_port_and_logs_each_request_to_stderr(
    tmp_path: Path,
) -> None:
    """Issue 28 item 4: ``--port 0`` prints the real address; each request is
    one stderr line (method, path, status, principal, duration) holding no
    token, cookie, query or body. The store defaults to memory:// (serve
    writes, so it needs no $HELMLOG_STORE)."""
    (tmp_path / "desk.py").write_text(DESK)
    (tmp_path / "auth.toml").write_text(AUTH)
    proc, url = _serve_port_zero(tmp_path)
    try:
        _requests(url)
    finally:
        code, err = _stop(proc)
    assert 0 == code, err
    assert EXPECTED_ACCESS == _access_lines(err)
    for secret in ("t-app", "t-wrong", "c-secret", "my secret body", "token="):
        assert secret not in err


def test_serve_access_log_goes_to_the_file_it_is_given(tmp_path: Path) -> None:
    """Issue 28 item 4: ``--access-log FILE`` appends the lines there and
    leaves stderr free of them."""
    (tmp_path / "desk.py").write_text(DESK)
    (tmp_path / "auth.toml").write_text(AUTH)
    log = tmp_path / "access.log"
    log.write_text("kept\n")
    proc, url = _serve_port_zero(tmp_path, "--access-log", str(log))
    try:
        _requests(url)
    finally:
        code, err = _stop(proc)
    assert 0 == code, err
    assert [] == _access_lines(err)
    text = log.read_text()
    assert text.startswith("kept\n")
    assert EXPECTED_ACCESS == _access_lines(text)
    assert "t-app" not in text and "my secret body" not in text


def test_serve_refuses_an_access_log_it_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 4: an --access-log FILE that cannot be opened stops the
    start with one line naming it (exit 2), before anything listens."""
    (tmp_path / "desk.py").write_text(DESK)
    (tmp_path / "auth.toml").write_text(AUTH)
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no-such-dir" / "access.log"
    result = CliRunner().invoke(
        app,
        ["serve", "--agent", "desk:desk", "--auth", "auth.toml", "--port", "0",
         "--access-log", str(missing)],
        env={"HELMLOG_STORE": "", "COLUMNS": "400"},
    )  # fmt: skip
    assert 2 == result.exit_code
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("helmlog serve failed: FileNotFoundError")
    assert str(missing) in line
