"""S1–S6 to real clients: both protocol eras, on stdio and Streamable HTTP.

Pattern: one governed server (``stdio_server.SERVED``'s shape: a stamping
         link and a refusing link) reached by clients we did not write: the
         ``mcp`` 2.x ``Client`` in ``auto`` and ``legacy`` mode, FastMCP 4's
         ``Client``, the MCP Inspector's CLI (``npx``), and raw JSON-RPC for
         every handshake-era revision the SDK serves.
Role:    unit tests for ``gateway/_serve.py`` against the wire (issue 26,
         items 1 and 5).
Emits:   nothing.

Laws: S2 (the served ``tool_call_id``), S4 (a refusal is ``isError``), S6 (a
2026-07-28 stdio connection is one serving session), issue 26 (no "Failed to
validate request" for a 2026-era client; every revision the SDK serves).

Why raw JSON-RPC for the older revisions: no client we can install offers
2024-11-05 or 2025-03-26 on request; the wire itself is then the client.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import mcp.types as types
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from helmlog.gateway import mcp_serve

from .helpers import text_of
from .stdio_server import ECHO, SERVED

ROOT = Path(__file__).resolve().parents[3]
STDIO = [sys.executable, "-m", "tests.unit.gateway.stdio_server"]
VALIDATION_WARNING = "Failed to validate request"
#: The Inspector, pinned: an unpinned ``npx`` spec reuses whatever version the
#: machine's npx cache holds (here 0.15.0), so the tested one would drift.
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
#: Its CLI's exit status for a call answered with ``isError: true``.
INSPECTOR_TOOL_ERROR = 5

Transport = Literal["stdio", "http"]


def _served() -> Any:
    """A fresh server shaped like the stdio one (its counter starts at 1)."""
    return mcp_serve([ECHO], name="echoes", tool_middleware=SERVED.links)


@asynccontextmanager
async def _target(transport: Transport) -> AsyncIterator[Any]:
    """What a client is pointed at: a stdio command or a live HTTP URL."""
    if transport == "stdio":
        yield StdioServerParameters(
            command=STDIO[0], args=STDIO[1:], cwd=str(ROOT), env=_child_env()
        )
        return
    async with _served().http_server() as url:
        yield url


def _child_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "PATH": os.environ.get("PATH", "")}


# -- the mcp 2.x client, both eras ---------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(
    ("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")]
)
async def test_the_mcp_v2_client_is_served_in_either_era(
    transport: Transport, mode: Literal["auto", "legacy"], version: str
) -> None:
    """Issue 26 item 1, S2, S4: ``auto`` lands on 2026-07-28 (``server/discover``,
    no initialize), ``legacy`` on the handshake; both list, call and are refused."""
    async with (
        _target(transport) as target,
        Client(target, mode=mode, cache=None) as client,
    ):
        assert version == client.protocol_version
        listed = await client.list_tools()
        assert [("echo", "Echo a word.")] == [
            (t.name, t.description) for t in listed.tools
        ]
        assert ("HI [mcp-echoes-1 from upstream]", False) == text_of(
            await client.call_tool("echo", {"word": "hi"})
        )
        assert ("zero is not a word", True) == text_of(
            await client.call_tool("echo", {"word": "zero"})
        )


# -- every handshake revision, raw ------------------------------------------------


def _rpc(n: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": n, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _initialize(version: str) -> dict[str, Any]:
    return _rpc(
        1,
        "initialize",
        {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw-wire", "version": "1"},
        },
    )


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = _rpc(2, "tools/call", {"name": "echo", "arguments": {"word": "hi"}})


def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The one JSON-RPC message of a POST's answer (JSON or an SSE stream)."""
    if response.headers["content-type"].startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    data = [
        line[len("data:") :].strip()
        for line in response.text.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]
    return dict(json.loads(data[-1]))


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_every_handshake_revision_is_served_over_http(version: str) -> None:
    """Issue 26 item 1: initialize at ``version`` is answered at it; a call runs."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    async with _served().http_server() as url, httpx2.AsyncClient() as http:
        opened = await http.post(url, json=_initialize(version), headers=headers)
        assert version == _answer(opened)["result"]["protocolVersion"]
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": version,
        }
        assert (
            202 == (await http.post(url, json=INITIALIZED, headers=session)).status_code
        )
        called = _answer(await http.post(url, json=CALL, headers=session))
    assert {
        "content": [{"type": "text", "text": "HI [mcp-echoes-1 from upstream]"}],
        "isError": False,
    } == called["result"]


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_every_handshake_revision_is_served_over_stdio(version: str) -> None:
    """Issue 26 item 1: the same exchange as newline-delimited JSON on a pipe."""
    async with await anyio.open_process(STDIO, cwd=ROOT, env=_child_env()) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        lines = _Lines(proc.stdout)
        for message in (_initialize(version), INITIALIZED, CALL):
            await proc.stdin.send((json.dumps(message) + "\n").encode())
        with anyio.fail_after(30):
            opened = await lines.next()
            called = await lines.next()
        await proc.stdin.aclose()
    assert version == opened["result"]["protocolVersion"]
    assert "HI [mcp-echoes-1 from upstream]" == (called["result"]["content"][0]["text"])


class _Lines:
    """JSON-RPC messages read line by line from a byte stream."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            self.buffer += await self.stream.receive()
        line, self.buffer = self.buffer.split(b"\n", 1)
        return dict(json.loads(line))


