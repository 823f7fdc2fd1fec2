"""Pending questions from the command line: list them, approve or decline one.

Pattern: read the pending-asks index to find what waits on a person; resolve
         it through the same ``Agent.resume`` a program would call.
Role:    the face; ``helmlog asks|approve|decline`` call these.
Emits:   through the resuming agent: ``pause.resume``, its row, the run.

Laws: R18 (asks from the index, not a scan), issue 11 item 2 (only an ask
the index lists), R1/R19 (the pause is read from the verified fold), R9 (the
checkpoint is signed with the store's chain key), issue 8 item 8
(``TRACEPARENT``/``TRACESTATE`` join the caller's trace).

Why ``--agent module:function``: resuming runs the rest of the turn, so the
command needs the agent that paused, built on the store it is given.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from helmlog.events import EventStore, fold, read_verified, sign_checkpoint
from helmlog.runtime import Agent, AskPause, check_in_approved, check_in_declined


class PendingQuestion(msgspec.Struct, frozen=True, kw_only=True):
    """One pause waiting on a person, as ``helmlog asks`` lists it."""

    session_id: str
    kind: str
    tool_name: str
    tool_call_id: str
    middleware: str | None
    question: str


async def pending_questions(store: EventStore) -> list[PendingQuestion]:
    """Every pause waiting on a person, from the store's pending-asks index.

    The index is a projection kept beside the streams (no scan or fold of
    every session); ``approve``/``decline`` fold the one session they resolve,
    so a stale entry is refused there, never acted on.
    """
    return [
        PendingQuestion(
            session_id=p.session_id,
            kind=p.kind,
            tool_name=p.tool_name,
            tool_call_id=p.tool_call_id,
            middleware=p.middleware,
            question=p.question,
        )
        for p in sorted(await store.pending_asks(), key=lambda a: (a.session_id, a.seq))
    ]


def load_factory(spec: str) -> Callable[[EventStore], Agent]:
    """``module:function`` → the function (raises ``ValueError`` naming the problem).

    The current directory is put on ``sys.path`` first, so an agent module
    beside the shell imports as it would with ``python -m``.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--agent takes module:function, got {spec!r}")
    # As ``python -m`` does: a module beside the shell is importable without
    # setting PYTHONPATH (issue 11).
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--agent: cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"--agent: {module_name!r} has no function {attr!r}")
    return factory  # type: ignore[no-any-return]


async def decide(
    store: EventStore,
    session_id: str,
    factory: Callable[[EventStore], Agent],
    *,
    approved: bool,
    by: str,
    note: str | None,
    call_id: str | None = None,
) -> str | AskPause:
    """Resolve the session's pending ask or check-in as a person would.

    The ask must be in the store's pending-asks index (and be ``call_id``'s
    when given): a session the index does not list waits on no one, whatever
    its stream's tail looks like.
    """
    listed = [
        a
        for a in await store.pending_asks()
        if a.session_id == session_id and call_id in (None, a.tool_call_id)
    ]
    if not listed:
        which = f" for call '{call_id}'" if call_id else ""
        raise ValueError(
            f"session '{session_id}' has no pending question{which} in the asks index"
        )
    state = fold(r.decode() for r in await read_verified(store, session_id))
    checkpoint = sign_checkpoint(state.checkpoint, state.pending, store.chain_key)
    if state.pending is None or checkpoint is None:
        raise ValueError(f"session '{session_id}' has no pending question")
    if call_id is not None and state.pending.tool_call_id != call_id:
        raise ValueError(
            f"session '{session_id}' waits on call '{state.pending.tool_call_id}'"
        )
    if state.pending.kind == "ask-human":
        raise ValueError(
            f"session '{session_id}' waits on an answer to a tool's question "
            "(ask_human), not on an approval: resume it with the answer"
        )
    agent = factory(store)
    if agent.store is not store:
        raise ValueError(
            "the --agent function must build its agent on the store it is given"
        )
    decision = (check_in_approved if approved else check_in_declined)(by, note)
    out: Any = await agent.resume(
        checkpoint,
        decision,
        traceparent=os.environ.get("TRACEPARENT"),
        tracestate=os.environ.get("TRACESTATE"),
    )
    return out  # type: ignore[no-any-return]
