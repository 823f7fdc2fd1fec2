"""A hosted session, and what the loop and the agent both read of its record.

Pattern: a plain holder (a session's journal, lock and in-flight count) that
         is also the pipeline's ``CallRecorder``, beside pure readers of a
         session's history (outstanding calls, ``find_call``) and the record
         of a run that ends by raising (``record_failure``, ``fatal_code``).
Role:    runtime layer; ``Loop`` drives a ``Session``, ``Hosting`` caches
         them in a ``Residency``, ``pause/_bindings.py`` reads ``find_call``.

Laws: G37, G51, G66, G91, R4/R5, R7 (``tool.dispatched`` flushed before the
tool runs), R20 (a fenced run records nothing more), R21 (``busy``).
Why apart from the loop: the cache, the residency bound and the checkpoint
checks need a session without the driver; none of them imports it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from helmlog.events import (
    FatalError,
    LedgerAppendError,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    StoreError,
    ToolCallRequest,
    ToolDispatched,
)

from ._chain import MessageVerdict
from ._errors import (
    MessageDeniedError,
    OutputValidationError,
    ProviderError,
    TurnLimitError,
)
from ._journal import Journal
from ._tools import Tool

log = logging.getLogger("helmlog")

NOT_RUN = (
    "Tool '{name}' (call {id}) was not run: the run stopped before it was dispatched."
)


class MessageRefused(Exception):
    """Internal: a message chain refused; carries the error to raise."""

    def __init__(self, error: MessageDeniedError) -> None:
        super().__init__(error.reason)
        self.error = error

    @classmethod
    def of(cls, verdict: MessageVerdict, phase: str) -> MessageRefused:
        """The refusal a denied message walk stands for (G37)."""
        return cls(
            MessageDeniedError(
                reason=verdict.reason or "",
                phase=phase,
                middleware=verdict.middleware or "",
            )
        )


class Session:
    """One hosted session: its journal (a cache of its stream) and its lock.

    ``users`` counts the operations in flight (holding or awaiting the lock);
    ``last_used`` is the agent clock's reading when the last operation
    ended (or the session was admitted). A session with users is never
    dropped from the cache (R21). ``session_id`` is its journal's, kept as
    an attribute (read several times a turn): a session's journal is never
    replaced.
    """

    __slots__ = (
        "in_provider",
        "journal",
        "last_used",
        "lock",
        "output",
        "session_id",
        "users",
    )

    def __init__(self, journal: Journal, lock: asyncio.Lock | None = None) -> None:
        self.journal = journal
        self.session_id: str = journal.session_id
        self.lock = asyncio.Lock() if lock is None else lock
        self.in_provider = False
        # The parsed answer of the operation in flight (G92), for its TurnResult.
        self.output: Any = None
        self.users = 0
        self.last_used: float = 0

    def __repr__(self) -> str:
        return f"Session(session_id={self.session_id!r}, users={self.users})"

    @property
    def busy(self) -> bool:
        """Whether an operation is in flight on this session."""
        return self.users > 0 or self.lock.locked()

    # -- the pipeline's record (``CallRecorder``) ----------------------------

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        """File a walk's rows; they are appended with what follows (R4, R5)."""
        self.journal.file(rows)

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        """Append ``tool.dispatched`` (and all before it) before ``execute`` (R7)."""
        self.journal.add(
            ToolDispatched(
                tool_name=tool.name,
                tool_call_id=tool_call_id,
                args=args,
                attempt=attempt,
            )
        )
        # ``flush``, without a coroutine where nothing in it waits.
        pending = self.journal.flush_now()
        if pending is not None:
            await pending


ERR_INTERNAL = "ERR_INTERNAL"
"""G91's code for a run that failed in helmlog's own code (no error class:
nothing raises it; it names what no other code does)."""


def fatal_code(exc: BaseException, *, in_provider: bool) -> tuple[str, bool]:
    """G91: the ``error.fatal`` code and retryability of a run's raise.

    Read from the error classes: a refused message, a failed append, the
    provider (anything raised while the model call was in flight counts as
    the provider's), else ``ERR_INTERNAL``.
    """
    if isinstance(exc, MessageRefused):
        return exc.error.code, exc.error.retryable
    if isinstance(exc, LedgerAppendError):
        return exc.code, exc.retryable
    if isinstance(exc, ProviderError | TurnLimitError | OutputValidationError):
        return exc.code, exc.retryable
    if in_provider:
        return ProviderError.code, ProviderError.retryable
    return ERR_INTERNAL, False


def outstanding_calls(history: list[Message]) -> list[ToolCallRequest]:
    """Calls of the last assistant turn that have no tool message yet."""
    for index in range(len(history) - 1, -1, -1):
        msg = history[index]
        if msg.role == "assistant":
            if not msg.tool_calls:
                return []
            if index == len(history) - 1:  # nothing after it answers a call
                return list(msg.tool_calls)
            answered = {
                m.tool_call_id for m in history[index + 1 :] if m.role == "tool"
            }
            return [c for c in msg.tool_calls if c.id not in answered]
        if msg.role == "user":
            return []
    return []


def find_call(history: list[Message], tool_call_id: str) -> ToolCallRequest | None:
    """The proposed call with this id in the last assistant turn that made it."""
    for msg in reversed(history):
        if msg.role == "assistant":
            for call in msg.tool_calls:
                if call.id == tool_call_id:
                    return call
    return None


async def record_failure(
    s: Session,
    exc: BaseException,
    *,
    phase: str | None = None,
    middleware: str | None = None,
) -> None:
    """Record a run that ends by raising: missing tool messages, one
    ``error.fatal`` (G66, G91). Never raises; a store that refuses is logged.

    A run fenced by a sequence conflict records nothing (R20): the stream
    belongs to the writer that won, and an ``error.fatal`` after its batch
    would make its next append conflict after its tool ran.
    """
    if s.journal.fenced:
        s.in_provider = False
        return
    code, retryable = fatal_code(exc, in_provider=s.in_provider)
    s.in_provider = False
    j = s.journal
    try:
        if j.broken:
            # The cache holds events the store never accepted: record the
            # failure on the stream as the store holds it (G91, R1) —
            # unless another writer moved it meanwhile (R20): then the
            # stream is theirs, and this run appends nothing more.
            fresh = await j.reopened()
            if not j.still_ours(fresh):
                return
            j = fresh
        for call in outstanding_calls(j.folder.history):
            if call.id in j.folder.dispatched:
                continue
            j.add(
                MessageCommitted(
                    message=Message(
                        role="tool",
                        content=NOT_RUN.format(name=call.name, id=call.id),
                        tool_call_id=call.id,
                        tool_name=call.name,
                    )
                )
            )
        j.add(
            FatalError(
                code=code, phase=phase, middleware=middleware, retryable=retryable
            )
        )
        await j.flush()
    except StoreError:
        log.warning(
            "could not record error.fatal for session %s",
            s.session_id,
            exc_info=True,
        )