# -- FastMCP 4's client ------------------------------------------------------------


def _fast_text(result: Any) -> tuple[str, bool]:
    """FastMCP's call result: its one text block and its error flag."""
    assert 1 == len(result.content)
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text, bool(result.is_error)


async def test_fastmcp_client_over_stdio_logs_no_validation_warning(
    tmp_path: Path,
) -> None:
    """Issue 26: FastMCP 4 lands on 2026-07-28 and the server logs no
    "Failed to validate request" (its ``server/discover`` is a known method)."""
    log_file = tmp_path / "server.log"
    transport = StdioTransport(
        STDIO[0], STDIO[1:], env=_child_env(), cwd=str(ROOT), log_file=log_file
    )
    async with FastMCPClient(transport) as client:
        assert "2026-07-28" == client.protocol_version
        assert ["echo"] == [t.name for t in await client.list_tools()]
        result = await client.call_tool("echo", {"word": "hi"})
        refused = await client.call_tool("echo", {"word": "zero"}, raise_on_error=False)
    assert ("HI [mcp-echoes-1 from upstream]", False) == _fast_text(result)
    assert ("zero is not a word", True) == _fast_text(refused)
    logged = log_file.read_text() if log_file.exists() else ""
    assert VALIDATION_WARNING not in logged


async def test_fastmcp_client_over_http_logs_no_validation_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 26: the same over Streamable HTTP, the server in this process."""
    caplog.set_level(logging.DEBUG)
    async with (
        _served().http_server() as url,
        FastMCPClient(StreamableHttpTransport(url)) as client,
    ):
        assert "2026-07-28" == client.protocol_version
        assert ["echo"] == [t.name for t in await client.list_tools()]
        result = await client.call_tool("echo", {"word": "hi"})
    assert ("HI [mcp-echoes-1 from upstream]", False) == _fast_text(result)
    assert [] == [
        r.getMessage() for r in caplog.records if VALIDATION_WARNING in r.getMessage()
    ]


# -- the MCP Inspector's CLI ----------------------------------------------------------

needs_npx = pytest.mark.skipif(
    shutil.which("npx") is None,
    reason="the MCP Inspector CLI runs under npx (node); .ci/run installs node",
)


async def _inspector(*args: str, tool_error: bool = False) -> dict[str, Any]:
    """Run ``npx -y @modelcontextprotocol/inspector --cli <args>``; its JSON answer.

    A call answered as a tool error exits with ``INSPECTOR_TOOL_ERROR``.
    """
    npx = shutil.which("npx")
    assert npx is not None
    with anyio.fail_after(240):
        done = await anyio.run_process(
            [npx, "-y", INSPECTOR, "--cli", *args],
            cwd=ROOT,
            env={**os.environ, **_child_env()},
            check=False,
        )
    expected = INSPECTOR_TOOL_ERROR if tool_error else 0
    assert expected == done.returncode, done.stderr.decode(errors="replace")
    return dict(json.loads(done.stdout))


def _inspector_call(word: str) -> tuple[str, ...]:
    return (
        "--method",
        "tools/call",
        "--tool-name",
        "echo",
        "--tool-arg",
        f"word={word}",
    )


@needs_npx
async def test_the_inspector_cli_lists_and_calls_over_stdio() -> None:
    """Issue 26 item 5: ``tools/list`` and ``tools/call`` (served, then refused)."""
    listed = await _inspector(*STDIO, "--method", "tools/list")
    assert ["echo"] == [t["name"] for t in listed["tools"]]
    called = await _inspector(*STDIO, *_inspector_call("hi"))
    assert ("HI [mcp-echoes-1 from upstream]", False) == (
        called["content"][0]["text"],
        called["isError"],
    )
    refused = await _inspector(*STDIO, *_inspector_call("zero"), tool_error=True)
    assert ("zero is not a word", True) == (
        refused["content"][0]["text"],
        refused["isError"],
    )


@needs_npx
async def test_the_inspector_cli_lists_and_calls_over_streamable_http() -> None:
    """Issue 26 item 5: the same over ``--transport http <url>``."""
    async with _served().http_server() as url:
        listed = await _inspector(url, "--transport", "http", "--method", "tools/list")
        called = await _inspector(url, "--transport", "http", *_inspector_call("hi"))
        refused = await _inspector(
            url, "--transport", "http", *_inspector_call("zero"), tool_error=True
        )
    assert ["echo"] == [t["name"] for t in listed["tools"]]
    assert ("HI [mcp-echoes-1 from upstream]", False) == (
        called["content"][0]["text"],
        called["isError"],
    )
    assert ("zero is not a word", True) == (
        refused["content"][0]["text"],
        refused["isError"],
    )
