"""S7 over stdio — a governed server run as a subprocess, reached by ``mcp_client``.

Pattern: one end-to-end test across a real process boundary: ``mcp_client``
         starts ``sys.executable -m tests.unit.gateway.stdio_server`` and
         speaks MCP over its stdin/stdout.
Role:    unit test for ``ServedTools.serve_stdio`` and the client's stdio
         transport.
Emits:   nothing.

Laws: S7 (the tools come back with the server's surface and the client's
name as source), S2 (the served chain numbers calls per server and sees the
tool's own source, stamped into the result by a link), S4 (a before-tool
denial reaches the agent as a tool error), S6 (one serving session per
process: the call numbering continues across calls of the one connection).

Why a subprocess in the unit suite: stdio is the transport most MCP hosts
use, and only a real process shows the server starts, serves and exits
cleanly.
"""

from __future__ import annotations

import sys

import pytest

from helmlog.gateway import mcp_client
from helmlog.gateway._client import McpToolError


async def test_s7_a_stdio_server_serves_governed_tools_to_the_client() -> None:
    """S7, S2, S4: list, call twice (numbered per server), and a denial as an error."""
    client = mcp_client(
        "echo-proc",
        command=sys.executable,
        args=["-m", "tests.unit.gateway.stdio_server"],
    )
    async with client as tools:
        assert [("echo", "Echo a word.", "echo-proc")] == [
            (t.name, t.description, t.source) for t in tools
        ]
        echo = tools[0]
        assert "HI [mcp-echoes-1 from upstream]" == await echo.execute(word="hi")
        assert "YO [mcp-echoes-2 from upstream]" == await echo.execute(word="yo")
        with pytest.raises(McpToolError) as raised:
            await echo.execute(word="zero")
    assert (
        "MCP tool 'echo' (server 'echo-proc') returned an error: zero is not a word"
    ) == str(raised.value)
