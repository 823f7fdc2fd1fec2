"""The HTTP proxy under uvicorn: a block that serves, a call that serves forever.

Pattern: async context manager and coroutine around ``uvicorn.Server``
         running the proxy's ASGI app (``ProxyHttpApp``).
Role:    gateway layer; ``McpProxy.http_server()`` and
         ``McpProxy.serve_http()``, hence ``helmlog mcp-proxy --http``.
Emits:   one warning when bound beyond loopback with no identity resolver.

Laws: P24 (loopback by default; bound elsewhere without a resolver, one
warning naming the host; the bound host joins the ``Host`` allow-list), P18
(leaving the block shuts the server down gracefully: its lifespan ends every
session).

Why uvicorn's ``auto`` HTTP implementation is left to choose: with
``httptools`` installed (a dependency) it parses in C, which is most of the
server's own cost per request; without it, h11 serves the same app.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from ._proxy_http import LOOPBACK, ProxyHttpApp

if TYPE_CHECKING:
    from ._proxy import McpProxy

log = logging.getLogger("helmlog.proxy")

_warned: list[bool] = []


@contextlib.asynccontextmanager
async def http_server(
    proxy: McpProxy, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve ``proxy`` with uvicorn inside the block; yields the endpoint URL.

    Port 0 picks a free port. Leaving the block stops the server gracefully
    (its lifespan shutdown ends every session, P18).
    """
    import uvicorn

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
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(30):
            while not server.started:
                if server.should_exit:
                    raise OSError(f"the HTTP proxy could not listen on {host}:{port}")
                await anyio.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()[1]
        shown = "127.0.0.1" if host == "0.0.0.0" else host
        try:
            yield f"http://{shown}:{bound}/mcp"
        finally:
            server.should_exit = True


async def serve_http(
    proxy: McpProxy, host: str, port: int, *, ready: Any = None
) -> None:
    """Serve ``proxy`` on ``host:port`` until cancelled (P24).

    ``ready(url)`` is called once the socket listens.
    """
    async with http_server(proxy, host, port) as url:
        if ready is not None:
            ready(url)
        await anyio.sleep_forever()
