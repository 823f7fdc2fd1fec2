"""The event vocabulary: every state change of a session, as one tagged union.

Pattern: frozen, tagged msgspec Structs (``tag_field="type"``) sharing one
         envelope, decoded by one module-level decoder per format.
Role:    events layer; the runtime appends these through its journal, stores
         keep them, ``fold`` reads them, sinks watch them.
Emits:   nothing; these are the emissions.

Laws: R12 (the envelope; ``stream.token`` is the one transient type), R13
(the types; the proxy's audit types, P20–P22), R9 (``session.imported``
records that a session was seeded from a
pause checkpoint, with the checkpoint's digest), issue 8 item 8 (the W3C
trace context of a turn — ``traceparent``, ``tracestate`` — is recorded on the
event that opens it and on each that continues it elsewhere: a resume, an
import, a recovery's ``tool.outcome_unknown``), R10 (every field added later
gets a default; unknown fields are ignored, never ``forbid_unknown_fields``),
G49 (the decision fact carries no value field at all, by schema), R4 (a fact
is a projection of its row).

Why ``gc=False``: a stream is read as tens of thousands of small immutable
records; untracked by the cycle collector, they decode without triggering
collections. They cannot form cycles: they are frozen and hold only values.

Why two decision events, one of them stored: the stream must keep the
ledger's values (a row's ``before``/``after``) so that ``fold`` can rebuild
the ledger, while watchers must get facts that cannot carry a value.
``decision.filed`` holds the row and is the only one stored; the fact
(``middleware.decision``) is a projection of it, computed at delivery by
``fact_of`` and carrying the row's envelope (its seq among them), so the
record holds each decision once (R4). Watchers receive the fact, never the
filing: ``watched`` (events/_facts.py) is the one rule that turns a stream
into what they see. Streams written before that change also hold a stored
fact right after each row; they still decode and fold (``fold`` reads rows
only), and ``watched`` delivers their stored facts as stored.

Why ``omit_defaults``: a field at its default is not written, so the stored
encoding holds what an event says and no more (``replayed: false``, an empty
``usage``, ``prev_hash: ""`` at seq 1); a reader fills the defaults back in
(R10: every field has one), and the bytes hashed are the bytes stored (R3).
Stores also leave ``session_id`` out of every event after seq 1 (the stream
key names the session; seq 1 keeps it, so the chain is bound to its session)
and readers stamp it back (``StoredEvent.decode``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ._decision import MiddlewareDecision
from ._messages import Message


class Event(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    gc=False,
    omit_defaults=True,
):
    """The envelope every event carries (R12)."""

    type: ClassVar[str]
    session_id: str = ""
    seq: int | None = None
    timestamp: int = 0
    prev_hash: str = ""
    replayed: bool = False


class DecisionFiled(Event, tag="decision.filed", frozen=True):
    """A ledger row, with its values, filed in the session stream."""

    type: ClassVar[str] = "decision.filed"
    row: MiddlewareDecision


class MiddlewareDecisionEvent(Event, tag="middleware.decision", frozen=True):
    """The decision fact: who decided what, where, and why — never a value."""

    type: ClassVar[str] = "middleware.decision"
    middleware: str
    moment: str
    at: str
    iteration: int
    outcome: str
    changed: bool
    phase: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    why: str | None = None
    component_id: str | None = None


class TurnStarted(Event, tag="agent.turn_start", frozen=True):
    """A turn began; ``base_seq`` is the seq of the checkpoint it continues.

    ``traceparent``/``tracestate`` are the turn's W3C trace context (the
    caller's, else one the runtime minted); empty in older streams.
    """

    type: ClassVar[str] = "agent.turn_start"
    turn: int
    base_seq: int = 0
    identity: Any = None
    traceparent: str = ""
    tracestate: str = ""


class TurnEnded(Event, tag="agent.turn_end", frozen=True):
    """A turn finished with an accepted answer."""

    type: ClassVar[str] = "agent.turn_end"
    turn: int
    final_content: str


class LlmStarted(Event, tag="stream.llm_start", frozen=True):
    """A model call began."""

    type: ClassVar[str] = "stream.llm_start"
    iteration: int
    model: str


class LlmEnded(Event, tag="stream.llm_end", frozen=True):
    """A model call returned; ``content`` is ``""`` while drafts are held.

    ``model`` is the model that answered, as the provider reported it (issue
    12 item 5); ``""`` when it could not tell, and in older streams, where
    ``stream.llm_start.model`` (the model asked for) is all there is.
    """

    type: ClassVar[str] = "stream.llm_end"
    iteration: int
    content: str
    content_withheld: bool = False
    tool_call_count: int = 0
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    stop_reason: str | None = None
    duration_ms: int = 0
    model: str = ""


class StreamToken(Event, tag="stream.token", frozen=True):
    """A chunk of text for listeners; transient, never appended (R12)."""

    type: ClassVar[str] = "stream.token"
    content: str


class ToolStarted(Event, tag="stream.tool_start", frozen=True):
    """A proposed call entered the pipeline, with the arguments as proposed."""

    type: ClassVar[str] = "stream.tool_start"
    tool_name: str
    tool_call_id: str
    iteration: int
    args: Any = None


class ToolEnded(Event, tag="stream.tool_end", frozen=True):
    """A call left the pipeline: what the tool really returned, or the refusal."""

    type: ClassVar[str] = "stream.tool_end"
    tool_name: str
    tool_call_id: str
    result: Any = None
    error: bool = False
    duration_ms: int = 0


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


class PauseResumed(Event, tag="pause.resume", frozen=True):
    """A person answered a pause."""

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


class FatalError(Event, tag="error.fatal", frozen=True):
    """A run ended by raising; content-free by construction (G91)."""

    type: ClassVar[str] = "error.fatal"
    code: str
    phase: str | None = None
    middleware: str | None = None
    retryable: bool = False


class MessageCommitted(Event, tag="message.committed", frozen=True):
    """A message joined the session's history."""

    type: ClassVar[str] = "message.committed"
    message: Message


