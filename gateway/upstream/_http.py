"""The proxy's Streamable HTTP link to its upstream: the SDK's client on httpx2.

Pattern: a client transport factory: the SDK's ``streamable_http_client`` over
         one ``httpx2.AsyncClient`` that an ``HttpClientFactory`` makes (the
         default is the SDK's own, ``create_mcp_http_client``).
Role:    gateway layer; ``Upstream`` opens it for a URL upstream; the upstream
         credentials (headers, bearer, OAuth, TLS, proxy) plug in as the factory.
Emits:   nothing; a transport failure reaches its request as an ``MCPError``.

Laws: P25 (progress, list_changed, cancel and resumption are the SDK's),
H4 (no URL or cause to the caller), issue 26 item 2 (one HTTP stack).

Why one stack: ``http://`` and ``https://`` go over the same client, so one
set of proxy (``HTTP_PROXY``, ``trust_env``) and TLS settings governs both;
the kept-alive HTTP/1.1 wire of the v1 era did not pay on v2 (bench/proxy.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

HttpClientFactory = Callable[[], httpx2.AsyncClient]
"""Makes the one ``httpx2.AsyncClient`` an HTTP upstream is reached with.

The proxy enters and closes what it returns. Headers, ``auth=`` (a bearer,
the SDK's ``OAuthClientProvider``), ``verify=``, ``proxy=``/``trust_env`` and
timeouts all live on that client (the SDK's transport takes nothing else).
"""


def default_http_client() -> httpx2.AsyncClient:
    """The SDK's client: its MCP timeouts, redirects, env proxies and trust store."""
    return create_mcp_http_client()


@contextlib.asynccontextmanager
async def upstream_http(
    url: str, label: str, http_client: HttpClientFactory | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """``(read, write)`` for a ``ClientSession`` to the Streamable HTTP ``url``.

    Args:
        url: the upstream's MCP endpoint (``http://`` or ``https://``).
        label: how the upstream is named in logs (never to a client, H4).
        http_client: makes the ``httpx2.AsyncClient``; the SDK's by default.
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"an HTTP upstream is an http:// or https:// URL: {label}")
    make = http_client or default_http_client
    async with (
        make() as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams
