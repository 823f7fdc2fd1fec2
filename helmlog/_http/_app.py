"""The Starlette app of ``helmlog serve``: routes, roles, SSE, problems.

Pattern: thin route functions (decode a Struct, authorize a role, call the
         service, encode a Struct); one lifespan that opens the store, builds
         the agent (in process or on a cluster) and runs the deadline sweep.
Role:    the face; ``helmlog serve`` runs it on uvicorn, tests run it too.
Emits:   nothing itself; the service's runner records the sessions.

Routes: ``POST /sessions``, ``POST /sessions/{id}/messages``,
``GET /sessions/{id}`` (snapshot, redacted), ``GET /sessions/{id}/events``
(SSE, facts only), ``GET /asks`` (+ ``/asks/events``, SSE),
``POST /asks/{session}/{call}/approve|decline``, ``GET /`` (the approvals
page, with ``POST /login|/logout`` and ``/page/asks/events``),
``GET /healthz``, ``GET /metrics``.

Laws: issue 11 items 1–4 (see ``_service`` and ``_wire``), item 2 in
particular: the role a route needs is checked before anything is read or
run — ``session`` starts and continues sessions, ``approver`` reads and
decides asks; a decision's ``by`` is the authenticated identity. A
cookie-authenticated POST must carry ``X-Requested-With: helmlog`` (a header
no cross-site form can set), besides the cookie being ``SameSite=Strict``.

Why SSE by polling the store: the stream is the truth and any replica can
serve any session, so each event stream reads the store after its cursor
(``Last-Event-ID`` resumes it) rather than a replica's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Match, Route

from helmlog.events import EventStore, HelmlogError, StoreError, open_event_store
from helmlog.runtime import wall_clock_ms

from ._auth import COOKIE, Authenticator, Principal, Role
from ._metrics import CONTENT_TYPE, Metrics
from ._page import asks_fragment, page
from ._service import ClusterRunner, LocalRunner, Runner, Service
from ._wire import (
    PROBLEM_TYPE,
    Decide,
    Health,
    HttpProblem,
    Problem,
    SendMessage,
    StartSession,
    decode_body,
    encode,
    problem,
    problem_of,
)

log = logging.getLogger("helmlog.serve")

JSON: Final = "application/json"
SESSION_POLL_S: Final = 0.2
ASKS_POLL_S: Final = 0.5
HEARTBEAT_S: Final = 15.0


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


def _json(value: Any, status: int = 200) -> Response:
    return Response(encode(value), status_code=status, media_type=JSON)


def _problem(p: Problem) -> Response:
    headers = {"Retry-After": "1"} if p.retryable else None
    return Response(
        encode(p), status_code=p.status, media_type=PROBLEM_TYPE, headers=headers
    )


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _principal(request: Request) -> Principal | None:
    auth: Authenticator = request.app.state.config.auth
    client = request.client.host if request.client else None
    return auth.authenticate(request.headers, client, request.cookies)


def require(request: Request, *roles: Role) -> Principal:
    """The caller, if authenticated with one of ``roles``; else 401/403."""
    who = _principal(request)
    if who is None:
        raise HttpProblem(
            401, "ERR_UNAUTHENTICATED", "authenticate with a bearer token"
        )
    if not any(who.can(r) for r in roles):
        raise HttpProblem(
            403,
            "ERR_FORBIDDEN",
            f"{who.identity!r} lacks the role this needs ({' or '.join(roles)})",
        )
    if (
        who.via == "cookie"
        and request.method == "POST"
        and request.headers.get("x-requested-with") != "helmlog"
    ):
        raise HttpProblem(
            403, "ERR_FORBIDDEN", "a cookie-authenticated POST needs X-Requested-With"
        )
    return who


# -- sessions -------------------------------------------------------------------


async def start_session(request: Request) -> Response:
    who = require(request, "session")
    body: StartSession = decode_body(await request.body(), StartSession)
    return _json(await _service(request).start(who, body.message), 201)


async def send_message(request: Request) -> Response:
    who = require(request, "session")
    body: SendMessage = decode_body(await request.body(), SendMessage)
    sid = request.path_params["session_id"]
    return _json(await _service(request).send(who, sid, body.message))


async def get_session(request: Request) -> Response:
    require(request, "session", "approver")
    return _json(await _service(request).snapshot(request.path_params["session_id"]))


async def session_events(request: Request) -> Response:
    require(request, "session", "approver")
    service = _service(request)
    sid = request.path_params["session_id"]
    if not await service.exists(sid):
        raise HttpProblem(
            404, "ERR_UNKNOWN_SESSION", f"no session '{sid}'", session_id=sid
        )
    after = _last_event_id(request)

    async def events() -> AsyncIterator[bytes]:
        nonlocal after
        while True:
            facts = await service.facts(sid, after)
            for seq, data in facts:
                yield _sse("middleware.decision", data, seq)
            # With nothing new, skip past records that are not facts.
            after = facts[-1][0] if facts else max(after, await _head(service, sid))
            yield_ = await _wait(request, SESSION_POLL_S)
            if yield_ is None:
                return
            if yield_:
                yield b": keep-alive\n\n"

    return _stream(events())


async def _head(service: Service, sid: str) -> int:
    seq, _ = await service.store.head(sid)
    return seq


# -- asks -----------------------------------------------------------------------


async def list_asks(request: Request) -> Response:
    require(request, "approver")
    return _json(await _service(request).asks())


async def asks_events(request: Request) -> Response:
    require(request, "approver")
    service = _service(request)
    return _stream(_asks_stream(request, lambda: _asks_json(service), "asks"))


async def page_asks_events(request: Request) -> Response:
    require(request, "approver")
    service = _service(request)

    async def fragment() -> bytes:
        return asks_fragment(await service.asks(), wall_clock_ms()).encode()

    return _stream(_asks_stream(request, fragment, "asks"))


async def _asks_json(service: Service) -> bytes:
    return encode(await service.asks())


async def _asks_stream(
    request: Request, render: Callable[[], Awaitable[bytes]], name: str
) -> AsyncIterator[bytes]:
    """Send ``render()`` when it changes; a store that is down is a problem event."""
    last: bytes | None = None
    while True:
        try:
            data = await render()
        except StoreError as exc:
            data = encode(problem_of(exc))
            yield _sse("problem", data)
        else:
            if data != last:
                last = data
                yield _sse(name, data)
        beat = await _wait(request, ASKS_POLL_S)
        if beat is None:
            return
        if beat:
            yield b": keep-alive\n\n"


async def decide(request: Request) -> Response:
    who = require(request, "approver")
    body: Decide = decode_body(await request.body(), Decide)
    verdict = request.path_params["verdict"]
    if verdict not in ("approve", "decline"):
        raise HttpProblem(404, "ERR_NOT_FOUND", f"no decision {verdict!r}")
    out = await _service(request).decide(
        who.identity,
        request.path_params["session_id"],
        request.path_params["call_id"],
        approved=verdict == "approve",
        note=body.note or None,
    )
    return _json(out)


# -- the page ---------------------------------------------------------------------


async def home(request: Request) -> Response:
    who = _principal(request)
    if who is None or not who.can("approver"):
        return HTMLResponse(page(None, (), 0), status_code=200 if who is None else 403)
    asks = await _service(request).asks()
    return HTMLResponse(page(who.identity, asks, wall_clock_ms()))


async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode(errors="replace"))
    token = (form.get("token") or [""])[0].strip()
    auth: Authenticator = request.app.state.config.auth
    who = auth.by_token(token) if token else None
    if who is None or not who.can("approver"):
        return HTMLResponse(page(None, (), 0), status_code=401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE)
    return response


# -- operations -------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    service = _service(request)
    with service.metrics.timed("helmlog_store_seconds", op="head"):
        await service.store.head("helmlog-healthz")
    return _json(Health(store=service.store.url))


async def metrics(request: Request) -> Response:
    service = _service(request)
    gauges: dict[str, float] = {}
    with contextlib.suppress(StoreError):  # a scrape still answers; 503 is /healthz's
        gauges["helmlog_asks_pending"] = await service.pending_count()
    return PlainTextResponse(service.metrics.render(gauges), media_type=CONTENT_TYPE)


# -- plumbing ---------------------------------------------------------------------


def _sse(name: str, data: bytes, event_id: int | None = None) -> bytes:
    head = f"event: {name}\n".encode()
    if event_id is not None:
        head += f"id: {event_id}\n".encode()
    body = b"".join(b"data: " + line + b"\n" for line in data.split(b"\n"))
    return head + body + b"\n"


def _stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _last_event_id(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after")
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        raise HttpProblem(400, "ERR_BAD_REQUEST", "Last-Event-ID is a seq") from None


async def _wait(request: Request, seconds: float) -> bool | None:
    """Sleep between polls; ``None`` when the client left or the server stops,
    ``True`` when a keep-alive is due."""
    closing: asyncio.Event = request.app.state.config.closing
    beats: list[float] = request.scope.setdefault("helmlog.beat", [0.0])
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(closing.wait(), seconds)
    if closing.is_set() or await request.is_disconnected():
        return None
    beats[0] += seconds
    if beats[0] >= HEARTBEAT_S:
        beats[0] = 0.0
        return True
    return False


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
    Route("/sessions", _counted(start_session), methods=["POST"]),
    Route("/sessions/{session_id}", _counted(get_session), methods=["GET"]),
    Route("/sessions/{session_id}/messages", _counted(send_message), methods=["POST"]),
    Route("/sessions/{session_id}/events", _counted(session_events), methods=["GET"]),
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
            if config.cluster is None:
                runner = LocalRunner(local, lambda: uuid.uuid4().hex)
            else:
                cluster = _join_cluster(config)
                runner = ClusterRunner(cluster.agent(config.factory))
            service = Service(
                store,
                runner,
                redact=local.config.redact,
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
        exception_handlers={
            HttpProblem: _on_problem,
            HelmlogError: _on_helmlog,
            HTTPException: _on_http,
        },
    )
    app.state.config = config
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
