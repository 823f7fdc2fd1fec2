"""Bounded requests: a body limit read as it arrives, and text length limits.

Pattern: a pure ASGI middleware between the router and the server, plus
         checks of decoded fields (``check_length``).
Role:    gateway layer (http); ``create_app`` installs ``BodyLimit``.
Emits:   nothing; a request past a limit is a 413 problem, nothing stored.

Laws: H3 (a ``Content-Length`` over the limit is refused before any body is
read; a body that streams past it is cut at the first chunk over).

Why a middleware, not checks in the routes: a route that reads the body has
already buffered all of it; counting in ``receive`` stops at the limit.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._wire import PROBLEM_TYPE, HttpProblem, encode, problem

ERR_TOO_LARGE = "ERR_TOO_LARGE"

#: Default limits (``helmlog serve`` options, ``ServeConfig`` fields).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_MESSAGE_CHARS = 64 * 1024
DEFAULT_MAX_NOTE_CHARS = 4 * 1024


def too_large(detail: str) -> HttpProblem:
    """The 413 problem for ``detail``."""
    return HttpProblem(413, ERR_TOO_LARGE, detail)


def check_length(field: str, value: str | None, limit: int) -> None:
    """Refuse a text field longer than ``limit`` characters (H3)."""
    if value is not None and len(value) > limit:
        raise too_large(
            f"the {field} is {len(value):,} characters; the limit is {limit:,}"
        )


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, reading no further."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _refuse(send, self._detail(declared))
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise too_large(self._detail(seen, streamed=True))
            return message

        await self.app(scope, counted, send)

    def _detail(self, size: int, *, streamed: bool = False) -> str:
        what = "at least " if streamed else ""
        return (
            f"the request body is {what}{size:,} bytes; the limit is {self.max_bytes:,}"
        )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, detail: str) -> None:
    body = encode(problem(413, ERR_TOO_LARGE, detail))
    headers: list[Any] = [
        (b"content-type", PROBLEM_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
