"""Upstreams that need credentials: headers, a bearer, OAuth, TLS, HTTP proxies.

Pattern: real servers in this process (``guarded_upstream``): an MCP server
         behind a middleware that answers 401 without its header, the same
         over TLS with a CA made here, a forward/CONNECT proxy, and an OAuth
         authorization server with the SDK's resource-server side; reached
         through ``McpProxy(HttpUpstream(...))`` by a real SDK client.
Role:    unit tests of ``gateway/upstream/_credentials.py`` and its wiring.
Emits:   nothing.

Laws: P26 (credentials, one HTTP stack for http:// and https://, bad
settings refused before any connection), H4 (no secret in an error, a log
record, the audit or a repr).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from helmlog.events import MemoryEventStore
from helmlog.gateway import (
    HttpUpstream,
    McpProxy,
    OAuthClientCredentials,
    ProxyAudit,
    UpstreamConfigError,
    UpstreamError,
)
from tests.unit.gateway.guarded_upstream import (
    certificates,
    guarded_upstream,
    http_proxy,
    oauth_upstream,
)
from tests.unit.gateway.proxy_helpers import proxied, text_of

SECRET = "s3cr3t-T0KEN-9f8e7d"
KEY = "k3y-V4LUE-0a1b2c"


@pytest.fixture
def no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No proxy variable from the machine: each test sets the ones it means."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    yield monkeypatch


# -- settings refused before any connection -----------------------------------


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({"Bad Name": "x"}, "'Bad Name' is not a valid HTTP header name"),
        ({"X-Key": f"{SECRET}\r\nX-Evil: 1"}, "the value of X-Key holds a line break"),
        ({"Mcp-Session-Id": "x"}, "Mcp-Session-Id is set by the MCP transport"),
    ],
)
def test_p26_a_malformed_header_is_refused_naming_it_not_its_value(
    headers: dict[str, str], problem: str
) -> None:
    """P26/H4: a bad header is a typed error naming the header, never the value."""
    with pytest.raises(UpstreamConfigError) as refused:
        HttpUpstream("http://127.0.0.1:1/mcp", headers=headers)
    assert problem in str(refused.value)
    assert SECRET not in str(refused.value)
    assert "ERR_UPSTREAM_CONFIG" == refused.value.code
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    "settings",
    [
        {"bearer": SECRET, "auth": object()},
        {"bearer": SECRET, "headers": {"Authorization": f"Bearer {SECRET}"}},
        {"bearer": f"two {SECRET}"},
        {"bearer": ""},
        {"ca_file": "ca.pem", "insecure": True},
        {"timeout_s": 0},
    ],
    ids=[
        "bearer-and-auth",
        "bearer-and-authorization-header",
        "bearer-with-a-space",
        "empty-bearer",
        "ca-file-and-insecure",
        "zero-timeout",
    ],
)
def test_p26_contradictory_or_malformed_settings_are_refused(
    settings: dict[str, object],
) -> None:
    """P26: one credential at most, a well-formed token, one TLS choice."""
    with pytest.raises(UpstreamConfigError) as refused:
        HttpUpstream("http://127.0.0.1:1/mcp", **settings)  # type: ignore[arg-type]
    assert SECRET not in str(refused.value)


def test_p26_a_ca_file_that_is_missing_or_not_pem_is_refused(tmp_path: Path) -> None:
    """P26: --upstream-ca-file is read at once; a bad one names the file."""
    missing = tmp_path / "missing.pem"
    with pytest.raises(UpstreamConfigError, match=r"missing\.pem does not exist"):
        HttpUpstream("https://127.0.0.1:1/mcp", ca_file=missing)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(UpstreamConfigError, match=r"junk\.pem cannot be used"):
        HttpUpstream("https://127.0.0.1:1/mcp", ca_file=junk)


def test_p26_oauth_needs_an_http_issuer_and_a_usable_token_cache(
    tmp_path: Path,
) -> None:
    """P26: the OAuth settings are checked whole, before any request."""
    with pytest.raises(UpstreamConfigError, match="issuer must be an http"):
        OAuthClientCredentials(client_id="c", client_secret=SECRET, issuer="auth.x")
    cache = tmp_path / "cache.json"
    cache.write_text("{not json")
    with pytest.raises(UpstreamConfigError, match=r"cache\.json is not a token cache"):
        OAuthClientCredentials(
            client_id="c",
            client_secret=SECRET,
            issuer="https://auth.example",
            token_cache=cache,
        )


def test_h4_the_settings_repr_names_no_secret() -> None:
    """H4: headers by name, the credential by kind, the URL without its query."""
    oauth = OAuthClientCredentials(
        client_id="c", client_secret=SECRET, issuer="https://auth.example"
    )
    upstream = HttpUpstream(
        f"https://user:{SECRET}@mcp.example/mcp?token={SECRET}",
        headers={"X-Key": KEY},
        bearer=SECRET,
    )
    shown = repr(upstream) + repr(oauth)
    assert SECRET not in shown and KEY not in shown
    assert (
        "HttpUpstream(url='https://mcp.example/mcp', headers=['X-Key'], "
        "auth='BearerAuth', tls='system')"
    ) == repr(upstream)


# -- credentials reach a real upstream -----------------------------------------


async def test_p26_static_headers_and_a_bearer_reach_an_upstream_that_demands_them(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P26: headers and a bearer go with every request; the call goes through."""
    demanded = {"X-Key": KEY, "Authorization": f"Bearer {SECRET}"}
    async with guarded_upstream(demanded) as (url, seen):
        proxy = McpProxy(HttpUpstream(url, headers={"X-Key": KEY}, bearer=SECRET))
        async with proxied(proxy) as session:
            result = await session.call_tool("whoami", {"word": "hi"})
    assert "HI" == text_of(result)
    assert 0 == seen.refused
    assert {"x-key", "authorization"} <= seen.header_names


