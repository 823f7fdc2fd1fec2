"""The request-and-answer routes of ``helmlog serve``, and who may call them.

Pattern: thin route functions: authorize a role, decode a Struct, call the
         service, encode a Struct; ``require`` is the one check of who calls.
Role:    gateway layer (http); ``_app`` mounts these; ``_streams`` shares
         ``require`` and ``service_of``.
Emits:   nothing itself; the service's runner records the sessions.

Laws: issue 11 item 2 (the role is checked before anything is read; ``by``
is the authenticated identity; a cookie POST needs ``X-Requested-With``),
H5 (the cookie is an opaque login id; ``/login|/logout`` check ``Origin``),
H2 (out of scope answers 404 as unknown, so ids do not leak), issue 28
(the session view and history for auditors, who never decide).

Why ``require`` runs first: an unauthenticated client learns nothing, not
even whether a session exists.
"""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit, urlunsplit

from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)

from helmlog.events import StoreError
from helmlog.runtime import wall_clock_ms

from ._audit import OUTCOMES, HistoryFilter
from ._auth import COOKIE, Authenticator, Principal, Role
from ._limits import check_length
from ._logins import Logins
from ._metrics import CONTENT_TYPE
from ._service import Service
from ._wire import (
    Decide,
    Health,
    HttpProblem,
    SendMessage,
    StartSession,
    decode_body,
    encode,
)
from .pages import (
    approvals_page,
    auditor_home,
    history_page,
    session_page,
    sign_in_page,
)

