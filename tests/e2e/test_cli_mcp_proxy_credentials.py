"""``helmlog mcp-proxy`` in front of upstreams that need credentials, end to end.

Pattern: the CLI started as a real process (stdio, spoken to by the SDK's
         ``Client``) in front of real upstreams served from this process
         (``guarded_upstream``): one that demands a header and a bearer, an
         https:// one with a CA made here, an OAuth-protected one with its
         authorization server; ``ps`` read while the proxy runs.
Role:    e2e tests of the upstream flags (``helmlog/_upstream_options.py``).
Emits:   nothing.

Laws: P26 (flags and their environment twins; secrets from the environment
or a file, so never in ``ps``; bad input refused before any connection,
in one line), H4 (no secret in an error).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.unit.gateway.guarded_upstream import (
    certificates,
    guarded_upstream,
    http_proxy,
    oauth_upstream,
)

ROOT = Path(__file__).resolve().parents[2]
HELMLOG = [sys.executable, "-m", "helmlog.cli"]
SECRET = "s3cr3t-T0KEN-9f8e7d"
KEY = "k3y-V4LUE-0a1b2c"


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().endswith("_PROXY") and not k.startswith("HELMLOG_UPSTREAM")
    }
    return {**base, **extra}


@asynccontextmanager
async def _proxy(
    args: list[str], env: Mapping[str, str], errlog: Path | None = None
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=HELMLOG[0],
        args=[*HELMLOG[1:], "mcp-proxy", *args],
        cwd=str(ROOT),
        env=_env(env),
    )
    with open(errlog or os.devnull, "w") as err:
        # The handshake era: what these tests check is the upstream side.
        async with Client(stdio_client(params, errlog=err), mode="legacy") as client:
            yield client


def _text(result: object) -> str:
    return result.content[0].text  # type: ignore[attr-defined,no-any-return]


async def _ps() -> str:
    done = await asyncio.create_subprocess_exec(
        "ps", "-ww", "-eo", "args", stdout=subprocess.PIPE
    )
    out, _ = await done.communicate()
    return out.decode()


async def test_p26_headers_and_bearer_from_the_environment_never_show_in_ps(
    tmp_path: Path,
) -> None:
    """P26: -H 'X-Key: ${VAR}' and --bearer-env reach the upstream; ps shows neither."""
    demanded = {"X-Key": KEY, "Authorization": f"Bearer {SECRET}"}
    async with guarded_upstream(demanded) as (url, seen):
        args = [
            "--upstream-url",
            url,
            "-H",
            "X-Key: ${UP_KEY}",
            "--bearer-env",
            "UP_TOKEN",
        ]
        env = {"UP_KEY": KEY, "UP_TOKEN": SECRET}
        async with _proxy(args, env) as client:
            result = await client.call_tool("whoami", {"word": "cli"})
            listing = await _ps()
    assert "CLI" == _text(result)
    assert 0 == seen.refused
    assert "X-Key: ${UP_KEY}" in listing  # the proxy was running when read
    assert SECRET not in listing and KEY not in listing


async def test_p26_env_twins_of_the_flags_configure_an_https_upstream(
    tmp_path: Path,
) -> None:
    """P26: HELMLOG_UPSTREAM_CA_FILE, _BEARER_FILE, _HEADER(S/_ENV) act as flags."""
    ca, cert, key = certificates(tmp_path)
    token = tmp_path / "token"
    token.write_text(f"{SECRET}\n")
    demanded = {
        "X-Key": KEY,
        "X-Tenant": "acme corp",
        "X-Region": "eu",
        "Authorization": f"Bearer {SECRET}",
    }
    async with guarded_upstream(demanded, tls=(cert, key)) as (url, seen):
        env = {
            "HELMLOG_UPSTREAM_CA_FILE": str(ca),
            "HELMLOG_UPSTREAM_BEARER_FILE": str(token),
            "HELMLOG_UPSTREAM_HEADER_ENV": "X-Key=UP_KEY",
            "HELMLOG_UPSTREAM_HEADERS": "X-Tenant: acme corp\nX-Region: ${REGION}",
            "REGION": "eu",
            "UP_KEY": KEY,
        }
        async with _proxy(["--upstream-url", url], env) as client:
            result = await client.call_tool("whoami", {"word": "tls"})
    assert "TLS" == _text(result)
    assert 0 == seen.refused


async def test_p26_https_proxy_from_the_environment_carries_the_cli_upstream(
    tmp_path: Path,
) -> None:
    """P26: HTTPS_PROXY reaches the CLI's https:// upstream (CONNECT), TLS intact."""
    ca, cert, key = certificates(tmp_path)
    async with (
        guarded_upstream({}, tls=(cert, key)) as (url, _seen),
        http_proxy() as (proxy_url, log),
    ):
        args = ["--upstream-url", url, "--upstream-ca-file", str(ca)]
        async with _proxy(args, {"HTTPS_PROXY": proxy_url}) as client:
            result = await client.call_tool("whoami", {"word": "tunnel"})
    port = url.split(":")[2].split("/")[0]
    assert "TUNNEL" == _text(result)
    assert f"CONNECT 127.0.0.1:{port}" in log.lines


