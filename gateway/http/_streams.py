"""The event-stream routes of ``helmlog serve``: facts and asks as SSE.

Pattern: each route authorizes a role, then streams by polling the store
         (a session's facts after a cursor, or the pending asks as they
         change), with a keep-alive comment every ``HEARTBEAT_S``.
Role:    gateway layer (http); ``_app`` mounts these beside ``_routes``.
Emits:   nothing: it reads the store and writes Server-Sent Events.

Laws: issue 11 items 1–2, H2 (only what the caller sees, else 404), G49
(facts only), R4 (each fact once per cursor; ``Last-Event-ID`` resumes),
issue 28 item 1 (the page's decided asks, live).

Why polling the store: any replica serves any session, so a stream reads the
truth, not a replica's memory. A stream ends when the server starts closing
(the app's ``closing`` event), or it would hold a graceful shutdown forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from helmlog.events import StoreError
from helmlog.runtime import wall_clock_ms

from ._audit import Resolution
from ._auth import Principal
from ._routes import principal_of, require, service_of
from ._service import RECENT, Service
from ._wire import HttpProblem, encode, problem_of
from .pages import asks_fragment

SESSION_POLL_S: Final = 0.2
ASKS_POLL_S: Final = 0.5
HEARTBEAT_S: Final = 15.0


async def session_events(request: Request) -> Response:
    who = require(request, "session", "approver", "auditor")
    service = service_of(request)
    sid = request.path_params["session_id"]
    await service.check_sees(who, sid)  # H2: out of scope is unknown, 404
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


async def asks_events(request: Request) -> Response:
    who = require(request, "approver")
    service = service_of(request)
    return _stream(_asks_stream(request, lambda: _asks_json(service, who), "asks"))


async def page_asks_events(request: Request) -> Response:
    """The approvals page's cards as they change: an ask that leaves the
    pending list is shown decided, by whom and when (issue 28 item 1)."""
    who = require(request, "approver")
    service = service_of(request)
    decided: list[Resolution] = list(await service.recent(who))
    shown: dict[tuple[str, str], int] = {}

    async def fragment() -> bytes:
        cards = await service.cards(who)
        now = {(c.ask.session_id, c.ask.tool_call_id): c for c in cards}
        for (sid, call), seq in list(shown.items()):
            if (sid, call) in now:
                continue
            del shown[(sid, call)]
            answered = await service.resolution(sid, call, seq)
            if answered is not None and answered not in decided:
                decided.insert(0, answered)
        del decided[RECENT:]
        for c in cards:
            shown[(c.ask.session_id, c.ask.tool_call_id)] = c.seq
        return asks_fragment(cards, decided, wall_clock_ms()).encode()

    return _stream(_asks_stream(request, fragment, "asks"))


async def _asks_json(service: Service, who: Principal) -> bytes:
    return encode(await service.asks(who))


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
    """Sleep between polls; ``None`` when the client left, the server stops or
    the caller no longer authenticates; ``True`` when a keep-alive is due."""
    closing: asyncio.Event = request.app.state.config.closing
    beats: list[float] = request.scope.setdefault("helmlog.beat", [0.0])
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(closing.wait(), seconds)
    if closing.is_set() or await request.is_disconnected():
        return None
    if principal_of(request) is None:
        return None  # H5: a revoked or expired login ends its open streams
    beats[0] += seconds
    if beats[0] >= HEARTBEAT_S:
        beats[0] = 0.0
        return True
    return False
