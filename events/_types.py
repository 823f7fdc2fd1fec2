"""The event vocabulary: every state change of a session, as one tagged union.

Pattern: frozen, tagged msgspec Structs (``tag_field="type"``) sharing one
         envelope, gathered here into the one union (``AnyEvent``) that the
         module-level decoders of ``events/_codec.py`` decode into.
Role:    events layer; the runtime appends these through its journal, stores
         keep them, ``fold`` reads them, sinks watch them.
Emits:   nothing; these are the emissions.

Laws: R12 (the envelope, ``events/_envelope.py``; ``stream.token`` is the one
transient type), R13 (the types, by family: a turn's in
``events/_turn_events.py``, pauses and imports in ``events/_pause_events.py``,
decisions in ``events/_decision_events.py``, the proxy's audit types, P20–P22,
in ``events/_proxy_events.py``), R10 (every field added later gets a default;
unknown fields are ignored, never ``forbid_unknown_fields``), R4 (watchers
get a filed row's fact, never the filing).

Why the types live by family and the union lives here: each family reads as
one story (a turn, a pause, a decision, a proxied call) and its module stays
small, but a stream holds them all interleaved, so there is exactly one union
and one decoder per format, and every list of "all the types" (the union,
``EVENT_CLASSES``, ``EVENT_TYPES``) is written in this one place. A type
added to a family and not here would be recorded and read back as unknown;
``tests/unit/events/test_event_union.py`` fails on it.
"""

from __future__ import annotations

from ._decision_events import DecisionFiled, MiddlewareDecisionEvent
from ._envelope import Event
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
)
EVENT_TYPES: frozenset[str] = frozenset(c.type for c in EVENT_CLASSES)

# Invariant: the only event type that is never appended (R12).
TRANSIENT_TYPES: frozenset[str] = frozenset({StreamToken.type})

# Watchers get every event but the filing, which carries the ledger's values;
# they get its fact instead (``watched``).
UNWATCHED_TYPES: frozenset[str] = frozenset({DecisionFiled.type})