JSON: Final = "application/json"


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` encoded as JSON, with ``status``."""
    return Response(encode(value), status_code=status, media_type=JSON)


def service_of(request: Request) -> Service:
    """The application service the app's lifespan opened."""
    service: Service = request.app.state.service
    return service


def config_of(request: Request) -> Any:
    """The ``ServeConfig`` the app was made from (its limits, H3)."""
    return request.app.state.config


def logins_of(request: Request) -> Logins:
    """The page's live logins, held by this serving process (H5)."""
    logins: Logins = request.app.state.logins
    return logins


def principal_of(request: Request) -> Principal | None:
    """Who calls, by bearer token, trusted proxy header or login cookie (H5)."""
    auth: Authenticator = request.app.state.config.auth
    client = request.client.host if request.client else None
    return auth.authenticate(
        request.headers, client, request.cookies, logins_of(request).who
    )


def require(request: Request, *roles: Role) -> Principal:
    """The caller, if authenticated with one of ``roles``; else 401/403."""
    who = principal_of(request)
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
    check_length("message", body.message, config_of(request).max_message_chars)
    return json_response(await service_of(request).start(who, body.message), 201)


async def send_message(request: Request) -> Response:
    who = require(request, "session")
    body: SendMessage = decode_body(await request.body(), SendMessage)
    check_length("message", body.message, config_of(request).max_message_chars)
    sid = request.path_params["session_id"]
    return json_response(await service_of(request).send(who, sid, body.message))


async def get_session(request: Request) -> Response:
    """The session's fold as JSON; asked for HTML (a browser), its timeline
    for a person to read (issue 28 item 2)."""
    if wants_html(request):
        return await session_view(request)
    who = require(request, "session", "approver", "auditor")
    sid = request.path_params["session_id"]
    return json_response(await service_of(request).snapshot(who, sid))


def wants_html(request: Request) -> bool:
    """Whether the client asked for a page (a browser's ``Accept``)."""
    return "text/html" in request.headers.get("accept", "")


READ_ROLES: Final[tuple[Role, ...]] = ("session", "approver", "auditor")
SIGN_IN_TO_READ: Final = "Sign in to read this: an approver or auditor token."


async def session_view(request: Request) -> Response:
    """``GET /sessions/{id}`` as a page: the timeline and the chain's state."""
    who = principal_of(request)
    if who is None:
        return HTMLResponse(sign_in_page(SIGN_IN_TO_READ), status_code=401)
    who = require(request, *READ_ROLES)
    sid = request.path_params["session_id"]
    service = service_of(request)
    timeline = await service.timeline(who, sid)
    command = f"helmlog replay {sid} --store {_shown_url(service.store.url)} "
    command += "--otlp http://localhost:4318"
    return HTMLResponse(
        session_page(who.identity, frozenset(who.roles), timeline, command)
    )


async def export_session(request: Request) -> Response:
    """The session's events as a JSON-lines download (served, issue 28)."""
    who = require(request, *READ_ROLES)
    sid = request.path_params["session_id"]
    body = await service_of(request).export(who, sid)
    return Response(
        body,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{_file(sid)}.jsonl"'},
    )


def _file(sid: str) -> str:
    kept = "".join(c if c.isalnum() or c in "-_." else "_" for c in sid)
    return f"helmlog-{kept}"[:120]


def _shown_url(url: str) -> str:
    """A store URL without its credentials (shown on a page)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "URL"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


# -- history ----------------------------------------------------------------------


async def history(request: Request) -> Response:
    """``GET /history``: past decisions, filtered and paged (issue 28)."""
    who = principal_of(request)
    if who is None:
        return HTMLResponse(sign_in_page(SIGN_IN_TO_READ), status_code=401)
    who = require(request, "approver", "auditor")
    query = {k: v.strip() for k, v in request.query_params.items()}
    page = await service_of(request).decisions(who, history_filter(query))
    return HTMLResponse(history_page(who.identity, frozenset(who.roles), page, query))


MAX_PAGE_SIZE: Final = 200


def history_filter(query: dict[str, str]) -> HistoryFilter:
    """The filter a history query names; a malformed one is a 400."""
    outcome = query.get("outcome", "")
    if outcome and outcome not in OUTCOMES:
        raise HttpProblem(
            400, "ERR_BAD_REQUEST", f"outcome is one of {', '.join(OUTCOMES)}"
        )
    raw_page = query.get("page", "") or "1"
    if not raw_page.isdigit() or int(raw_page) < 1:
        raise HttpProblem(400, "ERR_BAD_REQUEST", "page is a number from 1")
    raw_size = query.get("size", "") or "20"
    if not raw_size.isdigit() or not 1 <= int(raw_size) <= MAX_PAGE_SIZE:
        raise HttpProblem(
            400, "ERR_BAD_REQUEST", f"size is a number from 1 to {MAX_PAGE_SIZE}"
        )
    return HistoryFilter(
        approver=query.get("approver", ""),
        rule=query.get("rule", ""),
        tool=query.get("tool", ""),
        outcome=outcome,
        since=_day(query, "since"),
        until=_day(query, "until"),
        page=int(raw_page),
        size=int(raw_size),
    )


def _day(query: dict[str, str], name: str) -> int | None:
    raw = query.get(name, "")
    if not raw:
        return None
    try:
        day = datetime.strptime(raw, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise HttpProblem(
            400, "ERR_BAD_REQUEST", f"{name} is a date, YYYY-MM-DD (UTC)"
        ) from None
    return int(day.timestamp() * 1000)


# -- asks -----------------------------------------------------------------------


async def list_asks(request: Request) -> Response:
    who = require(request, "approver")
    return json_response(await service_of(request).asks(who))


async def decide(request: Request) -> Response:
    who = require(request, "approver")
    body: Decide = decode_body(await request.body(), Decide)
    check_length("note", body.note, config_of(request).max_note_chars)
    verdict = request.path_params["verdict"]
    if verdict not in ("approve", "decline"):
        raise HttpProblem(404, "ERR_NOT_FOUND", f"no decision {verdict!r}")
    out = await service_of(request).decide(
        who.identity,
        request.path_params["session_id"],
        request.path_params["call_id"],
        approved=verdict == "approve",
        note=body.note or None,
        scope=who,
    )
    return json_response(out)


# -- the page ---------------------------------------------------------------------


BAD_TOKEN: Final = "That token is not valid: sign in with an approver token."
ENDED: Final = "Your sign-in has expired or was ended: sign in again."


def not_an_approver(who: Principal) -> str:
    """What the page says to a caller who may not decide (issue 28)."""
    return (
        f"You are signed in as {who.identity}, who may not decide asks: "
        "sign in with an approver token."
    )


async def home(request: Request) -> Response:
    who = principal_of(request)
    roles = frozenset(who.roles) if who is not None else frozenset()
    if who is not None and who.can("approver"):
        service = service_of(request)
        cards = await service.cards(who)
        decided = await service.recent(who)
        return HTMLResponse(
            approvals_page(who.identity, roles, cards, decided, wall_clock_ms())
        )
    if who is not None and who.can("auditor"):
        return HTMLResponse(auditor_home(who.identity, roles))
    if who is not None:
        return HTMLResponse(sign_in_page(not_an_approver(who)), status_code=403)
    stale = COOKIE in request.cookies
    response = HTMLResponse(sign_in_page(ENDED if stale else None))
    if stale:
        _forget_cookie(request, response)
    return response


async def login(request: Request) -> Response:
    """Check the form's token; sign in with a fresh login id, never the token (H5)."""
    _same_origin(request)
    form = parse_qs((await request.body()).decode(errors="replace"))
    token = (form.get("token") or [""])[0].strip()
    auth: Authenticator = request.app.state.config.auth
    who = auth.by_token(token) if token else None
    if who is None or not (who.can("approver") or who.can("auditor")):
        # One message for an unknown token and a session token: the form does
        # not tell a guesser which tokens exist.
        return HTMLResponse(sign_in_page(BAD_TOKEN), status_code=401)
    logins = logins_of(request)
    previous = request.cookies.get(COOKIE)
    if previous:
        logins.revoke(previous)  # a new sign-in never keeps an id set before it
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        logins.open(who),
        max_age=max(1, math.ceil(logins.ttl_s)),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """Revoke the login server-side, then clear the cookie (H5)."""
    _same_origin(request)
    kept = request.cookies.get(COOKIE)
    if kept:
        logins_of(request).revoke(kept)
    response = RedirectResponse("/", status_code=303)
    _forget_cookie(request, response)
    return response


def _forget_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _same_origin(request: Request) -> None:
    """Refuse (403) a sign-in or sign-out not sent from this server's page.

    The ``Origin`` header (a browser sends it on every POST), else the
    ``Referer``'s origin, must be this server's own: its scheme (``https``
    only as H1 believes it) and its ``Host``. Neither, ``null`` or another
    origin is refused: a cross-site form can neither sign a person in as
    someone else (login CSRF) nor sign them out.
    """
    sent = request.headers.get("origin") or request.headers.get("referer")
    own = _origin(f"{request.url.scheme}://{request.headers.get('host', '')}/")
    if sent is None or own is None or _origin(sent) != own:
        raise HttpProblem(
            403,
            "ERR_FORBIDDEN",
            "sign-in and sign-out are accepted only from this server's own page "
            "(Origin)",
        )


# -- operations -------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    service = service_of(request)
    with service.metrics.timed("helmlog_store_seconds", op="head"):
        await service.store.head("helmlog-healthz")
    return json_response(Health(store=service.store.url))


async def metrics(request: Request) -> Response:
    service = service_of(request)
    gauges: dict[str, float] = {}
    with contextlib.suppress(StoreError):  # a scrape still answers; 503 is /healthz's
        gauges["helmlog_asks_pending"] = await service.pending_count()
    return PlainTextResponse(service.metrics.render(gauges), media_type=CONTENT_TYPE)
