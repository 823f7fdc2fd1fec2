"""The access log of ``helmlog serve``: one line per request, nothing secret.

Pattern: a pure ASGI middleware, outermost of the app's own, logging to the
         ``helmlog.access`` logger once a response has ended: method, path,
         status, principal, duration.
Role:    gateway layer (http); ``create_app`` installs ``AccessLog``; the CLI
         gives the logger a handler (stderr or ``--access-log FILE``).
Emits:   log records only; nothing is stored.

Laws: R18 (``helmlog serve``'s access log), H5 (a token, a cookie or a body
is never written: the path is the raw one without its query, the principal
is the identity the credential stood for).

Why it costs nothing unless enabled: with no INFO handler on
``helmlog.access`` (a library user's app, the benches) a request passes
straight through; the principal is looked up only when a line is written.
Why the raw path: the decoded one may carry a CR/LF (``%0A``) into the log.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._routes import principal_of

ACCESS_LOGGER = "helmlog.access"
log = logging.getLogger(ACCESS_LOGGER)


class AccessLog:
    """Log each HTTP request once its response has ended (or failed: 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        # Who sent it, before the app runs: a logout ends the login it names.
        who = _principal(scope)
        status = 500  # if the app raises before it answers

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            line = access_line(
                scope["method"],
                _path(scope),
                status,
                who,
                (time.perf_counter() - started) * 1000,
            )
            log.info(line)


def access_line(
    method: str, path: str, status: int, principal: str | None, ms: float
) -> str:
    """``GET /asks 200 alice 1.2ms``; ``-`` for no principal, escapes kept visible."""
    who = _clean(principal or "-")
    return f"{_clean(method)} {_clean(path)} {status} {who} {ms:.1f}ms"


def _principal(scope: Scope) -> str | None:
    who = principal_of(Request(scope))
    return None if who is None else who.identity


def _path(scope: Scope) -> str:
    raw: Any = scope.get("raw_path")
    if isinstance(raw, bytes):
        # The request target as sent, without its query (a token may ride there).
        return raw.split(b"?", 1)[0].decode("latin-1")
    return str(scope.get("path", ""))


def _clean(text: str) -> str:
    """One field of one line: whitespace and control characters escaped."""
    if text.isprintable() and " " not in text:
        return text
    return text.encode("unicode_escape").decode("ascii").replace(" ", "\\x20")
