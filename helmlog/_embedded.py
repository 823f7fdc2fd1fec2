"""An embedded ``redis-server`` for ``helmlog demo --cluster`` with no ``--store``.

Pattern: a context manager owning a child process: started on a free
         loopback port, waited on until it answers, stopped on the way out.
Role:    the face (CLI plumbing for the demo); no layer runs servers.
Emits:   nothing.

Laws: R11 (a cluster's sessions need a store every host reaches), R18
(``helmlog demo --cluster`` runs with no server of the user's).

Why a throwaway (``--save ""``, a temp dir) in its own process group: the
demo's sessions are shown, then gone; Ctrl-C signals the foreground group,
and the server must outlive the demo's last append.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

REDIS_SERVER = "redis-server"
USUAL_PATHS = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")
INSTALL_HINT = (
    "helmlog demo --cluster needs redis-server for its shared store: install it "
    "(apt-get install redis-server) or pass --store redis://HOST:PORT/DB"
)
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


class RedisServerMissingError(OSError):
    """No ``redis-server`` on PATH or in the usual places; ``str()`` says what to do."""

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


def find_redis_server() -> str | None:
    """The ``redis-server`` binary on PATH or in the usual places, else ``None``."""
    found = shutil.which(REDIS_SERVER)
    if found:
        return found
    for path in USUAL_PATHS:
        if shutil.which(path):
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def answers(port: int) -> bool:
    """Whether a Redis server on loopback ``port`` answers ``PING``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def embedded_redis() -> Iterator[str]:
    """Run a ``redis-server`` on a free loopback port; yield its URL.

    Raises:
        RedisServerMissingError: no ``redis-server`` binary was found.
        OSError: it did not start answering within ``START_TIMEOUT_S``.
    """
    binary = find_redis_server()
    if binary is None:
        raise RedisServerMissingError()
    workdir = tempfile.mkdtemp(prefix="helmlog-demo-redis-")
    try:
        port = _free_port()
        proc = subprocess.Popen(
            [
                binary,
                *("--port", str(port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", workdir),
                *("--maxclients", "10000"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise OSError(
                        f"the embedded redis-server ({binary}) did not start on "
                        f"127.0.0.1:{port}"
                    )
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
