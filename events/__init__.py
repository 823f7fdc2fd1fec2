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
    verify_chain,
    verify_records,
)
from ._checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
)
from ._codec import (
    decode_event,
    encode_event,
    event_type,
    shape,
)
from ._decision import MiddlewareDecision
from ._decision_events import DecisionFiled, MiddlewareDecisionEvent
from ._envelope import Event, UnknownEvent
from ._errors import (
    CheckpointError,
    EventDecodeError,
    HelmlogError,
    LedgerAppendError,
    LedgerOutcomeUnknownError,
    SequenceConflictError,
    StoreError,
    StreamTamperedError,
)
from ._evidence import log_checkpoint, session_bundle
from ._evidence_events import HeadSigned
from ._facts import fact_of, watched
from ._fold import Folder, fold
from ._headlog import HeadsLog
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
from ._session_state import Approval, PendingPause, SessionState
from ._signed_heads import HeadSigner
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
    "AnyEvent",
    "Approval",
    "Checkpoint",
    "CheckpointError",
    "ConversationSeeded",
    "DecisionFiled",
    "Event",
    "EventDecodeError",
    "EventStore",
    "FactDelivery",
    "FactRecord",
    "FactsLog",
    "FatalError",
    "Folder",
    "HeadSigned",
    "HeadSigner",
    "HeadsLog",
    "HelmlogError",
    "LedgerAppendError",
    "LedgerOutcomeUnknownError",
    "LlmEnded",
    "LlmStarted",
    "MemoryEventStore",
    "Message",
    "MessageCommitted",
    "MiddlewareDecision",
    "MiddlewareDecisionEvent",
    "OutputRejected",
    "PauseRequested",
    "PauseResumed",
    "PausedCall",
    "PendingAsk",
    "PendingPause",
    "ProxyCallFinished",
    "ProxyCallStarted",
    "ProxySessionClosed",
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
    "TurnStarted",
    "UnknownEvent",
    "WindowCompacted",
    "WindowRefusal",
    "decode_event",
    "encode_event",
    "event_type",
    "fact_of",
    "fold",
    "log_checkpoint",
    "open_event_store",
    "read_verified",
    "refuse_headless",
    "session_bundle",
    "shape",
    "upgrade_heads",
    "verify_chain",
    "verify_records",
    "verify_session",
    "watched",
]
