"""The record of a call's pause, and the checkpoint a paused run hands back.

Pattern: record, then hand back: a paused call (an asking link, a check-in,
         ``ask_human``) is recorded as one ``pause.request`` holding what a
         resume on any host needs, flushed, and the pause's checkpoint is
         signed and returned inside an ``AskPause``.
Role:    runtime layer; ``Loop.paused`` records every pause here.

Laws: G59, G60 (arguments as transformed up to the asking link), G69, R9 and
R19 (the stream keeps the pause's digest, never its MAC), issue 11 item 4
(an ask's deadline as ``timeout_ms``).
Why the MAC is computed, not stored: a MAC on the stream would hand a valid
checkpoint to anyone who can read the stream.
"""

from __future__ import annotations

from typing import Any

from helmlog.events import CheckpointError, PausedCall, PauseRequested, ToolCallRequest
from helmlog.events.lowlevel import digest, pause_content_digest, sign_checkpoint

from .._chain import CallSite
from .._config import AgentConfig
from .._session import Session
from ._pause import AskPause, MiddlewareAsk, PauseKind


async def record_pause(
    cfg: AgentConfig,
    s: Session,
    kind: PauseKind,
    call: ToolCallRequest,
    site: CallSite,
    args: Any,
    ask: MiddlewareAsk,
    *,
    link_index: int = -1,
) -> AskPause:
    """Record the pause and hand back its checkpoint (G59).

    The stream stores the pause's content digest (history, the paused
    call, its asking link), never its MAC: with a chain key the
    checkpoint handed back gets its MAC over the bindings and that digest
    here (``sign_checkpoint``), so it is not derivable from the stream
    (R9), and a store that lacks the session verifies it whole.
    """
    j = s.journal
    f = j.folder
    args_digest = digest(args)
    content = pause_content_digest(
        history=tuple(f.history),
        original_input=f.original_input,
        tool_name=call.name,
        call=PausedCall(
            kind=kind,
            args=args,
            middleware=ask.middleware,
            link_index=link_index,
            iteration=site.iteration,
            question=ask.question,
            component_id=ask.component_id,
            turn=f.turn,
            identity=f.identity,
        ),
    )
    j.add(
        PauseRequested(
            kind=kind,
            tool_name=call.name,
            tool_call_id=call.id,
            middleware=ask.middleware,
            link_index=link_index,
            question=ask.question,
            detail=ask.detail,
            component_id=ask.component_id,
            args=args,
            args_digest=args_digest,
            policy_version=cfg.policy_version,
            iteration=site.iteration,
            content_digest=content,
            timeout_ms=timeout_ms(ask.timeout_s),
            tool_source=site.tool_source,
        )
    )
    await j.flush()
    checkpoint = sign_checkpoint(
        j.folder.pause_checkpoint, j.folder.pending, cfg.store.chain_key
    )
    if checkpoint is None:  # pragma: no cover - the fold of a pause.request sets it
        raise CheckpointError("tampered", "the recorded pause folded to nothing")
    return AskPause(
        kind=kind,
        ask=ask,
        tool_name=call.name,
        tool_call_id=call.id,
        checkpoint=checkpoint,
    )


def timeout_ms(timeout_s: float | None) -> int | None:
    """An ask's deadline as recorded: whole ms after the pause (at least 1)."""
    return None if timeout_s is None else max(1, round(timeout_s * 1000))
