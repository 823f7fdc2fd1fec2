"""Pending questions from the command line: list them, approve or decline one.

Pattern: ``asks`` reads the pending-asks index; ``approve``/``decline`` go
         through the runtime's ``decide_pending`` and resume the agent
         that paused, built by the ``--agent module:function`` on the store.
Role:    the face; ``helmlog asks|approve|decline`` call these.

Laws: R18 (asks from the index, not a scan), issue 11 item 2 (only an ask
the index lists), issue 8 item 8 (``TRACEPARENT``/``TRACESTATE`` join the
caller's trace).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec

from helmlog._named import import_named
from helmlog.events import Checkpoint, EventStore
from helmlog.runtime import Agent, AgentFactoryError, AskPause, CheckInDecision
from helmlog.runtime.lowlevel import decide_pending


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
    """``module:function`` → the function (``AgentFactoryError``, a
    ``ValueError``, naming the problem).

    ``module:attr`` may also name an ``mcp_serve`` result, an ``McpProxy`` or
    an integration's ``Governance``: its ``on_store`` is the function (the
    served tools, the proxy with its governance, or the framework's
    governance with its registered tools, on the store given; S10, P14,
    issue 27). A function may build any of them as well as an ``Agent``:
    ``decide`` needs only ``.store`` and ``.resume``.

    Imported by ``helmlog._named.import_named``, as every command's
    ``--agent`` is: the current directory first on ``sys.path``, so an agent
    module beside the shell imports as it would with ``python -m``.
    """
    factory = import_named(spec)
    on_store = getattr(factory, "on_store", None)
    if not callable(factory) and callable(on_store):
        # An ``mcp_serve`` result, an ``McpProxy`` or a ``Governance`` (S10,
        # P14, issue 27): rebuilt on the store the command opens, it decides
        # that store's asks.
        return on_store  # type: ignore[no-any-return]
    if not callable(factory):
        module_name, _, attr = spec.partition(":")
        raise AgentFactoryError(
            spec=spec,
            reason="missing",
            detail=f"{module_name!r} has no function {attr!r}",
        )
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

    The runtime's ``decide_pending`` checks the index and the verified
    pause; only then is the agent built on ``store`` and resumed.
    """

    async def resume(checkpoint: Checkpoint, decision: CheckInDecision) -> Any:
        agent = factory(store)
        if agent.store is not store:
            raise ValueError(
                "the --agent function must build its agent on the store it is given"
            )
        return await agent.resume(
            checkpoint,
            decision,
            traceparent=os.environ.get("TRACEPARENT"),
            tracestate=os.environ.get("TRACESTATE"),
        )

    out: Any = await decide_pending(
        store,
        session_id,
        resume,
        approved=approved,
        by=by,
        note=note,
        call_id=call_id,
    )
    return out  # type: ignore[no-any-return]
