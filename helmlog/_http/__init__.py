"""``helmlog serve``: the HTTP API, the approvals page, authenticated approvers.

Pattern: a Starlette app (``_app``: the route table, the lifespan, the
         problems) over its routes (``_routes``, request and answer;
         ``_streams``, SSE), an application service (``_service``), typed
         bodies and problems (``_wire``), an authenticator (``_auth``), a
         page renderer (``_page``) and counters (``_metrics``); ``serve``
         runs it on uvicorn.
Role:    the face (private): the CLI's ``serve`` and the tests use it.
Emits:   nothing itself.

Laws: issue 11 (items 1–4; see each module).

Why ``serve`` subclasses ``uvicorn.Server``: open event streams would hold a
graceful shutdown forever; the app's ``closing`` event ends them the moment
the server starts shutting down, so Ctrl-C stops it at once.
"""

from __future__ import annotations

from typing import Any

import uvicorn

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


class Server(uvicorn.Server):
    """uvicorn, ending the app's event streams as soon as it shuts down."""

    def __init__(self, config: ServeConfig, host: str, port: int) -> None:
        self.serve_config = config
        super().__init__(
            uvicorn.Config(
                create_app(config),
                host=host,
                port=port,
                log_level="warning",
                lifespan="on",
                timeout_graceful_shutdown=5,
                # H1: uvicorn believes X-Forwarded-For from 127.0.0.1 unless
                # told otherwise, so a sidecar could claim any address; only
                # the proxies the operator names are believed.
                proxy_headers=bool(config.forwarded_allow_ips),
                forwarded_allow_ips=list(config.forwarded_allow_ips) or None,
                # H3: past this many connections uvicorn answers 503 at once;
                # an idle kept-alive connection is closed after 5 s, and one
                # whose request head is late after header_timeout_s.
                limit_concurrency=config.max_connections,
                timeout_keep_alive=5,
                http=header_timeout_protocol(config.header_timeout_s),
            )
        )

    async def shutdown(self, sockets: Any = None) -> None:
        self.serve_config.closing.set()
        await super().shutdown(sockets)


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the app until interrupted."""
    Server(config, host, port).run()
