"""Helpers for the proxy's HTTP tests: a FastMCP upstream process, raw requests.

Pattern: context managers that start what they need and stop it on exit.
Role:    imported by ``tests/unit/gateway/test_proxy_http.py`` and the
         transport tests.
Emits:   nothing.

Laws: none itself.

Why a raw client beside the SDK's: the limits (P11, P17, P24) are HTTP
answers the SDK client turns into exceptions; the raw one reads them.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx2 as httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.polling import until, until_sync

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


def free_port() -> int:
    """A free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_upstream(*extra: str) -> Iterator[str]:
    """The FastMCP upstream as a subprocess on Streamable HTTP; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.unit.gateway.upstream_server",
            "--http",
            str(port),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("the FastMCP upstream exited at start") from None
                return False
            return True

        until_sync("the FastMCP upstream listens", listening, 30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@asynccontextmanager
async def http_client(
    url: str, headers: dict[str, str] | None = None, **kw: Any
) -> AsyncIterator[ClientSession]:
    """One initialized SDK client session over Streamable HTTP."""
    async with (
        httpx.AsyncClient(headers=headers or {}, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, **kw) as session,
    ):
        await session.initialize()
        yield session


async def post(
    url: str, body: Any, headers: dict[str, str] | None = None
) -> httpx.Response:
    """One raw POST (JSON body, or bytes as given)."""
    async with httpx.AsyncClient(timeout=30) as http:
        merged = {**HEADERS, **(headers or {})}
        if isinstance(body, bytes):
            return await http.post(url, content=body, headers=merged)
        return await http.post(url, json=body, headers=merged)


def answer_of(response: httpx.Response) -> Any:
    """The JSON-RPC message of an answer: a JSON body, or the last ``data:``
    of an SSE one (the SDK transport answers a request on SSE)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [
            line[len("data:") :].strip()
            for line in response.text.splitlines()
            if line.startswith("data:") and line[len("data:") :].strip()
        ]
        return json.loads(data[-1])
    return response.json()


class Restartable:
    """The FastMCP upstream on one port, killed (as a crash: its listen
    streams break) and started again on the same port, without blocking the
    event loop the proxy runs on."""

    def __init__(self, *extra: str) -> None:
        self.extra = extra  # ``upstream_server``'s flags after ``--http PORT``
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.unit.gateway.upstream_server",
                "--http",
                str(self.port),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await until("the FastMCP upstream listens", self._listening, 30)

    def _listening(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "it exited"
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
