"""What a fold yields: a session's frozen state and the pause it waits on.

Pattern: frozen msgspec Structs (``SessionState``, ``PendingPause``,
         ``Approval``) and pure functions (``pause_of``, ``approval_of``,
         ``sign_checkpoint``).
Role:    events layer; ``Folder`` builds these, the runtime reads them,
         replay compares them.
Emits:   nothing. Pure: no clock, no randomness, no I/O.

Laws: R1 (the state is exact), R9 (an imported pause is pending at its seq),
R9/R19 (``sign_checkpoint``: the fold is keyless; the key holder signs).

Why here: ``sign_checkpoint`` reads only a fold's result, so neither the
checkpoint module nor the fold needs a key. More: docs/design.md.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._checkpoint import Checkpoint
from ._decision import MiddlewareDecision
from ._messages import Message
from ._pause_events import PausedCall, PauseRequested, PauseResumed, SessionImported
from ._turn_events import ToolDispatched, WindowCompacted


class PendingPause(msgspec.Struct, frozen=True, kw_only=True):
    """The pause a session is waiting on (R1)."""

    kind: str
    tool_name: str
    tool_call_id: str
    middleware: str | None
    question: str
    detail: Any
    component_id: str | None
    link_index: int
    args: Any
    args_digest: str
    policy_version: str
    iteration: int
    seq: int
    timestamp: int
    content_digest: str = ""


class Approval(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A person's approval of one ask, as the session's stream records it.

    Folded from a ``pause.request`` of kind ``ask`` and the ``pause.resume``
    that answered it with ``approved=True`` and a non-empty ``by``; nothing
    else makes one (a rule's words cannot). It holds no value: the arguments
    as they stood at the asking link are named by their digest
    (``helmlog.events.digest``), the digest ``pause.request`` recorded.

    Attributes:
        middleware: the name of the link that asked.
        tool_name: the tool of the call it asked about.
        tool_source: that tool's source as recorded (``None`` for the
            agent's own tools, and for pauses recorded before it was).
        args_digest: digest of the arguments at the asking link.
        by: who approved.
        tool_call_id: the call it asked about.
        seq: the seq of the ``pause.request`` it answered.
    """

    middleware: str
    tool_name: str
    tool_source: str | None = None
    args_digest: str
    by: str
    tool_call_id: str
    seq: int


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    """What a session holds, as of the last folded seq.

    Attributes:
        session_id: the session.
        history: the committed messages of the current conversation line.
        middleware_decisions: every row of every turn, oldest first.
        window_records: every ``window.compacted`` record.
        pending: the outstanding pause, if any.
        checkpoint: the pending pause's checkpoint, else the last accepted
            conversation checkpoint, else ``None``.
        unknown_events: ``(seq, type)`` of events this reader does not know.
        last_seq: the seq of the last folded event (0 for none).
        turn: the number of the last turn started (0 for none).
        iteration: the last model call's number within the current turn.
        original_input: the admitted text of the current turn's user message.
        in_turn: a turn started and has not ended with an answer.
        dispatched: calls of the current turn recorded as dispatched whose
            result is not recorded.
        resolved_pauses: seqs of ``pause.request`` events already answered.
        conversation_seqs: seqs of accepted conversation checkpoints.
        identity: the identity the current turn runs under.
    """

    session_id: str = ""
    history: tuple[Message, ...] = ()
    middleware_decisions: tuple[MiddlewareDecision, ...] = ()
    window_records: tuple[WindowCompacted, ...] = ()
    pending: PendingPause | None = None
    checkpoint: Checkpoint | None = None
    unknown_events: tuple[tuple[int, str], ...] = ()
    last_seq: int = 0
    turn: int = 0
    iteration: int = 0
    original_input: str | None = None
    in_turn: bool = False
    dispatched: tuple[ToolDispatched, ...] = ()
    resolved_pauses: frozenset[int] = frozenset()
    conversation_seqs: frozenset[int] = frozenset()
    identity: Any = None


def pause_of(
    session_id: str,
    seq: int,
    ev: PauseRequested | SessionImported,
    call: PausedCall,
    history: tuple[Message, ...],
    original_input: str | None,
    detail: Any,
) -> tuple[PendingPause, Checkpoint]:
    """The pending pause a pause record folds to at ``seq``, and its checkpoint."""
    pending = PendingPause(
        kind=call.kind,
        tool_name=ev.tool_name,
        tool_call_id=ev.tool_call_id,
        middleware=call.middleware,
        question=call.question,
        detail=detail,
        component_id=call.component_id,
        link_index=call.link_index,
        args=call.args,
        args_digest=ev.args_digest,
        policy_version=ev.policy_version,
        iteration=call.iteration,
        seq=seq,
        timestamp=ev.timestamp,
        content_digest=ev.content_digest,
    )
    checkpoint = Checkpoint(
        kind="pause",
        session_id=session_id,
        seq=seq,
        history=history,
        original_input=original_input,
        tool_name=ev.tool_name,
        tool_call_id=ev.tool_call_id,
        args_digest=ev.args_digest,
        policy_version=ev.policy_version,
        mac=ev.mac,
        call=call,
    )
    return pending, checkpoint


def approval_of(
    pending: PendingPause, tool_source: str | None, ev: PauseResumed
) -> Approval | None:
    """The approval ``ev`` gives the pending pause, if it is one (issue 22).

    Only a person's ``approved=True`` answer, naming who (``by``), to an
    ``ask`` filed by a named link counts; a decline, a check-in, an
    ``ask_human`` answer or a row's words never do. ``tool_source`` is the
    one the pause's ``pause.request`` recorded.
    """
    if (
        ev.approved is not True
        or pending.kind != "ask"
        or ev.kind != "ask"
        or not pending.middleware
        or ev.tool_call_id != pending.tool_call_id
        or not isinstance(ev.by, str)
        or not ev.by
    ):
        return None
    return Approval(
        middleware=pending.middleware,
        tool_name=pending.tool_name,
        tool_source=tool_source,
        args_digest=pending.args_digest,
        by=ev.by,
        tool_call_id=pending.tool_call_id,
        seq=pending.seq,
    )


def sign_checkpoint(
    checkpoint: Checkpoint | None,
    pending: PendingPause | None,
    chain_key: bytes | None,
) -> Checkpoint | None:
    """A folded checkpoint as it is handed out: a pending pause's gets its MAC.

    ``checkpoint`` and ``pending`` are a fold's (``SessionState.checkpoint``
    and ``.pending``). Without a chain key, for a conversation checkpoint, or
    for a pause whose stream stored its MAC (written before R19), the
    checkpoint is returned as folded.
    """
    if (
        not chain_key
        or checkpoint is None
        or pending is None
        or checkpoint.kind != "pause"
        or checkpoint.mac
        or checkpoint.seq != pending.seq
    ):
        return checkpoint
    mac = checkpoint.expected_mac(chain_key, pending.content_digest or None)
    return msgspec.structs.replace(checkpoint, mac=mac)
