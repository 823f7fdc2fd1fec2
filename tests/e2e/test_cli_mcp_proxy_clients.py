"""Real MCP clients against ``helmlog mcp-proxy``, stdio and Streamable HTTP.

Pattern: the CLI as a real process in front of a FastMCP 4 upstream (another
         process) with a governance policy (a PII scrub that sees structured
         values); spoken to by the ``mcp`` 2.x ``Client`` (its default 2026-07-28
         era and ``mode="legacy"``), FastMCP 4's ``Client``, and the MCP
         Inspector's CLI (``npx``, pinned), each listing and calling.
Role:    e2e tests of ``helmlog/_proxy_cli.py`` and the proxy's both eras
         (issue 26 items 1, 3 and 5).
Emits:   nothing.

Laws: P25 (the upstream's tools, schemas and results through the proxy),
P27 (structured content kept valid: each client checks it), P14, R18.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import mcp.types as types
import pytest
from fastmcp.client.transports import StdioTransport
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = f"{sys.executable} -m tests.unit.gateway.fastmcp_upstream"
PROXY = [
    sys.executable,
    "-m",
    "helmlog.cli",
    "mcp-proxy",
    "--upstream",
    UPSTREAM,
    "--policy",
    "tests.unit.gateway.fastmcp_upstream:POLICY",
]
#: The Inspector, pinned as ``test_serve_clients.py`` pins it.
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
MASKED = {"name": "Ann", "ssn": "***-**-****", "tier": "gold"}

needs_npx = pytest.mark.skipif(
    shutil.which("npx") is None,
    reason="the MCP Inspector CLI runs under npx (node); .ci/run installs node",
)


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _http_proxy() -> Iterator[str]:
    """``helmlog mcp-proxy --http`` as a process; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [*PROXY, "--http", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "helmlog mcp-proxy exited"
                assert time.monotonic() < deadline, "helmlog mcp-proxy did not listen"
                time.sleep(0.05)  # a port poll, bounded by the deadline
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(30)


def _stdio_params() -> StdioServerParameters:
    return StdioServerParameters(
        command=PROXY[0], args=PROXY[1:], env=_env(), cwd=str(ROOT)
    )


def _text(result: Any) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def _mcp(target: Any, mode: str) -> tuple[list[str], Any, str, str]:
    """Tools, the customer's structured content and text, the era, via mcp 2.x."""
    async with Client(target, mode=mode) as client:  # type: ignore[arg-type]
        listed = await client.list_tools()
        out = await client.call_tool("customer", {"name": "Ann"})
        return (
            sorted(t.name for t in listed.tools),
            out.structured_content,
            _text(out),
            client.protocol_version,
        )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_mcp_2_client_lists_and_calls_through_the_cli(
    transport: str, mode: str
) -> None:
    """P25, P27, items 1 and 5: the mcp 2.x client, in its default era
    (2026-07-28) and the handshake's, lists the upstream's tools and gets the
    scrubbed model."""
    if transport == "http":
        with _http_proxy() as url:
            tools, structured, text, era = await _mcp(url, mode)
    else:
        with open(os.devnull, "w") as errlog:
            target = stdio_client(_stdio_params(), errlog=errlog)
            tools, structured, text, era = await _mcp(target, mode)
    assert (["customer", "greet"], MASKED) == (tools, structured)
    assert json.dumps(MASKED, separators=(",", ":")) == text
    assert ("2026-07-28" if mode == "auto" else "2025-11-25") == era


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_fastmcp_4_client_lists_and_calls_through_the_cli(
    transport: str,
) -> None:
    """P25, P27, items 3 and 5: FastMCP 4's client (which checks structured
    content against the output schema) lists and calls; ``.data`` is the
    scrubbed greeting."""

    async def run(target: Any) -> tuple[list[str], Any, Any]:
        async with fastmcp.Client(target) as client:
            tools = sorted(t.name for t in await client.list_tools())
            out = await client.call_tool("customer", {"name": "Ann"})
            greet = await client.call_tool("greet", {"name": "Bo"})
            return tools, out.structured_content, greet.data

    if transport == "http":
        with _http_proxy() as url:
            tools, structured, greeting = await run(url)
    else:
        stdio = StdioTransport(
            command=PROXY[0], args=PROXY[1:], env=_env(), cwd=str(ROOT)
        )
        tools, structured, greeting = await run(stdio)
    assert (["customer", "greet"], MASKED) == (tools, structured)
    assert "hello Bo, ssn ***-**-****" == greeting


async def _inspector(*args: str) -> dict[str, Any]:
    """``npx -y <INSPECTOR> --cli <args>``: its JSON answer."""
    npx = shutil.which("npx")
    assert npx is not None
    with anyio.fail_after(240):
        done = await anyio.run_process(
            [npx, "-y", INSPECTOR, "--cli", *args], cwd=ROOT, env=_env(), check=False
        )
    assert 0 == done.returncode, done.stderr.decode(errors="replace")
    return dict(json.loads(done.stdout))


CALL = ("--method", "tools/call", "--tool-name", "customer", "--tool-arg", "name=Ann")


@needs_npx
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_inspector_cli_lists_and_calls_through_the_cli(
    transport: str,
) -> None:
    """P25, P27, item 5: the Inspector's CLI, ``tools/list`` and ``tools/call``,
    over stdio (it spawns the proxy) and over ``--transport http <url>``."""
    if transport == "http":
        with _http_proxy() as url:
            listed = await _inspector(
                url, "--transport", "http", "--method", "tools/list"
            )
            called = await _inspector(url, "--transport", "http", *CALL)
    else:
        listed = await _inspector(*PROXY, "--method", "tools/list")
        called = await _inspector(*PROXY, *CALL)
    assert ["customer", "greet"] == sorted(t["name"] for t in listed["tools"])
    assert (MASKED, False) == (called["structuredContent"], called["isError"])
