"""The record of a call's pause, and the checkpoint a paused run hands back.

Pattern: record, then hand back: a call the pipeline paused (an asking link,
         a tool's check-in, ``ask_human``) is recorded as one
         ``pause.request`` holding what a resume on any host needs, flushed,
         and the checkpoint of the pause as the fold holds it is signed and
         returned inside an ``AskPause``.
Role:    runtime layer; ``Loop.paused`` (``_loop.py``) records every pause
         here, for a fresh call, a resumed one (``_resume.py``) and one
         re-dispatched by recovery alike.
Emits:   ``pause.request`` (through the session's journal, flushed with
         what was filed before it).

Laws: G59 (an ask pauses before anything executes; one ``pause.request``;
the ``AskPause`` carries the checkpoint), G60 (the pause records the
arguments as transformed up to the asking link, that link's position and
name), G69 (``ask_human`` pauses its call as ``kind="ask-human"``), R9 (the
stream stores the pause's content digest, never its MAC; with a chain key
the checkpoint handed back gets its MAC over the bindings and that digest,
``sign_checkpoint``; R19), issue 11 item 4 (an ask's deadline is recorded
as ``timeout_ms``, so whoever enforces it reads it from the record).

Why the MAC is computed here and not stored: a MAC on the stream would hand
a valid checkpoint to anyone who can read the stream; computed from the
bindings under a key derived from the chain key, it is not derivable from
the stream, and it is checked the same way by a store that lacks the session
(the checkpoint carries the paused call and verifies whole, ``_bindings.py``).
"""

from __future__ import annotations

from typing import Any

from helmlog.events import (
    CheckpointError,
    PausedCall,
    PauseRequested,
    ToolCallRequest,
    digest,
    pause_content_digest,
    sign_checkpoint,
)

from ._chain import CallSite
from ._config import AgentConfig
from ._pause import AskPause, MiddlewareAsk, PauseKind
from ._session import Session


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
