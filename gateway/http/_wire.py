"""What the HTTP API reads and writes: msgspec Structs and problem details.

Pattern: typed request/response bodies (decoded strictly: a body that is not
         one is a 400), and one translation from the helmlog error tree to
         RFC 9457 problem details (``problem_of``).
Role:    gateway layer (http), for ``_app``, the routes and their tests.
Emits:   nothing.

Laws: issue 11 item 1 (``application/problem+json`` with a code: 400, 404,
409 on a resolved ask, 503 retryable), G86 (views built from redacted state
only), G61/G68 (a pending question blocks continuing: 409).

Why one ``problem_of``: a client learns one mapping (code → status), and
``retryable`` says whether to try again, as the error itself says.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from helmlog.actors import HostUnavailableError
from helmlog.events import (
    CheckpointError,
    HelmlogError,
    SequenceConflictError,
    StoreError,
    StreamTamperedError,
)
from helmlog.runtime import (
    DecisionRequiredError,
    MessageDeniedError,
    NoConversationError,
    RecoveryRequiredError,
)

PROBLEM_TYPE: Final = "application/problem+json"


class StartSession(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``POST /sessions``: the first message of a new session."""

    message: str


class SendMessage(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``POST /sessions/{id}/messages``: the next message; no checkpoint needed."""

    message: str


class Decide(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /asks/{session}/{call}/approve|decline``: an optional note.

    There is no ``by``: who decides is who authenticated.
    """

    note: str | None = None


class AskView(msgspec.Struct, frozen=True, kw_only=True):
    """A pause waiting on a person, as the API and the page show it (served)."""

    session_id: str
    tool_call_id: str
    tool_name: str
    kind: str
    middleware: str | None
    question: str
    args: Any = None
    detail: Any = None
    asked_at: int = 0
    deadline: int | None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a message or a decision led to: the answer, or a (new) pause."""

    session_id: str
    status: Literal["answered", "paused"]
    answer: str | None = None
    ask: AskView | None = None


class Health(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /healthz``."""

    status: Literal["ok"] = "ok"
    store: str = ""


class Problem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An RFC 9457 problem detail with helmlog's ``code`` and ``retryable``."""

    type: str
    title: str
    status: int
    code: str
    retryable: bool = False
    detail: str = ""
    session_id: str | None = None
    # ERR_ASK_RESOLVED: who answered the ask and when (ms), so a stale page
    # can say so in words (issue 28 item 1); absent when unknown.
    decided_by: str | None = None
    decided_at: int | None = None
    approved: bool | None = None


class HttpProblem(Exception):
    """A refusal the app raises itself (bad input, unknown session, auth)."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        retryable: bool = False,
        session_id: str | None = None,
        **resolved: Any,
    ) -> None:
        super().__init__(detail)
        self.problem = problem(
            status, code, detail, retryable=retryable, session_id=session_id
        )
        if resolved:  # ``decided_by``/``decided_at``/``approved`` of a 409
            self.problem = msgspec.structs.replace(self.problem, **resolved)


_TITLES: Final = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    408: "Request timeout",
    409: "Conflict",
    413: "Too large",
    422: "Refused by governance",
    500: "Internal error",
    503: "Unavailable",
}


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    retryable: bool = False,
    session_id: str | None = None,
) -> Problem:
    """A problem detail; ``type`` names the code so clients can dispatch on it."""
    return Problem(
        type=f"urn:helmlog:problem:{code}",
        title=_TITLES.get(status, "Error"),
        status=status,
        code=code,
        retryable=retryable,
        detail=detail,
        session_id=session_id,
    )


# A decision on an ask that is no longer pending (answered, or replaced).
ERR_ASK_RESOLVED: Final = "ERR_ASK_RESOLVED"
ERR_UNKNOWN_SESSION: Final = "ERR_UNKNOWN_SESSION"
ERR_BAD_REQUEST: Final = "ERR_BAD_REQUEST"
ERR_NOT_AN_APPROVAL: Final = "ERR_NOT_AN_APPROVAL"


def problem_of(exc: HelmlogError, session_id: str | None = None) -> Problem:
    """The problem detail of a helmlog error: its code, status and retryability.

    The message never carries a value (errors never do); ``detail`` is the
    error's own text.
    """
    sid = getattr(exc, "session_id", None) or session_id
    text = str(exc)
    if isinstance(exc, CheckpointError):
        if exc.reason == "unknown-session":
            return problem(404, ERR_UNKNOWN_SESSION, text, session_id=sid)
        if exc.reason in ("replayed", "stale"):
            return problem(409, ERR_ASK_RESOLVED, text, session_id=sid)
        return problem(409, exc.code, text, session_id=sid)
    if isinstance(exc, SequenceConflictError):
        # Another writer got there first: the loser appended nothing (R2, R20).
        return problem(409, exc.code, text, retryable=False, session_id=sid)
    if isinstance(exc, (StoreError, HostUnavailableError)) or exc.retryable:
        return problem(503, exc.code, text, retryable=True, session_id=sid)
    if isinstance(exc, MessageDeniedError):
        return problem(422, exc.code, text, session_id=sid)
    if isinstance(
        exc,
        (
            NoConversationError,
            RecoveryRequiredError,
            StreamTamperedError,
            DecisionRequiredError,
        ),
    ):
        return problem(409, exc.code, text, session_id=sid)
    return problem(500, exc.code, text, session_id=sid)


_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    """JSON bytes of a Struct (or builtins)."""
    return _encoder.encode(value)


def decode_body(body: bytes, kind: type[Any]) -> Any:
    """A request body as ``kind``; a 400 problem when it is not one."""
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise HttpProblem(400, ERR_BAD_REQUEST, f"bad request body: {exc}") from None
