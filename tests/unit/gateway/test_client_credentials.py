"""S7/P26 — an agent's MCP tools reach servers that need credentials.

Pattern: ``mcp_client(url=HttpUpstream(...))`` against the real guarded
         servers of ``guarded_upstream`` (uvicorn on loopback ports): one
         that answers 401 without its headers or bearer, one over TLS with a
         CA made here, one behind the SDK's OAuth resource server with a real
         client-credentials issuer; the tools are called as an agent calls
         them (``Tool.execute``).
Role:    unit tests for the ``HttpUpstream`` path of ``gateway/_client.py``.
Emits:   nothing.

Laws: S7 (the tools carry ``source=name``, whatever the transport; a
connection that fails is an ``UpstreamError`` naming the client and the
server, before any tool), P26 (headers, a bearer, OAuth and TLS settings on the one
``httpx2`` client; no secret in an error).

Why the same servers as the proxy's P26 tests: an agent's client and the
proxy's upstream then reach one server through the same settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from helmlog.gateway import (
    HttpUpstream,
    OAuthClientCredentials,
    UpstreamError,
    mcp_client,
)
from tests.unit.gateway.guarded_upstream import (
    certificates,
    guarded_upstream,
    oauth_upstream,
)

SECRET = "s3cr3t-T0KEN-c1i3nt"
KEY = "k3y-V4LUE-c1i3nt"


@pytest.fixture
def no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No proxy variable from the machine: each test sets the ones it means."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    yield monkeypatch


async def test_s7_headers_and_a_bearer_reach_a_server_that_demands_them(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """S7, P26: the agent's tool goes through with the headers and the bearer
    on every request, and carries the client's name as its source."""
    demanded = {"X-Key": KEY, "Authorization": f"Bearer {SECRET}"}
    async with guarded_upstream(demanded) as (url, seen):
        upstream = HttpUpstream(url, headers={"X-Key": KEY}, bearer=SECRET)
        async with mcp_client("crm", url=upstream) as tools:
            [whoami] = tools
            said = await whoami.execute(word="hi")
    assert ("HI", "crm", "whoami") == (said, whoami.source, whoami.name)
    assert 0 == seen.refused
    assert {"x-key", "authorization"} <= seen.header_names


async def test_s7_a_server_that_refuses_the_credentials_is_not_connected(
    no_env_proxy: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """S7, P26, H4: a 401 fails the connection (``UpstreamError``) before any
    tool; the error and the log hold no secret; the WARNING names the 401."""
    caplog.set_level(logging.DEBUG)
    async with guarded_upstream({"Authorization": "Bearer right"}) as (url, seen):
        client = mcp_client("crm", url=HttpUpstream(url, bearer=SECRET))
        with pytest.raises(UpstreamError) as refused:
            await client.connect()
    assert seen.refused >= 1
    assert [] == client.tools
    assert str(refused.value).startswith(f"upstream MCP server 'crm' at {url} ")
    assert SECRET not in str(refused.value) and SECRET not in caplog.text
    assert any("answered 401" in r.getMessage() for r in caplog.records)


async def test_s7_an_https_server_is_trusted_with_its_ca_file(
    tmp_path: Path, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P26: a self-signed CA is trusted when the HttpUpstream names it, and
    not otherwise (the one client's TLS settings)."""
    ca, cert, key = certificates(tmp_path)
    async with guarded_upstream({}, tls=(cert, key)) as (url, _seen):
        async with mcp_client("tls", url=HttpUpstream(url, ca_file=ca)) as tools:
            said = await tools[0].execute(word="tls")
        with pytest.raises(UpstreamError):
            await mcp_client("tls", url=HttpUpstream(url)).connect()
    assert "TLS" == said


async def test_s7_oauth_client_credentials_get_a_token_for_the_agent_s_tools(
    no_env_proxy: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """P26: 401 → discovery → a token from the issuer (the SDK's provider),
    bound to this server; the tool goes through; no secret in the log."""
    caplog.set_level(logging.DEBUG)
    async with oauth_upstream("helmlog-agent", SECRET) as (url, issuer):
        upstream = HttpUpstream(
            url,
            oauth=OAuthClientCredentials(
                client_id="helmlog-agent", client_secret=SECRET, issuer=issuer.url
            ),
        )
        async with mcp_client("oauth", url=upstream) as tools:
            said = await tools[0].execute(word="oauth")
    assert "OAUTH" == said
    assert [url] == list(issuer.issued.values())
    assert SECRET not in caplog.text


def test_s7_url_takes_a_url_or_an_http_upstream() -> None:
    """S7: any other ``url=`` is a ValueError naming what it takes."""
    with pytest.raises(ValueError, match="a Streamable HTTP URL or an HttpUpstream"):
        mcp_client("x", url=b"http://127.0.0.1/mcp")  # type: ignore[arg-type]
