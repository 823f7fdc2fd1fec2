"""Redis fixtures: a real ``redis-server`` on a free loopback port.

Pattern: a session-scoped server process, a per-test clean database, and a
         ``RedisServer`` handle that can stop and start the server mid-test.
Role:    test support for ``tests/contracts``, ``tests/integration`` (and a
         3-master Cluster) and ``bench/ledger.py``.
Emits:   nothing.

Laws: R11 (a real server, never a fake), R5 (Redis stopped mid-run).

Why a missing ``redis-server`` fails: a skipped suite reads as green. Why
``stop()`` saves although the server runs ``--save ""``: a restarted server
must hold all it acknowledged (``SHUTDOWN SAVE``); ``kill()`` saves nothing.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.polling import until_sync

REDIS_SERVER = "redis-server"
_USUAL_PATHS = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")
_START_TIMEOUT_S = 10.0


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _command(port: int, *args: str, timeout: float = 1.0) -> bytes:
    """Send one RESP command on a fresh socket and return the raw reply."""
    payload = f"*{len(args)}\r\n".encode()
    for arg in args:
        raw = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(raw), raw)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        return sock.recv(4096)


class RedisServer:
    """One ``redis-server`` process on a fixed loopback port.

    The port and the data directory survive ``stop()``/``start()``, so a
    restarted server answers on the same URL with the data saved at stop.
    """

    def __init__(
        self, binary: str | None = None, extra_args: Sequence[str] = ()
    ) -> None:
        found = binary or shutil.which(REDIS_SERVER)
        for usual in _USUAL_PATHS:
            if found is None and Path(usual).is_file():
                found = usual
        if found is None:
            raise RuntimeError(
                "redis-server is not installed (not on PATH, nor in "
                f"{', '.join(_USUAL_PATHS)}): the Redis tests need a real server; "
                "install it: `apt-get install redis-server` (Debian/Ubuntu) or "
                "`brew install redis` (macOS)"
            )
        self.binary = found
        self._tmp = tempfile.TemporaryDirectory(prefix="helmlog-redis-")
        self.dir = Path(self._tmp.name)
        self.port = 0
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the server (on a new free port the first time) and wait for PING."""
        if self.running:
            return
        if self.port:
            self._spawn()
            return
        last: Exception | None = None
        for _attempt in range(5):
            # Another process may grab the port between our probe and the bind.
            self.port = free_port()
            try:
                self._spawn()
                return
            except RuntimeError as exc:
                last = exc
        raise RuntimeError(f"could not start redis-server: {last}")

    def _spawn(self) -> None:
        log = (self.dir / "redis.log").open("ab")
        with log:
            self._proc = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.dir),
                    "--daemonize",
                    "no",
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
            )
        proc = self._proc

        def answers() -> bool:
            if proc.poll() is not None:
                self._proc = None
                tail = (self.dir / "redis.log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"redis-server exited at start: {tail}")
            return self.ping()

        try:
            until_sync(
                "redis-server answers PING", answers, _START_TIMEOUT_S, every=0.01
            )
        except AssertionError:
            self.kill()  # the caller retries on another port
            raise RuntimeError(
                f"redis-server did not answer PING in {_START_TIMEOUT_S}s"
            ) from None

    def ping(self) -> bool:
        """Whether the server answers PING now."""
        try:
            return _command(self.port, "PING", timeout=0.5).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """One command on a fresh socket; the raw RESP reply."""
        return _command(self.port, *args, timeout=5.0)

    def flushdb(self) -> None:
        """Empty database 0 and the script cache's effects (``FLUSHDB``)."""
        reply = _command(self.port, "FLUSHDB")
        if not reply.startswith(b"+OK"):
            raise RuntimeError(f"FLUSHDB failed: {reply!r}")

    def stop(self) -> None:
        """Stop gracefully, saving a snapshot that ``start()`` reloads."""
        if not self.running:
            return
        assert self._proc is not None
        with contextlib.suppress(OSError):
            # The server closes the connection as it exits; no reply is sent.
            _command(self.port, "SHUTDOWN", "SAVE", timeout=5.0)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """Crash the server (SIGKILL): what was not saved is gone."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._proc = None

    def close(self) -> None:
        """Stop the server for good and remove its directory."""
        self.kill()
        self._tmp.cleanup()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisClusterServers:
    """A real Redis Cluster: three masters on loopback, joined by redis-cli.

    Each master is a ``RedisServer`` started with ``--cluster-enabled yes``
    and its own ``nodes.conf``; ``redis-cli --cluster create`` spreads the
    16,384 slots over them, and ``start()`` waits for ``cluster_state:ok``.
    """

    def __init__(self, masters: int = 3) -> None:
        cli = shutil.which("redis-cli")
        for usual in ("/usr/bin/redis-cli", "/usr/local/bin/redis-cli"):
            if cli is None and Path(usual).is_file():
                cli = usual
        if cli is None:
            raise RuntimeError(
                "redis-cli is not installed: the Redis Cluster tests need it to "
                "join the masters; install it: `apt-get install redis-tools` "
                "(Debian/Ubuntu) or `brew install redis` (macOS)"
            )
        self.cli = cli
        args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
        self.nodes = [
            RedisServer(extra_args=(*args, "--cluster-node-timeout", "5000"))
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        """A ``redis://`` URL of one node (the store finds the others)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        """Start the masters, join them and wait until every slot is served."""
        for node in self.nodes:
            node.start()
        addrs = [f"127.0.0.1:{node.port}" for node in self.nodes]
        done = subprocess.run(
            [self.cli, "--cluster", "create", *addrs, "--cluster-yes"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed: {done.stdout[-500:]!r} "
                f"{done.stderr[-500:]!r}"
            )
        until_sync(
            "the redis cluster reaches cluster_state:ok",
            lambda: all(
                b"cluster_state:ok" in n.command("CLUSTER", "INFO") for n in self.nodes
            ),
            30,
        )

    def flushall(self) -> None:
        """Empty every master (``FLUSHALL``)."""
        for node in self.nodes:
            reply = node.command("FLUSHALL")
            if not reply.startswith(b"+OK"):
                raise RuntimeError(f"FLUSHALL on port {node.port} failed: {reply!r}")

    def close(self) -> None:
        """Stop every master and remove their directories."""
        for node in self.nodes:
            node.close()


def _server() -> RedisServer:
    try:
        return RedisServer()
    except RuntimeError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the whole test session (fails if missing)."""
    server = _server()
    with server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL, with database 0 emptied before the test."""
    if not redis_server.running:
        # A test that stopped the shared server must not break the next one.
        redis_server.start()
    redis_server.flushdb()
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """One real 3-master Redis Cluster for the whole test session."""
    try:
        cluster = RedisClusterServers()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisClusterServers) -> str:
    """The cluster's URL, with every master emptied before the test."""
    redis_cluster.flushall()
    return redis_cluster.url


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, free to stop, kill and restart."""
    server = _server()
    with server:
        yield server
