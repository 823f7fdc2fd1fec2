"""``helmlog mcp-proxy`` and the proxy example, end to end across processes.

Pattern: the CLI started as a real process (stdio, and HTTP on a free port),
         in front of the example's FastMCP upstream (another process), spoken
         to by the SDK client; ``helmlog verify``/``replay`` on what it
         recorded in a real redis-server.
Role:    e2e tests of ``helmlog/_proxy_cli.py`` and ``examples/mcp_proxy.py``.
Emits:   nothing.

Laws: R18 (``mcp-proxy``; ``verify`` and ``replay`` on a proxy session),
P21 (the audit chain verifies under the derived key), issue 10 items 4, 6,
7 and 8 (the policy is importable from the current directory; one-line
errors; the example's output shows each case; the proxy's own stdio
transport carries any line length).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.polling import until_sync

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
UPSTREAM = f"{sys.executable} mcp_proxy.py serve"
HELMLOG = [sys.executable, "-m", "helmlog.cli"]

EXPECTED = """\
tools the client sees: customer, order_status, refund
ordinary call: order 7 shipped
masked: Ann, ssn ***-**-****, gold tier
audit: customer -> Ann, ssn ***-**-****, gold tier
denied: MCP tool 'refund' (server 'gate') returned an error: \
refunds over $10,000 go to the finance desk
small refund: refunded $25.00 on order 7
hidden: Tool not found: drop_database (TOOL_HIDDEN)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_proxy_example_shows_each_case() -> None:
    """Item 7: hidden, masked before the audit layer, denied with reason, passed."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "mcp_proxy.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert EXPECTED == done.stdout


async def test_mcp_proxy_over_stdio_loads_a_policy_from_the_current_directory() -> None:
    """Item 6: --upstream CMD --policy module:attr from cwd; the policy applies."""
    params = StdioServerParameters(
        command=HELMLOG[0],
        args=[
            *HELMLOG[1:],
            "mcp-proxy",
            "--upstream",
            UPSTREAM,
            "--policy",
            "mcp_proxy:POLICY",
        ],
        cwd=str(EXAMPLES),
        env={**os.environ, "PYTHONPATH": ""},
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        names = sorted(t.name for t in (await session.list_tools()).tools)
        masked = await session.call_tool("customer", {"name": "Ann"})
        with pytest.raises(MCPError) as hidden:
            await session.call_tool("drop_database", {})
    assert "support-gate" == init.server_info.name
    assert ["customer", "order_status", "refund"] == names
    assert "Ann, ssn ***-**-****, gold tier" == masked.content[0].text  # type: ignore[union-attr]
    assert {"rejection_reason": "TOOL_HIDDEN"} == hidden.value.error.data


async def test_mcp_proxy_stdio_carries_lines_longer_than_one_pipe_read() -> None:
    """Item 8: the loop's own stdio transport reassembles a 300 KB line, in order."""
    upstream = f"{sys.executable} -m tests.unit.gateway.upstream_server"
    params = StdioServerParameters(
        command=HELMLOG[0],
        args=[*HELMLOG[1:], "mcp-proxy", "--upstream", upstream],
        cwd=str(ROOT),
    )
    word = "ab" * 150_000
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        big = await session.call_tool("echo", {"word": word})
        small = [await session.call_tool("echo", {"word": w}) for w in ("x", "y")]
    assert word.upper() == big.content[0].text  # type: ignore[union-attr]
    assert ["X", "Y"] == [r.content[0].text for r in small]  # type: ignore[union-attr]


async def test_mcp_proxy_over_http_records_a_session_verify_and_replay_read(
    redis_url: str, tmp_path: Path
) -> None:
    """Item 4, R18, P21: the audit stream in Redis verifies and replays."""
    port = _free_port()
    env = {**os.environ, "HELMLOG_AUDIT_SECRET": "s3cret", "PYTHONPATH": ""}
    log = (tmp_path / "proxy.log").open("w")
    proc = subprocess.Popen(
        [
            *HELMLOG,
            "mcp-proxy",
            "--upstream",
            UPSTREAM,
            "--policy",
            "mcp_proxy:POLICY",
            "--http",
            f"127.0.0.1:{port}",
            "--store",
            redis_url,
        ],
        cwd=EXAMPLES,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            except OSError:
                assert proc.poll() is None, "helmlog mcp-proxy exited"
                return False
            return True

        until_sync("helmlog mcp-proxy listens", listening, 60)
        sids: list[str] = []

        async def session_of(response: httpx.Response) -> None:
            sid = response.headers.get("mcp-session-id")
            if sid is not None and sid not in sids:
                sids.append(sid)

        async with (
            httpx.AsyncClient(
                timeout=30, event_hooks={"response": [session_of]}
            ) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()  # the handshake era: one session
            out = await session.call_tool("order_status", {"order": 7})
            denied = await session.call_tool("refund", {"order": 7, "amount": 50_000})
            (sid,) = sids
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    assert "order 7 shipped" == out.content[0].text  # type: ignore[union-attr]
    assert (
        denied.is_error
        and {"rejection_reason": "POLICY_DENIED", "middleware": "refund-ceiling"}
        == denied.meta
    )
    assert sid is not None
    verified = subprocess.run(
        [*HELMLOG, "verify", sid, "--store", redis_url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert 0 == verified.returncode, verified.stdout + verified.stderr
    tampered = subprocess.run(
        [*HELMLOG, "verify", sid, "--store", redis_url],
        capture_output=True,
        text=True,
        env={**env, "HELMLOG_AUDIT_SECRET": "x"},
        timeout=60,
    )
    assert 1 == tampered.returncode
    replayed = subprocess.run(
        [*HELMLOG, "replay", sid, "--store", redis_url],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "200"},
        timeout=60,
    )
    assert 0 == replayed.returncode
    assert "order_status via pipeline: success" in replayed.stdout
    assert "refund via pipeline: rejected POLICY_DENIED" in replayed.stdout
    assert "proxy closed" in replayed.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--policy", "mcp_proxy:NOPE"], "'mcp_proxy' has no attribute 'NOPE'"),
        (["--policy", "no_such_policy:P"], "cannot import 'no_such_policy'"),
        (["--policy", "bad_policy:POLICY"], "unknown McpProxy option(s) colour"),
    ],
)
def test_mcp_proxy_refuses_a_bad_policy_in_one_line(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    """Item 6: a policy that does not import, or an unknown option: one line, exit 2."""
    (tmp_path / "bad_policy.py").write_text("POLICY = {'colour': 'red'}\n")
    (tmp_path / "mcp_proxy.py").write_text("POLICY = {}\n")
    done = subprocess.run(
        [*HELMLOG, "mcp-proxy", "--upstream", "true", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert 2 == done.returncode
    assert 1 == len(done.stderr.strip().splitlines()), done.stderr
    assert expected in done.stderr


def test_mcp_proxy_names_an_upstream_that_does_not_start() -> None:
    """Item 6, P25: one line naming the upstream, exit 2."""
    done = subprocess.run(
        [*HELMLOG, "mcp-proxy", "--upstream", "no-such-program-xyz --flag"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 2 == done.returncode
    lines = done.stderr.strip().splitlines()
    assert 1 == len(lines), done.stderr
    assert lines[0].startswith(
        "helmlog mcp-proxy failed: upstream MCP server no-such-program-xyz --flag "
        "could not be started"
    )
