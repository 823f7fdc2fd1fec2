"""helmlog.events — the vocabulary and the record.

The typed event union, the ledger row, codecs, the store ports (a stream
recorder, a facts log, a session index; ``EventStore`` is all three) with
their memory and Redis adapters, the hash chain, checkpoints, the pure fold
and the facts projection (``fact_of``, ``watched``: a decision is stored once, as its
row; watchers see its fact).
Imports nothing of helmlog: every other layer stands on this one.
"""

from typing import TYPE_CHECKING

from ._chain import (
    StoredEvent,
    StreamHead,
    hash_bytes,
    seal,
    stored_encoding,
    verify_chain,
    verify_records,
)
from ._checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
    binding_mac,
    pause_content_digest,
    pause_mac,
)
from ._codec import (
    canonical_json,
    compact_json,
    decode_event,
    decode_msgpack,
    digest,
    encode_event,
    encode_msgpack,
    event_type,
    shape,
)
from ._decision import MiddlewareDecision
from ._decision_events import DecisionFiled, MiddlewareDecisionEvent, fact_for
from ._envelope import Event, UnknownEvent
from ._errors import (
    AgentBuildError,
    AgentFactoryError,
    CheckpointError,
    ClusterConfigError,
    ClusterError,
    DecisionRequiredError,
    DivergenceError,
    EventDecodeError,
    HelmlogError,
    HostError,
    HostUnavailableError,
    LedgerAppendError,
    LedgerOutcomeUnknownError,
    MessageDeniedContext,
    MessageDeniedError,
    NoConversationError,
    ProviderError,
    RecoveryRequiredError,
    SequenceConflictError,
    StoreError,
    StreamTamperedError,
    UnknownSessionError,
)
from ._facts import fact_of, watched
from ._fold import Folder, fold
from ._index import PendingAsk
from ._messages import Message, ToolCallRequest
from ._open import open_event_store
from ._pause_events import (
    ConversationSeeded,
    PausedCall,
    PauseRequested,
    PauseResumed,
    SessionImported,
)
from ._proxy_events import ProxyCallFinished, ProxyCallStarted, ProxySessionClosed
from ._session_state import Approval, PendingPause, SessionState, sign_checkpoint
from ._store import (
    EventStore,
    FactDelivery,
    FactRecord,
    FactsLog,
    SessionIndex,
    StreamRecorder,
    read_verified,
    refuse_headless,
)
from ._turn_errors import OutputValidationError, TurnLimitError
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
    WindowRefusal,
)
from ._types import (
    EVENT_CLASSES,
    EVENT_TYPES,
    TRANSIENT_TYPES,
    UNWATCHED_TYPES,
    AnyEvent,
)
from ._verification import SessionVerdict, upgrade_heads, verify_session
from .memory import MemoryEventStore

if TYPE_CHECKING:
    from .redis import RedisEventStore


def __getattr__(name: str) -> object:
    # The Redis adapter is imported on first use, so `import helmlog` does not
    # pay for redis-py in processes that never touch Redis.
    if name == "RedisEventStore":
        from .redis import RedisEventStore

        return RedisEventStore
    raise AttributeError(f"module 'helmlog.events' has no attribute {name!r}")


__all__ = [
    "CHECKPOINT_VERSION",
    "EVENT_CLASSES",
    "EVENT_TYPES",
    "TRANSIENT_TYPES",
    "UNWATCHED_TYPES",
    "AgentBuildError",
    "AgentFactoryError",
    "AnyEvent",
    "Approval",
    "Checkpoint",
    "CheckpointError",
    "ClusterConfigError",
    "ClusterError",
    "ConversationSeeded",
    "DecisionFiled",
    "DecisionRequiredError",
    "DivergenceError",
    "Event",
    "EventDecodeError",
    "EventStore",
    "FactDelivery",
    "FactRecord",
    "FactsLog",
    "FatalError",
    "Folder",
    "HelmlogError",
    "HostError",
    "HostUnavailableError",
    "LedgerAppendError",
    "LedgerOutcomeUnknownError",
    "LlmEnded",
    "LlmStarted",
    "MemoryEventStore",
    "Message",
    "MessageCommitted",
    "MessageDeniedContext",
    "MessageDeniedError",
    "MiddlewareDecision",
    "MiddlewareDecisionEvent",
    "NoConversationError",
    "OutputRejected",
    "OutputValidationError",
    "PauseRequested",
    "PauseResumed",
    "PausedCall",
    "PendingAsk",
    "PendingPause",
    "ProviderError",
    "ProxyCallFinished",
    "ProxyCallStarted",
    "ProxySessionClosed",
    "RecoveryRequiredError",
    "RedisEventStore",
    "SequenceConflictError",
    "SessionImported",
    "SessionIndex",
    "SessionState",
    "SessionVerdict",
    "StoreError",
    "StoredEvent",
    "StreamHead",
    "StreamRecorder",
    "StreamTamperedError",
    "StreamToken",
    "ToolCallRequest",
    "ToolDispatched",
    "ToolEnded",
    "ToolOutcomeUnknown",
    "ToolStarted",
    "TurnEnded",
    "TurnLimitError",
    "TurnStarted",
    "UnknownEvent",
    "UnknownSessionError",
    "WindowCompacted",
    "WindowRefusal",
    "binding_mac",
    "canonical_json",
    "compact_json",
    "decode_event",
    "decode_msgpack",
    "digest",
    "encode_event",
    "encode_msgpack",
    "event_type",
    "fact_for",
    "fact_of",
    "fold",
    "hash_bytes",
    "open_event_store",
    "pause_content_digest",
    "pause_mac",
    "read_verified",
    "refuse_headless",
    "seal",
    "shape",
    "sign_checkpoint",
    "stored_encoding",
    "upgrade_heads",
    "verify_chain",
    "verify_records",
    "verify_session",
    "watched",
]
