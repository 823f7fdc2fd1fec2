"""The event vocabulary: every state change of a session, as one tagged union.

Pattern: frozen, tagged msgspec Structs sharing one envelope, gathered here
         into the one union (``AnyEvent``) the decoders of ``_codec.py`` use.
Role:    events layer; the runtime appends these, stores keep them, ``fold``
         reads them, sinks watch them.
Emits:   nothing; these are the emissions.

Laws: R12, R13 (the types, by family: ``_turn_events``, ``_pause_events``,
``_decision_events``, ``_proxy_events``, ``_evidence_events``), R10, R4.

Why the union lives here: a stream interleaves every family, so there is one
union and one decoder per format, and every list of all the types is written
here; a type missing here reads back as unknown (test_event_union.py).
"""

from __future__ import annotations

from ._decision_events import DecisionFiled, MiddlewareDecisionEvent
from ._envelope import Event
from ._evidence_events import HeadSigned
from ._pause_events import (
    ConversationSeeded,
    PauseRequested,
    PauseResumed,
    SessionImported,
)
from ._proxy_events import ProxyCallFinished, ProxyCallStarted, ProxySessionClosed
from ._turn_events import (
    FatalError,
    LlmEnded,
    LlmStarted,
    MessageCommitted,
    OutputRejected,
    StreamToken,
    ToolDispatched,
    ToolEnded,
    ToolOutcomeUnknown,
    ToolStarted,
    TurnEnded,
    TurnStarted,
    WindowCompacted,
)

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
    | OutputRejected
    | ProxyCallStarted
    | ProxyCallFinished
    | ProxySessionClosed
    | HeadSigned
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
    OutputRejected,
    ProxyCallStarted,
    ProxyCallFinished,
    ProxySessionClosed,
    HeadSigned,
)
EVENT_TYPES: frozenset[str] = frozenset(c.type for c in EVENT_CLASSES)

# Invariant: the only event type that is never appended (R12).
TRANSIENT_TYPES: frozenset[str] = frozenset({StreamToken.type})

# Watchers get every event but the filing, which carries the ledger's values;
# they get its fact instead (``watched``).
UNWATCHED_TYPES: frozenset[str] = frozenset({DecisionFiled.type})
