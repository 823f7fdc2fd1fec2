"""The Starlette app of ``helmlog serve``: its routes, its lifespan, its problems.

Pattern: one route table over ``_routes`` and ``_streams`` (SSE), each route
         counted; a lifespan that opens the store, builds the agent (in
         process or on a cluster) and runs the deadline sweep; handlers that
         turn every error into an RFC 9457 problem.
Role:    gateway layer (http); ``helmlog serve`` runs it, tests run it too.
Emits:   nothing itself; the service's runner records the sessions.

Laws: issue 11 items 1–4 (roles checked by each route before anything is
read; the sweep declines an ask past its deadline as ``timeout``).

Why the agent is built in the lifespan: the factory must build on the store
the app opened, and a cluster is joined and left with the app. The factory
may build an ``mcp_serve`` result, an ``McpProxy`` or an integration's
``Governance`` instead (S10, P14, issue 27): anything ``DecidesAsks``; the
page then lists and decides its asks (``ServedRunner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route

from helmlog.events import EventStore, HelmlogError, open_event_store

from ._access import AccessLog
from ._auth import Authenticator
from ._limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_MESSAGE_CHARS,
    DEFAULT_MAX_NOTE_CHARS,
    BodyLimit,
)
from ._logins import DEFAULT_LOGIN_TTL_S, DEFAULT_MAX_LOGINS, Logins
from ._metrics import Metrics
from ._protocol import DEFAULT_HEADER_TIMEOUT_S
from ._routes import (
    decide,
    export_session,
    get_session,
    healthz,
    history,
    home,
    list_asks,
    login,
    logout,
    metrics,
    send_message,
    start_session,
)
from ._service import (
    ClusterRunner,
    DecidesAsks,
    LocalRunner,
    Runner,
    ServedRunner,
    Service,
)
from ._streams import asks_events, page_asks_events, session_events
from ._wire import (
    ERR_BAD_REQUEST,
    PROBLEM_TYPE,
    HttpProblem,
    Problem,
    encode,
    problem,
    problem_of,
)

log = logging.getLogger("helmlog.serve")

# H3: connections served at once; past it uvicorn answers 503 at once.
DEFAULT_MAX_CONNECTIONS = 1_000


@dataclass(frozen=True)
class ServeConfig:
    """What ``helmlog serve`` was told: the agent, the store, who may do what."""

    factory: Callable[[EventStore], Any]
    auth: Authenticator
    store_url: str = "memory://"
    cluster: str | None = None
    chain_key: bytes | None = None
    ask_timeout_s: float | None = None
    sweep_s: float = 1.0
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    # H1: the proxies whose X-Forwarded-* headers are believed (addresses or
    # networks, as uvicorn's forwarded_allow_ips). Empty: none, so a request's
    # client is its socket peer, whatever headers it carries.
    forwarded_allow_ips: tuple[str, ...] = ()
    # H3: what one request may carry, and how many connections are served.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    max_note_chars: int = DEFAULT_MAX_NOTE_CHARS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    # H3: a connection whose request head is not in within this many seconds
    # (of opening, or of the request's first byte) is closed.
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    # H5: how long a page login lives (its cookie's Max-Age), and how many
    # are held at once (the oldest is dropped past it). Logins live in this
    # process: several replicas need sticky sessions or the trusted header.
    login_ttl_s: float = DEFAULT_LOGIN_TTL_S
    max_logins: int = DEFAULT_MAX_LOGINS


def _problem(p: Problem) -> Response:
    headers = {"Retry-After": "1"} if p.retryable else None
    return Response(
        encode(p), status_code=p.status, media_type=PROBLEM_TYPE, headers=headers
    )


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpProblem)
    _count(request, exc.problem.status)
    return _problem(exc.problem)


async def _on_helmlog(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HelmlogError)
    p = problem_of(exc, request.path_params.get("session_id"))
    _count(request, p.status)
    return _problem(p)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = "ERR_NOT_FOUND" if exc.status_code == 404 else "ERR_HTTP"
    _count(request, exc.status_code)
    return _problem(problem(exc.status_code, code, str(exc.detail)))


async def _on_disconnect(request: Request, exc: Exception) -> Response:
    # The client left before its body was in: no one hears the answer, but
    # it is a refusal (counted), not the server's error (issue 24's fuzz).
    assert isinstance(exc, ClientDisconnect)
    _count(request, 400)
    return _problem(
        problem(400, ERR_BAD_REQUEST, "the client closed the request before its body")
    )


def _count(request: Request, status: int) -> None:
    service: Service | None = getattr(request.app.state, "service", None)
    if service is None:
        return
    route = "unmatched"
    for candidate in request.app.routes:
        if candidate.matches(request.scope)[0] == Match.FULL:
            route = getattr(candidate, "path", "unmatched")
            break
    service.metrics.inc(
        "helmlog_http_requests_total",
        route=route,
        method=request.method,
        status=str(status),
    )


def _counted(handler: Callable[[Request], Awaitable[Response]]) -> Any:
    async def counted(request: Request) -> Response:
        response = await handler(request)
        _count(request, response.status_code)
        return response

    counted.__name__ = handler.__name__
    return counted


ROUTES: Final = [
    Route("/", _counted(home), methods=["GET"]),
    Route("/login", _counted(login), methods=["POST"]),
    Route("/logout", _counted(logout), methods=["POST"]),
    Route("/page/asks/events", _counted(page_asks_events), methods=["GET"]),
    Route("/history", _counted(history), methods=["GET"]),
    Route("/sessions", _counted(start_session), methods=["POST"]),
    Route("/sessions/{session_id}", _counted(get_session), methods=["GET"]),
    Route("/sessions/{session_id}/messages", _counted(send_message), methods=["POST"]),
    Route("/sessions/{session_id}/events", _counted(session_events), methods=["GET"]),
    Route("/sessions/{session_id}/export", _counted(export_session), methods=["GET"]),
    Route("/asks", _counted(list_asks), methods=["GET"]),
    Route("/asks/events", _counted(asks_events), methods=["GET"]),
    Route(
        "/asks/{session_id}/{call_id}/{verdict:str}",
        _counted(decide),
        methods=["POST"],
    ),
    Route("/healthz", _counted(healthz), methods=["GET"]),
    Route("/metrics", _counted(metrics), methods=["GET"]),
]


def create_app(config: ServeConfig) -> Starlette:
    """The app for ``config``; the store and agent are opened by its lifespan."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = open_event_store(config.store_url, chain_key=config.chain_key)
        cluster: Any = None
        try:
            local = config.factory(store)
            if getattr(local, "store", None) is not store:
                raise ValueError(
                    "the --agent function must build its agent on the store it is given"
                )
            runner: Runner
            redact = None
            if isinstance(local, DecidesAsks):
                # S10: the served tools' (or the proxy governance's, P14, or
                # an integration's, issue 27) asks, decided here; their calls
                # start over MCP or in their framework.
                if config.cluster is not None:
                    raise ValueError(
                        "--cluster runs agents' sessions; an mcp_serve result's, "
                        "an McpProxy's or a Governance's asks are decided in "
                        "this process"
                    )
                runner = ServedRunner(local)
            elif config.cluster is None:
                runner = LocalRunner(local, lambda: uuid.uuid4().hex)
                redact = local.config.redact
            else:
                cluster = _join_cluster(config)
                runner = ClusterRunner(cluster.agent(config.factory))
                redact = local.config.redact
            service = Service(
                store,
                runner,
                redact=redact,
                metrics=Metrics(),
                ask_timeout_s=config.ask_timeout_s,
            )
            app.state.service = service
            app.state.config = config
            sweep = asyncio.create_task(_sweep(service, config))
            try:
                yield
            finally:
                config.closing.set()
                sweep.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweep
        finally:
            if cluster is not None:
                await cluster.shutdown()
            await store.close()

    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        middleware=[
            # Outermost: a 413 or a 500 is logged too (silent unless enabled).
            Middleware(AccessLog),
            Middleware(BodyLimit, max_bytes=config.max_body_bytes),
        ],
        exception_handlers={
            HttpProblem: _on_problem,
            HelmlogError: _on_helmlog,
            HTTPException: _on_http,
            ClientDisconnect: _on_disconnect,
        },
    )
    app.state.config = config
    app.state.logins = Logins(config.login_ttl_s, config.max_logins)
    return app


def _join_cluster(config: ServeConfig) -> Any:
    from helmlog.actors import Cluster

    target = config.cluster or ""
    if ":" in target:
        return Cluster.connect(target, config.store_url, chain_key=config.chain_key)
    return Cluster.local(config.store_url, name=target, chain_key=config.chain_key)


async def _sweep(service: Service, config: ServeConfig) -> None:
    """Decline asks past their deadline, every ``sweep_s`` (issue 11 item 4)."""
    while not config.closing.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(config.closing.wait(), config.sweep_s)
        if config.closing.is_set():
            return
        try:
            await service.expire()
        except HelmlogError as exc:
            # The deadline is kept in the record: the next sweep tries again
            # (a store that is down, a session that fails verification).
            log.warning("deadline sweep: %s: %s", type(exc).__name__, exc)
