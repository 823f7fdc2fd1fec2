"""Checkpoint bindings: whether a checkpoint may continue or resume a stream.

Pattern: pure validators over a session's fold and an agent's configuration:
         each returns what the caller goes on with (base seq, pending pause,
         paused call, import event) or raises a typed ``CheckpointError``.
Role:    runtime layer; the run path checks a continuation here, the resume
         path a pause and an import, before anything is appended.

Laws: R9 (``stale``, ``replayed``, ``tampered``, ``policy-changed``,
``unknown-session``; a pause's MAC recomputed under a derived key), R20/R7
(``RecoveryRequiredError``), G59–G68, G91 (a stream's gaps are refused).
Why an import is checked on a scratch fold of its own event: the checks are
then the same code for a held stream and the one the import would seed.
"""

from __future__ import annotations

import hmac

import msgspec

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    Folder,
    PendingPause,
    SessionImported,
    ToolCallRequest,
)
from helmlog.events.lowlevel import digest

from .._config import AgentConfig
from .._errors import NoConversationError, RecoveryRequiredError
from .._session import find_call
from .._tools import Tool


def check_continuation(f: Folder, cp: Checkpoint) -> int:
    """The seq a conversation checkpoint continues from, checked on the fold."""
    if f.pending is not None:
        raise NoConversationError("pending-question")
    if f.dispatched:
        # R20, R7: whether those calls took effect is not recorded yet.
        raise RecoveryRequiredError(
            session_id=cp.session_id, call_ids=tuple(f.dispatched)
        )
    if cp.kind != "conversation":
        raise CheckpointError("stale", "a pause checkpoint was already resumed")
    held = f.history_at(cp.seq)
    if held is None or held[0] != cp.history:
        raise CheckpointError(
            "tampered",
            f"seq {cp.seq} and history do not match session '{cp.session_id}'",
        )
    return cp.seq


def continuation_by_id(f: Folder) -> int:
    """The seq a turn continuing a stored session by its id starts from: where
    its conversation stands (R1), checked on the fold as a checkpoint is.

    A session with no accepted conversation yet (its only turns were refused
    or failed) starts one afresh, at seq 0.
    """
    if f.pending is not None:
        raise NoConversationError("pending-question")
    if f.dispatched:
        # R20, R7: whether those calls took effect is not recorded yet.
        raise RecoveryRequiredError(
            session_id=f.session_id, call_ids=tuple(f.dispatched)
        )
    cp = f.checkpoint
    return cp.seq if cp is not None else 0


def importable(cp: Checkpoint) -> SessionImported:
    """The import event for a pause checkpoint this store lacks (R9).

    Refused, before anything is appended, when the checkpoint cannot be
    resumed faithfully: ``"unknown-session"`` for a conversation checkpoint
    or one written before checkpoints carried their call, ``"tampered"`` when
    the carried arguments do not match ``args_digest``. ``check_pause`` then
    checks the rest on the stream the import would seed, the MAC included
    under a chain key.
    """
    call = cp.call
    if cp.kind != "pause" or isinstance(call, msgspec.UnsetType):
        raise CheckpointError(
            "unknown-session",
            f"no session '{cp.session_id}' in the store, and a "
            f"{cp.kind} checkpoint without its paused call cannot seed one",
        )
    if digest(call.args) != cp.args_digest:
        raise CheckpointError(
            "tampered", "the carried arguments do not match args_digest"
        )
    return SessionImported(
        session_id=cp.session_id,
        kind=cp.kind,
        checkpoint_digest=cp.digest(),
        checkpoint_seq=cp.seq,
        history=cp.history,
        original_input=cp.original_input,
        tool_name=cp.tool_name or "",
        tool_call_id=cp.tool_call_id or "",
        args_digest=cp.args_digest or "",
        policy_version=cp.policy_version or "",
        content_digest=cp.content_digest() or "",
        call=call,
    )


