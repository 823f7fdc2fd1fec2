"""Pauses for a person, their answers, and sessions seeded from a checkpoint.

Pattern: frozen, tagged msgspec Structs on the shared envelope, plus
         ``PausedCall``, the paused call a pause checkpoint carries.
Role:    events layer; the pipeline records a pause and its resume, the
         runtime an import or a seeding; ``fold`` turns them into the
         pending pause and its checkpoint.
Emits:   nothing; these are the emissions.

Laws: R13, R9 (``session.imported``; a checkpoint carries its
``PausedCall``), R14, issue 8 item 8 (trace context), issue 11 item 4 (an
ask's deadline), G87/G88, issue 22 (``tool_source``), R10.

Why one family: a pause, its answer and an import of its checkpoint are the
three records of one person-in-the-loop wait, read together by the fold.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ._envelope import Event
from ._messages import Message


class PauseRequested(Event, tag="pause.request", frozen=True):
    """The run paused for a person (ask, check-in or ask_human)."""

    type: ClassVar[str] = "pause.request"
    kind: str
    tool_name: str
    tool_call_id: str
    middleware: str | None = None
    link_index: int = -1
    question: str = ""
    detail: Any = None
    component_id: str | None = None
    args: Any = None
    args_digest: str = ""
    policy_version: str = ""
    iteration: int = 0
    mac: str | None = None
    content_digest: str = ""
    # The ask's deadline, ms after this event's timestamp (issue 11 item 4).
    timeout_ms: int | None = None
    # The paused tool's source (None for the agent's own tools), so an
    # approval folded from this pause names the tool whole (issue 22).
    tool_source: str | None = None
    # The caller a served call ran for (S2: an MCP access token's client and
    # scopes), where no turn recorded one, so a resume restores it (S10).
    identity: Any = None


class PausedCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a pause checkpoint carries so a store without its session can resume it.

    The paused call as the pipeline held it (R9, R14): its pause ``kind``,
    the arguments as they stood (``args``, bound by ``args_digest``), the
    asking link (``middleware``, ``link_index``), the model call it came from
    (``iteration``) and the turn's number and identity. ``question`` is what
    the person was asked; the ask's ``detail`` is not carried (the stream may
    hold it only redacted, G87, and a checkpoint handed back is real, G88),
    nor the time it paused (an imported pause's wait counts from its import).
    """

    kind: str
    args: Any = None
    middleware: str | None = None
    link_index: int = -1
    iteration: int = 0
    question: str = ""
    component_id: str | None = None
    turn: int = 0
    identity: Any = None


class SessionImported(Event, tag="session.imported", frozen=True):
    """A session seeded from a pause checkpoint whose session the store lacked.

    Recorded first in the new stream, so the record says the session came
    from a checkpoint (its ``checkpoint_digest`` and ``kind``) rather than
    from runs this store saw (R9). It holds what the checkpoint held; the
    pause it names is pending at ``checkpoint_seq``, the seq it had where it
    was taken.
    """

    type: ClassVar[str] = "session.imported"
    kind: str
    checkpoint_digest: str
    checkpoint_seq: int = 0
    history: tuple[Message, ...] = ()
    original_input: str | None = None
    tool_name: str = ""
    tool_call_id: str = ""
    args_digest: str = ""
    policy_version: str = ""
    mac: str | None = None
    content_digest: str = ""
    call: PausedCall | None = None
    traceparent: str = ""
    tracestate: str = ""
    trace_minted: bool = False  # as on ``agent.turn_start``


class PauseResumed(Event, tag="pause.resume", frozen=True):
    """A person answered a pause; ``provider`` as on ``agent.turn_start``."""

    type: ClassVar[str] = "pause.resume"
    kind: str
    tool_call_id: str
    approved: bool | None = None
    by: str | None = None
    note: str | None = None
    paused_duration_ms: int = 0
    component_id: str | None = None
    traceparent: str = ""
    tracestate: str = ""
    provider: str = ""


class ConversationSeeded(Event, tag="conversation.seeded", frozen=True):
    """A new session started from a checkpoint whose session the store lacks."""

    type: ClassVar[str] = "conversation.seeded"
    history: tuple[Message, ...] = ()
    original_input: str | None = None