async def test_p26_an_upstream_that_refuses_the_credentials_does_not_start(
    no_env_proxy: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """P25/P26/H4: a 401 is an UpstreamError; no secret in it or in the log."""
    caplog.set_level(logging.DEBUG)
    async with guarded_upstream({"Authorization": "Bearer right"}) as (url, seen):
        proxy = McpProxy(HttpUpstream(url, headers={"X-Key": KEY}, bearer=SECRET))
        with pytest.raises(UpstreamError) as refused:
            async with proxy:
                pass
    assert seen.refused >= 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"proxy: the upstream {url} answered 401 Unauthorized: its " in said[0]
    assert SECRET not in str(refused.value) and KEY not in str(refused.value)
    assert SECRET not in caplog.text and KEY not in caplog.text


async def test_h4_no_secret_reaches_the_audit_or_the_log(
    no_env_proxy: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """H4: the audit records the call, never the upstream's credentials."""
    caplog.set_level(logging.DEBUG)
    store = MemoryEventStore()
    demanded = {"X-Key": KEY, "Authorization": f"Bearer {SECRET}"}
    async with guarded_upstream(demanded) as (url, _seen):
        proxy = McpProxy(
            HttpUpstream(url, headers={"X-Key": KEY}, bearer=SECRET),
            audit=ProxyAudit(b"audit-key", "k1", store),
        )
        async with proxied(proxy) as session:
            await session.call_tool("whoami", {"word": "hi"})
    records = [r for sid in await store.sessions() for r in await store.read(sid)]
    stored = b"".join(record.data for record in records)
    assert "proxy.call_finished" in {record.type for record in records}
    assert SECRET.encode() not in stored and KEY.encode() not in stored
    assert SECRET not in caplog.text and KEY not in caplog.text


# -- one HTTP stack: TLS and proxies for both schemes ---------------------------


async def test_p26_an_https_upstream_is_trusted_with_its_ca_file_and_refused_without(
    tmp_path: Path, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P26: a self-signed CA is trusted only when given (--upstream-ca-file)."""
    ca, cert, key = certificates(tmp_path)
    async with guarded_upstream({}, tls=(cert, key)) as (url, _seen):
        async with proxied(McpProxy(HttpUpstream(url, ca_file=ca))) as session:
            result = await session.call_tool("whoami", {"word": "tls"})
        with pytest.raises(UpstreamError):
            async with McpProxy(HttpUpstream(url)):
                pass
    assert "TLS" == text_of(result)


async def test_p26_insecure_skips_verification_and_says_so_loudly(
    tmp_path: Path,
    no_env_proxy: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """P26: --upstream-insecure works and logs a WARNING each time it is used."""
    _ca, cert, key = certificates(tmp_path)
    async with (
        guarded_upstream({}, tls=(cert, key)) as (url, _seen),
        proxied(McpProxy(HttpUpstream(url, insecure=True))) as session,
    ):
        result = await session.call_tool("whoami", {"word": "x"})
    assert "X" == text_of(result)
    warned = [r for r in caplog.records if "TLS verification" in r.getMessage()]
    assert warned and all(r.levelno == logging.WARNING for r in warned)


async def test_p26_https_proxy_carries_an_https_upstream_through_connect(
    tmp_path: Path, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P26: HTTPS_PROXY is honoured for https:// (a CONNECT tunnel)."""
    ca, cert, key = certificates(tmp_path)
    async with (
        guarded_upstream({}, tls=(cert, key)) as (url, _seen),
        http_proxy() as (proxy_url, log),
    ):
        no_env_proxy.setenv("HTTPS_PROXY", proxy_url)
        async with proxied(McpProxy(HttpUpstream(url, ca_file=ca))) as session:
            result = await session.call_tool("whoami", {"word": "tunnel"})
    port = url.split(":")[2].split("/")[0]
    assert "TUNNEL" == text_of(result)
    assert f"CONNECT 127.0.0.1:{port}" in log.lines


async def test_p26_http_proxy_carries_an_http_upstream_and_no_proxy_bypasses_it(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P26: HTTP_PROXY is honoured for http:// (absolute-form), NO_PROXY too."""
    async with (
        guarded_upstream({"X-Key": KEY}) as (url, _seen),
        http_proxy() as (proxy_url, log),
    ):
        no_env_proxy.setenv("HTTP_PROXY", proxy_url)
        upstream = HttpUpstream(url, headers={"X-Key": KEY})
        async with proxied(McpProxy(upstream)) as session:
            result = await session.call_tool("whoami", {"word": "via"})
        through = list(log.lines)
        no_env_proxy.setenv("NO_PROXY", "127.0.0.1")
        async with proxied(McpProxy(upstream)) as session:
            await session.call_tool("whoami", {"word": "direct"})
    assert "VIA" == text_of(result)
    assert f"POST {url}" in through
    assert through == log.lines  # nothing more went through the proxy


# -- OAuth: the SDK's client-credentials provider -------------------------------


async def test_p26_oauth_client_credentials_get_a_token_and_reuse_the_cache(
    tmp_path: Path,
    no_env_proxy: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """P26: 401 → discovery → a token from the issuer; a second run uses the cache."""
    caplog.set_level(logging.DEBUG)
    cache = tmp_path / "tokens.json"
    async with oauth_upstream("helmlog-proxy", SECRET) as (url, issuer):

        def upstream() -> HttpUpstream:
            return HttpUpstream(
                url,
                oauth=OAuthClientCredentials(
                    client_id="helmlog-proxy",
                    client_secret=SECRET,
                    issuer=issuer.url,
                    token_cache=cache,
                ),
            )

        async with proxied(McpProxy(upstream())) as session:
            first = await session.call_tool("whoami", {"word": "oauth"})
        async with proxied(McpProxy(upstream())) as session:
            second = await session.call_tool("whoami", {"word": "again"})
    assert ("OAUTH", "AGAIN") == (text_of(first), text_of(second))
    assert 1 == issuer.requests  # the second run presented the cached token
    assert [url] == list(issuer.issued.values())  # bound to this resource
    assert 0o600 == cache.stat().st_mode & 0o777
    assert SECRET not in cache.read_text()
    (token,) = issuer.issued
    assert SECRET not in caplog.text and token not in caplog.text  # H4


async def test_p26_oauth_with_a_wrong_secret_does_not_start(
    no_env_proxy: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """P26/H4: the issuer refuses the client; the proxy does not start; no secret."""
    caplog.set_level(logging.DEBUG)
    async with oauth_upstream("helmlog-proxy", "the-right-one") as (url, issuer):
        oauth = OAuthClientCredentials(
            client_id="helmlog-proxy", client_secret=SECRET, issuer=issuer.url
        )
        with pytest.raises(UpstreamError) as refused:
            async with McpProxy(HttpUpstream(url, oauth=oauth)):
                pass
    assert not issuer.issued
    assert SECRET not in str(refused.value) and SECRET not in caplog.text


async def test_p26_a_plain_url_upstream_honours_the_same_proxy_settings(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P26: McpProxy(url) and McpProxy(HttpUpstream(url)) are one stack."""
    async with (
        guarded_upstream({}) as (url, _seen),
        http_proxy() as (proxy_url, log),
    ):
        no_env_proxy.setenv("HTTP_PROXY", proxy_url)
        runs = []
        for target in (url, HttpUpstream(url)):
            async with proxied(McpProxy(target)) as session:
                await session.call_tool("whoami", {"word": "x"})
            runs.append(list(log.lines))
            log.lines.clear()
    assert f"POST {url}" in runs[0]
    assert set(runs[0]) == set(runs[1])  # the same requests, both through it


async def test_p26_any_httpx2_auth_is_applied_to_every_request(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P26: auth=<httpx2.Auth> (here Basic) sits in the credential's slot."""
    basic = base64.b64encode(f"proxy:{SECRET}".encode()).decode()
    async with guarded_upstream({"Authorization": f"Basic {basic}"}) as (url, seen):
        upstream = HttpUpstream(url, auth=httpx2.BasicAuth("proxy", SECRET))
        async with proxied(McpProxy(upstream)) as session:
            result = await session.call_tool("whoami", {"word": "basic"})
    assert "BASIC" == text_of(result)
    assert 0 == seen.refused
    assert SECRET not in repr(upstream)