def paused_call(
    config: AgentConfig, f: Folder, p: PendingPause, tool: Tool | None = None
) -> tuple[ToolCallRequest, Tool]:
    """The paused call and its tool, checked as read from the stream.

    The stream is data, not an invariant: a pause whose kind, call, tool or
    asking link the session does not hold is refused as ``"tampered"``
    before anything is appended (G91, R9), never by an ``assert``. ``tool``
    is the tool a steered turn's framework runs (``_steering.py``); by
    default the agent's registered tool of the pause's name.
    """
    call = find_call(f.history, p.tool_call_id)
    if tool is None:
        tool = config.tools.get(p.tool_name)
    elif tool.name != p.tool_name:
        raise CheckpointError(
            "tampered",
            f"the pause is of tool '{p.tool_name}', not of '{tool.name}'",
        )
    if call is None or tool is None or call.name != p.tool_name:
        raise CheckpointError(
            "tampered", f"call {p.tool_call_id} is not in the session"
        )
    if p.kind not in ("ask", "check-in", "ask-human"):
        raise CheckpointError("tampered", f"no pause of kind {p.kind!r}")
    if p.kind == "ask":
        links = config.tool_links
        if (
            p.middleware is None
            or not 0 <= p.link_index < len(links)
            or links[p.link_index].name != p.middleware
        ):
            raise CheckpointError(
                "tampered", "the ask names no link of this agent's chain"
            )
    return call, tool


def check_pause(config: AgentConfig, f: Folder, cp: Checkpoint) -> PendingPause:
    """R9: refuse a checkpoint before anything is appended; the pending pause."""
    if cp.kind != "pause":
        raise CheckpointError("stale", "a conversation checkpoint cannot be resumed")
    if cp.seq in f.resolved_pauses:
        raise CheckpointError(
            "replayed", f"the pause at seq {cp.seq} was already resolved"
        )
    if cp.seq not in f.pause_seqs:
        # R9: the seq binding names no pause.request in the stream.
        raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
    p = f.pending
    if p is None or p.seq != cp.seq:
        if p is not None and cp.seq > p.seq:
            raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
        raise CheckpointError(
            "stale", f"the session moved past the pause at seq {cp.seq}"
        )
    stored = f.pause_checkpoint
    if stored is None:
        raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
    if (
        cp.tool_call_id != p.tool_call_id
        or cp.args_digest != p.args_digest
        or cp.policy_version != p.policy_version
        or cp.tool_name != p.tool_name
        or cp.history != stored.history
        # A checkpoint written before it carried its call is still good.
        or (not isinstance(cp.call, msgspec.UnsetType) and cp.call != stored.call)
    ):
        raise CheckpointError("tampered", "a binding disagrees with the session stream")
    check_mac(config.store.chain_key, cp, p, stored.mac)
    if p.policy_version != config.policy_version:
        raise CheckpointError(
            "policy-changed",
            "the agent's rules changed since this pause; resume it with the agent "
            "that paused it",
        )
    return p


def check_mac(
    key: bytes | None, cp: Checkpoint, p: PendingPause, stored: str | None
) -> None:
    """R9: the checkpoint's MAC, recomputed from the stream's bindings.

    A pause recorded before R19 stored its MAC (``stored``): its old
    checkpoints carry that MAC, made by ``binding_mac`` under the chain key
    itself. A newer pause stores none; its MAC is ``pause_mac``'s, under the
    derived checkpoint key. Without a chain key a checkpoint carries no MAC
    beyond one its stream stored.
    """
    content = p.content_digest or None
    if stored:
        if (cp.mac or None) != stored:
            raise CheckpointError(
                "tampered", "a binding disagrees with the session stream"
            )
        if not key:
            return
        expected = cp.expected_mac(key, content, stored=True)
    elif key:
        expected = cp.expected_mac(key, content)
    elif cp.mac:
        raise CheckpointError("tampered", "a binding disagrees with the session stream")
    else:
        return
    if not cp.mac or not hmac.compare_digest(cp.mac.encode(), expected.encode()):
        raise CheckpointError("tampered", "the checkpoint's MAC does not verify")
