"""What hosts and clients exchange: typed, msgspec-encoded messages.

Pattern: a small wire protocol of frozen Structs, encoded once per hop.
Role:    actors layer; ``SessionHost`` answers with a ``HostReply``, the
         ``ClusterAgent`` decodes it back into ``str | AskPause`` and a
         ``SessionState``.
Emits:   nothing.

Laws: R12 (actors exchange msgspec-encoded typed values, never ad-hoc dicts).

Why the reply carries the session's state: a client's ``last_snapshot()``
must answer without another round trip, and it is served redacted by the
host exactly as the in-process agent would serve it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from helmlog.events import Checkpoint, SessionState
from helmlog.runtime import AskPause, CheckInDecision, MiddlewareAsk


class PauseOut(msgspec.Struct, frozen=True, kw_only=True):
    """An ``AskPause`` on the wire."""

    kind: str
    question: str
    detail: Any = None
    middleware: str | None = None
    component_id: str | None = None
    tool_name: str
    tool_call_id: str
    checkpoint: Checkpoint


class HostReply(msgspec.Struct, frozen=True, kw_only=True):
    """What a host answers for a run, a follow-up or a resume."""

    session_id: str
    answer: str | None = None
    pause: PauseOut | None = None
    state: SessionState
    checkpoint: Checkpoint | None = None


class DecisionIn(msgspec.Struct, frozen=True, kw_only=True):
    """A ``CheckInDecision`` on the wire."""

    approved: bool
    by: str
    at: int
    note: str | None = None


_encoder = msgspec.msgpack.Encoder(enc_hook=str)
_reply_decoder = msgspec.msgpack.Decoder(HostReply)
_decision_decoder = msgspec.msgpack.Decoder(DecisionIn)


def encode(value: Any) -> bytes:
    """msgpack-encode a wire value."""
    return _encoder.encode(value)


def reply_from(
    session_id: str, out: str | AskPause, state: SessionState, cp: Checkpoint | None
) -> bytes:
    """Encode a host's answer."""
    if isinstance(out, AskPause):
        pause = PauseOut(
            kind=out.kind,
            question=out.ask.question,
            detail=out.ask.detail,
            middleware=out.ask.middleware,
            component_id=out.ask.component_id,
            tool_name=out.tool_name,
            tool_call_id=out.tool_call_id,
            checkpoint=out.checkpoint,
        )
        reply = HostReply(
            session_id=session_id, pause=pause, state=state, checkpoint=cp
        )
    else:
        reply = HostReply(session_id=session_id, answer=out, state=state, checkpoint=cp)
    return encode(reply)


def decode_reply(data: bytes) -> tuple[str | AskPause, HostReply]:
    """A host's answer as the in-process agent would have returned it."""
    reply = _reply_decoder.decode(data)
    if reply.pause is not None:
        p = reply.pause
        pause = AskPause(
            kind=p.kind,
            ask=MiddlewareAsk(p.question, p.detail, p.middleware, p.component_id),
            tool_name=p.tool_name,
            tool_call_id=p.tool_call_id,
            checkpoint=p.checkpoint,
        )
        return pause, reply
    assert reply.answer is not None
    return reply.answer, reply


def encode_decision(decision: Any) -> bytes:
    """A resume's decision: a ``CheckInDecision`` or an ``ask_human`` answer."""
    if isinstance(decision, CheckInDecision):
        return b"D" + encode(
            DecisionIn(
                approved=decision.approved,
                by=decision.by,
                at=decision.at,
                note=decision.note,
            )
        )
    return b"A" + encode(decision)


def decode_decision(data: bytes) -> Any:
    """The inverse of ``encode_decision``."""
    if data[:1] == b"D":
        d = _decision_decoder.decode(data[1:])
        return CheckInDecision(approved=d.approved, by=d.by, at=d.at, note=d.note)
    return msgspec.msgpack.decode(data[1:])
