"""One way to run an ASGI app on uvicorn: its config, its server, a serving block.

Pattern: a ``uvicorn.Config`` factory (``server_config``), a ``uvicorn.Server``
         that runs a hook as it starts shutting down (``Server``), and an
         async context manager that serves inside a block (``serving``).
Role:    gateway layer; every network edge that speaks HTTP (``gateway.http``
         for ``helmlog serve``, the MCP proxy, ``mcp_serve``) starts here.
Emits:   nothing.

Laws: H1 (``forwarded_allow_ips``), H3 (``limit_concurrency``, the header
timeout protocol passed as ``http``), P18 (leaving the block shuts down
gracefully: the app's lifespan ends).

Why ``on_shutdown``: open streams (SSE) would hold a graceful shutdown
forever; the hook tells the app to end them the moment shutdown begins.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

import anyio
import uvicorn

#: How long ``serving`` waits for the socket to listen.
START_TIMEOUT_S = 30.0


def server_config(
    app: Any,
    *,
    host: str,
    port: int,
    lifespan: Literal["auto", "on", "off"] = "auto",
    limit_concurrency: int | None = None,
    timeout_keep_alive: int = 5,
    timeout_graceful_shutdown: int | None = None,
    forwarded_allow_ips: Sequence[str] | None = None,
    http: type[asyncio.Protocol] | str = "auto",
) -> uvicorn.Config:
    """The uvicorn config of a helmlog edge (uvicorn's logs: warnings only).

    ``forwarded_allow_ips``: ``None`` keeps uvicorn's default (it believes
    ``X-Forwarded-*`` from 127.0.0.1); a sequence believes exactly those
    proxies, and an empty one believes none (H1). ``limit_concurrency``:
    past it uvicorn answers 503 (H3). ``http``: uvicorn's HTTP protocol, a
    name or a class (the header-timeout protocol of ``gateway.http``).
    """
    believe: dict[str, Any] = {}
    if forwarded_allow_ips is not None:
        believe = {
            "proxy_headers": bool(forwarded_allow_ips),
            "forwarded_allow_ips": list(forwarded_allow_ips) or None,
        }
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan=lifespan,
        limit_concurrency=limit_concurrency,
        timeout_keep_alive=timeout_keep_alive,
        timeout_graceful_shutdown=timeout_graceful_shutdown,
        http=http,
        **believe,
    )


class Server(uvicorn.Server):
    """uvicorn's server, calling ``on_shutdown`` as soon as it shuts down."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: Any = None) -> None:
        if self._on_shutdown is not None:
            self._on_shutdown()
        await super().shutdown(sockets)


@contextlib.asynccontextmanager
async def serving(server: uvicorn.Server, *, name: str) -> AsyncIterator[int]:
    """Serve inside the block; yields the bound port (port 0 picks one).

    Raises ``OSError`` naming ``name`` when the server gives up before it
    listens (uvicorn itself still exits, ``SystemExit``, on an address in
    use, as the edges did before this helper). Leaving the block asks the
    server to exit and waits for its graceful shutdown (the lifespan ends).
    """
    config = server.config
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(START_TIMEOUT_S):
            while not server.started:
                if server.should_exit:
                    raise OSError(
                        f"{name} could not listen on {config.host}:{config.port}"
                    )
                await anyio.sleep(0.01)
        bound: int = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield bound
        finally:
            server.should_exit = True