async def test_p26_oauth_client_credentials_from_the_cli(tmp_path: Path) -> None:
    """P26: --oauth with the secret in the environment and a token cache."""
    cache = tmp_path / "tokens.json"
    async with oauth_upstream("helmlog-proxy", SECRET) as (url, issuer):
        args = [
            "--upstream-url",
            url,
            "--oauth",
            "--oauth-issuer",
            issuer.url,
            "--oauth-client-id",
            "helmlog-proxy",
            "--oauth-client-secret-env",
            "UP_SECRET",
            "--oauth-token-cache",
            str(cache),
        ]
        async with _proxy(args, {"UP_SECRET": SECRET}) as client:
            result = await client.call_tool("whoami", {"word": "oauth"})
            listing = await _ps()
    assert "OAUTH" == _text(result)
    assert 1 == issuer.requests
    assert cache.exists() and SECRET not in cache.read_text()
    assert SECRET not in listing


async def test_p26_refused_credentials_stop_the_start_and_say_401() -> None:
    """P25/P26/H4: exit 2; stderr names the 401, never the token."""
    async with guarded_upstream({"Authorization": "Bearer right"}) as (url, seen):
        done = await asyncio.create_subprocess_exec(
            *HELMLOG,
            "mcp-proxy",
            "--upstream-url",
            url,
            "--bearer-env",
            "UP_TOKEN",
            cwd=str(ROOT),
            env=_env({"UP_TOKEN": SECRET}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _out, err = await asyncio.wait_for(done.communicate(), 60)
    said = err.decode()
    assert 2 == done.returncode
    assert seen.refused >= 1
    assert f"the upstream {url} answered 401 Unauthorized" in said
    assert f"helmlog mcp-proxy failed: upstream MCP server {url} could not" in said
    assert SECRET not in said


async def test_p26_insecure_warns_on_stderr(tmp_path: Path) -> None:
    """P26: --upstream-insecure works against a self-signed upstream, loudly."""
    _ca, cert, key = certificates(tmp_path)
    errlog = tmp_path / "stderr"
    async with guarded_upstream({}, tls=(cert, key)) as (url, _seen):
        args = ["--upstream-url", url, "--upstream-insecure"]
        async with _proxy(args, {}, errlog) as client:
            result = await client.call_tool("whoami", {"word": "x"})
    assert "X" == _text(result)
    assert "WARNING: --upstream-insecure" in errlog.read_text()


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (
            ["--bearer-env", "UP_TOKEN"],
            {},
            "--bearer-env: the environment variable UP_TOKEN is not set",
        ),
        (
            ["--bearer-file", "/nonexistent/token"],
            {},
            "--bearer-file: /nonexistent/token does not exist",
        ),
        (
            ["-H", f"Authorization: Bearer {SECRET}"],
            {},
            "--header: Authorization carries a credential: give its value as "
            "${VAR} or --header-env Authorization=VAR, so it is not on the "
            "command line",
        ),
        (
            ["-H", "X-Key: ${UP_KEY}"],
            {"UP_KEY": "a\x01b"},
            "headers: the value of X-Key holds a line break or control character",
        ),
        (
            ["--upstream-ca-file", "/nonexistent/ca.pem"],
            {},
            "ca_file: /nonexistent/ca.pem does not exist",
        ),
    ],
    ids=["unset-env", "missing-file", "literal-authorization", "bad-value", "ca"],
)
async def test_p26_bad_upstream_input_is_one_line_before_any_connection(
    args: list[str], env: dict[str, str], line: str
) -> None:
    """P26/H4: exit 2, one line naming the problem, the upstream never contacted."""
    async with guarded_upstream({}) as (url, seen):
        done = await asyncio.create_subprocess_exec(
            *HELMLOG,
            "mcp-proxy",
            "--upstream-url",
            url,
            *args,
            cwd=str(ROOT),
            env=_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _out, err = await asyncio.wait_for(done.communicate(), 60)
    assert 2 == done.returncode
    assert f"helmlog mcp-proxy failed: {line}\n" == err.decode()
    assert 0 == seen.requests
