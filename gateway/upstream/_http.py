"""The proxy's Streamable HTTP link to its upstream: the SDK's client on httpx2.

Pattern: a client transport factory: the SDK's ``streamable_http_client`` over
         one ``httpx2.AsyncClient`` that an ``HttpClientFactory`` makes (the
         default is the SDK's own, ``create_mcp_http_client``).
Role:    gateway layer; ``Upstream`` opens it for a URL upstream; the upstream
         credentials (headers, bearer, OAuth, TLS, proxy) plug in as the factory.
Emits:   nothing; a transport failure reaches its request as an ``MCPError``
         (a POST that raised is answered ``CONNECTION_CLOSED``: ``_Answering``).

Laws: P25 (progress, list_changed, cancel and resumption are the SDK's),
P26 and issue 26 item 2 (one HTTP stack), H4 (no URL or cause to the caller).

Why one stack: ``http://`` and ``https://`` go over the same client, so one
set of proxy (``HTTP_PROXY``, ``trust_env``) and TLS settings governs both;
the fast path (``gateway.fast``) posts on that client, or on a wire that
carries its settings whole.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CONNECTION_CLOSED

from ..fast import HttpLink

log = logging.getLogger("helmlog.proxy")


class _GoneSessionFilter(logging.Filter):
    """Drops the SDK's WARNING when the session it closes is already gone.

    A heal after an HTTP 404 (the upstream restarted or expired the session)
    closes the old transport, whose ``DELETE`` then meets a server that no
    longer knows the session: 404, the very end the ``DELETE`` asks for, not
    a failure worth an operator's attention. Any other status still warns.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _GONE


_GONE = "Session termination failed: 404"
logging.getLogger("mcp.client.streamable_http").addFilter(_GoneSessionFilter())

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
    url: str,
    label: str,
    http_client: HttpClientFactory | None = None,
    link: HttpLink | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """``(read, write)`` for a ``ClientSession`` to the Streamable HTTP ``url``.

    Args:
        url: the upstream's MCP endpoint (``http://`` or ``https://``).
        label: how the upstream is named in logs (never to a client, H4).
        http_client: makes the ``httpx2.AsyncClient``; the SDK's by default.
        link: given the client too, for the fast path's raw POSTs (``gateway.fast``).
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"an HTTP upstream is an http:// or https:// URL: {label}")
    make = http_client or default_http_client
    async with make() as client:
        answering(client)
        if link is not None:
            link.attach(client)
        async with streamable_http_client(url, http_client=client) as streams:
            yield streams


class _Answering(httpx2.AsyncBaseTransport):
    """A transport whose failed POST of a JSON-RPC request is answered.

    The SDK's client leaves a request whose POST raised (refused, reset, a
    JSON-answering server that died) waiting for ever; answered here with a
    JSON-RPC error carrying its id, the call fails at once as the SDK fails
    one whose connection closed (CONNECTION_CLOSED), and the proxy says the
    upstream went away (H4).
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self.inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            rid = _request_id(request)
            if rid is None:
                raise
            log.info("proxy: an upstream POST failed: %s", type(exc).__name__)
            error = {"code": CONNECTION_CLOSED, "message": "Connection closed"}
            body = {"jsonrpc": "2.0", "id": rid, "error": error}
            return httpx2.Response(
                502, json=body, request=request, headers={"x-helmlog": "answered"}
            )


def _request_id(request: httpx2.Request) -> Any:
    """The JSON-RPC id a POST carries, if it carries one request."""
    if request.method != "POST":
        return None
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    if isinstance(message, dict) and "method" in message:
        rid = message.get("id")
        if isinstance(rid, (str, int)) and not isinstance(rid, bool):
            return rid
    return None


def answering(client: httpx2.AsyncClient) -> None:
    """Route every request of ``client`` through ``_Answering``.

    httpx2 picks a transport per URL (its own, or a proxy's mount);
    ``_transport_for_url`` is where that choice is made, so wrapping it covers
    both without rebuilding a client the caller configured.
    """
    pick = client._transport_for_url

    def wrapped(url: httpx2.URL) -> httpx2.AsyncBaseTransport:
        return _Answering(pick(url))

    client._transport_for_url = wrapped  # type: ignore[method-assign]
