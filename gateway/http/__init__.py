"""helmlog.gateway.http — the HTTP API and the approvals page (``helmlog serve``).

Pattern: a Starlette app (``_app``) over its routes (``_routes``; SSE in
         ``_streams``), an application service (``_service``), typed bodies
         and problems (``_wire``), an authenticator (``_auth``), logins, a
         page renderer and counters; ``serve`` runs it on the gateway's
         uvicorn helper with the header-timeout protocol (``_protocol``).
Role:    gateway layer (a network edge); the CLI's ``serve`` and
         ``approve|decline`` and the tests use it.

Laws: issue 11 (items 1–4), H1, H3, H5 (see each module).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from .._uvicorn import Server as _UvicornServer
from .._uvicorn import server_config
from ._app import ServeConfig, create_app
from ._auth import (
    AuthConfigError,
    Authenticator,
    Principal,
    approver_from_environment,
    token_digest,
)
from ._protocol import header_timeout_protocol

__all__ = [
    "AuthConfigError",
    "Authenticator",
    "Principal",
    "ServeConfig",
    "Server",
    "approver_from_environment",
    "create_app",
    "serve",
    "token_digest",
]


class Server(_UvicornServer):
    """The app of ``config`` on uvicorn; shutting down ends its event streams."""

    def __init__(
        self,
        config: ServeConfig,
        host: str,
        port: int,
        ready: Callable[[str], None] | None = None,
    ) -> None:
        self.serve_config = config
        self._ready = ready
        super().__init__(
            server_config(
                create_app(config),
                host=host,
                port=port,
                lifespan="on",
                timeout_graceful_shutdown=5,
                # H1: only the proxies the operator names are believed.
                forwarded_allow_ips=config.forwarded_allow_ips,
                # H3: 503 past max_connections; a late request head closes.
                limit_concurrency=config.max_connections,
                http=header_timeout_protocol(config.header_timeout_s),
            ),
            on_shutdown=config.closing.set,
        )

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup; then ``ready`` hears the bound URL (port 0's too)."""
        await super().startup(sockets)
        if self.started and self._ready is not None:
            self._ready(_url(self.servers[0].sockets[0].getsockname()))


def _url(name: Any) -> str:
    host, port = name[0], name[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    config: ServeConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Run the app until interrupted; ``ready`` hears its URL once it listens."""
    Server(config, host, port, ready).run()