class ConversationSeeded(Event, tag="conversation.seeded", frozen=True):
    """A new session started from a checkpoint whose session the store lacks."""

    type: ClassVar[str] = "conversation.seeded"
    history: tuple[Message, ...] = ()
    original_input: str | None = None


class ToolDispatched(Event, tag="tool.dispatched", frozen=True):
    """Recorded immediately before ``execute`` (R7)."""

    type: ClassVar[str] = "tool.dispatched"
    tool_name: str
    tool_call_id: str
    args: Any = None
    attempt: int = 1


class ToolOutcomeUnknown(Event, tag="tool.outcome_unknown", frozen=True):
    """A dispatched call whose result was never recorded (R7)."""

    type: ClassVar[str] = "tool.outcome_unknown"
    tool_name: str
    tool_call_id: str
    traceparent: str = ""
    tracestate: str = ""


class WindowRefusal(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message the window strategy would not remove, and why (G81)."""

    reason: str
    turn_index: int
    message_index: int


class WindowCompacted(Event, tag="window.compacted", frozen=True):
    """The window strategy engaged at one iteration (G80)."""

    type: ClassVar[str] = "window.compacted"
    strategy: str
    iteration: int
    keep_recent_turns: int
    removed_message_count: int
    window_chars_before: int
    window_chars_after: int
    turns_before: int
    turns_after: int
    refusals: tuple[WindowRefusal, ...] = ()
    dropped_observations: tuple[str, ...] = ()


class ProxyCallStarted(Event, tag="proxy.call_started", frozen=True):
    """The MCP proxy received a tool call, before routing it (P20)."""

    type: ClassVar[str] = "proxy.call_started"
    request_id: str
    tool: str
    transport: str = "stdio"
    identity: Any = None
    caller_meta: Any = None
    server_name: str | None = None
    server_version: str | None = None


class ProxyCallFinished(Event, tag="proxy.call_finished", frozen=True):
    """What one proxied tool call came to, before the response leaves (P20, P23).

    ``input_raw``/``output_raw`` are stored for the low and medium tiers;
    the high tier stores them only sealed (``input_sealed``/``output_sealed``,
    AES-256-GCM). Every tier stores the digests.
    """

    type: ClassVar[str] = "proxy.call_finished"
    request_id: str
    route: str
    tool: str
    outcome: str
    input_digest: str
    output_digest: str
    forwarded_tool: str | None = None
    rejection_reason: str | None = None
    duration_ms: float = 0.0
    sensitivity: str = "high"
    input_raw: Any = None
    output_raw: Any = None
    input_sealed: str | None = None
    output_sealed: str | None = None
    identity: Any = None
    server_name: str | None = None
    server_version: str | None = None


class ProxySessionClosed(Event, tag="proxy.session_closed", frozen=True):
    """A proxy session ended; ``manifest`` is its signed summary (P18, P22)."""

    type: ClassVar[str] = "proxy.session_closed"
    manifest: dict[str, Any]


class UnknownEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event whose ``type`` this reader does not know (R10): reported, skipped."""

    type: str
    session_id: str = ""
    seq: int | None = None
    timestamp: int = 0
    prev_hash: str = ""
    replayed: bool = False
    data: bytes = b""


AnyEvent = (
    DecisionFiled
    | MiddlewareDecisionEvent
    | TurnStarted
    | TurnEnded
    | LlmStarted
    | LlmEnded
    | StreamToken
    | ToolStarted
    | ToolEnded
    | PauseRequested
    | PauseResumed
    | FatalError
    | MessageCommitted
    | ConversationSeeded
    | SessionImported
    | ToolDispatched
    | ToolOutcomeUnknown
    | WindowCompacted
    | ProxyCallStarted
    | ProxyCallFinished
    | ProxySessionClosed
)

EVENT_CLASSES: tuple[type[Event], ...] = (
    DecisionFiled,
    MiddlewareDecisionEvent,
    TurnStarted,
    TurnEnded,
    LlmStarted,
    LlmEnded,
    StreamToken,
    ToolStarted,
    ToolEnded,
    PauseRequested,
    PauseResumed,
    FatalError,
    MessageCommitted,
    ConversationSeeded,
    SessionImported,
    ToolDispatched,
    ToolOutcomeUnknown,
    WindowCompacted,
    ProxyCallStarted,
    ProxyCallFinished,
    ProxySessionClosed,
)
EVENT_TYPES: frozenset[str] = frozenset(c.type for c in EVENT_CLASSES)

# Invariant: the only event type that is never appended (R12).
TRANSIENT_TYPES: frozenset[str] = frozenset({StreamToken.type})

# Watchers get every event but the filing, which carries the ledger's values;
# they get its fact instead (``watched``).
UNWATCHED_TYPES: frozenset[str] = frozenset({DecisionFiled.type})


def fact_for(row: MiddlewareDecision) -> MiddlewareDecisionEvent:
    """The value-free fact for one row (G49), with an empty envelope.

    ``fact_of`` gives the fact of a filed row with the row's envelope.
    """
    return MiddlewareDecisionEvent(
        middleware=row.middleware,
        moment=row.moment,
        at=row.at,
        iteration=row.iteration,
        outcome=row.outcome,
        changed=row.changed,
        phase=row.phase,
        tool_name=row.tool_name,
        tool_call_id=row.tool_call_id,
        why=row.why,
        component_id=row.component_id,
    )
