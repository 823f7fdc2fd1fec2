"""Deciding a pending ask: the one path a person's approval or refusal takes.

Pattern: check the pending-asks index, fold the verified stream, check the
         pause, sign its checkpoint, then hand it with the decision to the
         caller's ``resume`` (an ``Agent``, a cluster's ``ClusterAgent``).
Role:    runtime layer, exported by ``helmlog.runtime.lowlevel``; ``helmlog
         approve|decline`` and the HTTP API's ``Service.decide`` call it.

Laws: R18 (only an ask the index lists), R1/R19 (the pause is read from the
verified fold), R9 (the checkpoint is signed with the store's chain key).
Why ``NoPendingAsk`` carries a ``reason``: the command line prints its text,
the HTTP API maps it to a 404 or a 409.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Literal, TypeVar

from helmlog.events import Checkpoint, EventStore, fold, read_verified
from helmlog.events.lowlevel import sign_checkpoint

from ._pause import CheckInDecision, check_in_approved, check_in_declined

T = TypeVar("T")

NotPendingReason = Literal["unlisted", "unknown", "resolved", "other-call", "ask-human"]


class NoPendingAsk(ValueError):
    """The session waits on no decision (for that call).

    ``reason``: ``"unlisted"`` (the asks index lists no such ask),
    ``"unknown"`` (the stream is empty), ``"resolved"`` (no pause pending),
    ``"other-call"`` (it waits on ``waits_on``), ``"ask-human"`` (a tool's
    question waits on an answer, not an approval; ``tool_name`` asked it).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: NotPendingReason,
        session_id: str,
        call_id: str | None,
        waits_on: str | None = None,
        tool_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason: NotPendingReason = reason
        self.session_id = session_id
        self.call_id = call_id
        self.waits_on = waits_on
        self.tool_name = tool_name


def _untimed(_op: str) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


async def decide_pending(
    store: EventStore,
    session_id: str,
    resume: Callable[[Checkpoint, CheckInDecision], Awaitable[T]],
    *,
    approved: bool,
    by: str,
    note: str | None,
    call_id: str | None = None,
    timed: Callable[[str], AbstractContextManager[object]] = _untimed,
) -> T:
    """Resolve ``session_id``'s pending ask (``call_id``'s, when given) as ``by``.

    The ask must be in the store's pending-asks index: a session the index
    does not list waits on no one, whatever its stream's tail looks like.
    ``resume`` gets the signed checkpoint and the decision and runs on;
    ``timed(op)`` wraps each store read (``"pending_asks"``, ``"read"``).

    Raises:
        NoPendingAsk: nothing waits on this decision (``reason`` says why).
    """
    with timed("pending_asks"):
        listed = [
            a
            for a in await store.pending_asks()
            if a.session_id == session_id and call_id in (None, a.tool_call_id)
        ]
    if not listed:
        which = f" for call '{call_id}'" if call_id else ""
        raise NoPendingAsk(
            f"session '{session_id}' has no pending question{which} in the asks index",
            reason="unlisted",
            session_id=session_id,
            call_id=call_id,
        )
    with timed("read"):
        records = await read_verified(store, session_id)
    state = fold(r.decode() for r in records)
    pause = state.pending
    if pause is None:
        raise NoPendingAsk(
            f"session '{session_id}' has no pending question",
            reason="resolved" if records else "unknown",
            session_id=session_id,
            call_id=call_id,
        )
    if call_id is not None and pause.tool_call_id != call_id:
        raise NoPendingAsk(
            f"session '{session_id}' waits on call '{pause.tool_call_id}'",
            reason="other-call",
            session_id=session_id,
            call_id=call_id,
            waits_on=pause.tool_call_id,
        )
    if pause.kind == "ask-human":
        raise NoPendingAsk(
            f"session '{session_id}' waits on an answer to a tool's question "
            "(ask_human), not on an approval: resume it with the answer",
            reason="ask-human",
            session_id=session_id,
            call_id=call_id,
            tool_name=pause.tool_name,
        )
    checkpoint = sign_checkpoint(state.checkpoint, pause, store.chain_key)
    if checkpoint is None:
        raise NoPendingAsk(
            f"session '{session_id}' has no pending question",
            reason="resolved",
            session_id=session_id,
            call_id=call_id,
        )
    decision = (check_in_approved if approved else check_in_declined)(by, note)
    return await resume(checkpoint, decision)
