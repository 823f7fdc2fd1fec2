"""The HTTP proxy under uvicorn: a block that serves, a call that serves forever.

Pattern: an async context manager and a coroutine around the gateway's one
         uvicorn start-up helper (``gateway/_uvicorn.py``) running the
         proxy's ASGI app (``ProxyHttpApp``).
Role:    gateway layer; ``McpProxy.http_server()`` and
         ``McpProxy.serve_http()``, hence ``helmlog mcp-proxy --http``.
Emits:   one warning when bound beyond loopback with no identity resolver.

Laws: P24 (loopback by default; bound elsewhere without a resolver, one
warning naming the host; the bound host joins the ``Host`` allow-list), P18
(leaving the block shuts the server down gracefully: its lifespan ends every
session).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import anyio

from .._uvicorn import Server, server_config, serving
from ..fast import OneWriteProtocol
from ._http import LOOPBACK, ProxyHttpApp, SessionHost

log = logging.getLogger("helmlog.proxy")

_warned: list[bool] = []


class HttpHost(SessionHost, Protocol):
    """The proxy as its HTTP server sees it: a session host with a resolver."""

    resolve_identity: Any


@contextlib.asynccontextmanager
async def http_server(
    proxy: HttpHost, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve ``proxy`` with uvicorn inside the block; yields the endpoint URL.

    Port 0 picks a free port. Leaving the block stops the server gracefully
    (its lifespan shutdown ends every session, P18).
    """
    if host not in LOOPBACK and proxy.resolve_identity is None and not _warned:
        _warned.append(True)
        log.warning(
            "helmlog mcp-proxy is bound to %s without an identity resolver: "
            "anyone who can reach it can call the upstream",
            host,
        )
    app = ProxyHttpApp(proxy)
    if host not in LOOPBACK:
        app.allowed_hosts += [host, f"{host}:*"]
    # P25: the same bytes, an answer's head and body in one write (``gateway.fast``)
    server = Server(server_config(app, host=host, port=port, http=OneWriteProtocol))
    async with serving(server, name="the HTTP proxy") as bound:
        shown = "127.0.0.1" if host == "0.0.0.0" else host
        yield f"http://{shown}:{bound}/mcp"


async def serve_http(
    proxy: HttpHost, host: str, port: int, *, ready: Any = None
) -> None:
    """Serve ``proxy`` on ``host:port`` until cancelled (P24).

    ``ready(url)`` is called once the socket listens.
    """
    async with http_server(proxy, host, port) as url:
        if ready is not None:
            ready(url)
        await anyio.sleep_forever()
