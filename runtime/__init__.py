"""helmlog.runtime — the governed loop, in one process, with no Ray and no Redis.

Verbs, links and their chains, the five moments, the ``Agent`` builder, tools,
providers, the window, pause/checkpoint/resume and redaction. This is what a
library user imports first (through ``helmlog``) and what most tests use.
"""

from helmlog.events import (
    AgentBuildError,
    Checkpoint,
    CheckpointError,
    DecisionRequiredError,
    HelmlogError,
    LedgerAppendError,
    LedgerOutcomeUnknownError,
    Message,
    MessageDeniedError,
    MiddlewareDecision,
    NoConversationError,
    RecoveryRequiredError,
    SequenceConflictError,
    SessionState,
)

from ._agent import Agent, AgentBuilder
from ._builder import counter_ids
from ._clock import wall_clock_ms
from ._context import MessageContext, ToolCallContext, ToolResultContext
from ._links import (
    MessageMiddleware,
    ToolCallMiddleware,
    ToolMiddleware,
    ToolResultMiddleware,
)
from ._moments import (
    ACT_KEYS,
    LOOP_MOMENTS,
    ActKey,
    ActOptions,
    LoopMoment,
    act_key_for,
)
from ._redaction import RedactionPolicy, conversation_redaction
from ._tools import Tool, tool
from ._verbs import Allow, Ask, AskPayload, Deny, allow, ask, deny
from ._watchers import Watcher
from ._window import SlidingWindow, WindowPlan, WindowStrategy, sliding_window
from .pause._pause import (
    AskPause,
    CheckInDecision,
    MiddlewareAsk,
    TurnResult,
    ask_human,
    check_in_approved,
    check_in_declined,
    is_ask_pause,
)
from .whatif._report import FLIPS, Judgement, SessionWhatIf, WhatIfReport
from .whatif._sessions import whatif

__all__ = [
    "ACT_KEYS",
    "FLIPS",
    "LOOP_MOMENTS",
    "ActKey",
    "ActOptions",
    "Agent",
    "AgentBuildError",
    "AgentBuilder",
    "Allow",
    "Ask",
    "AskPause",
    "AskPayload",
    "CheckInDecision",
    "Checkpoint",
    "CheckpointError",
    "DecisionRequiredError",
    "Deny",
    "HelmlogError",
    "Judgement",
    "LedgerAppendError",
    "LedgerOutcomeUnknownError",
    "LoopMoment",
    "Message",
    "MessageContext",
    "MessageDeniedError",
    "MessageMiddleware",
    "MiddlewareAsk",
    "MiddlewareDecision",
    "NoConversationError",
    "RecoveryRequiredError",
    "RedactionPolicy",
    "SequenceConflictError",
    "SessionState",
    "SessionWhatIf",
    "SlidingWindow",
    "Tool",
    "ToolCallContext",
    "ToolCallMiddleware",
    "ToolMiddleware",
    "ToolResultContext",
    "ToolResultMiddleware",
    "TurnResult",
    "Watcher",
    "WhatIfReport",
    "WindowPlan",
    "WindowStrategy",
    "act_key_for",
    "allow",
    "ask",
    "ask_human",
    "check_in_approved",
    "check_in_declined",
    "conversation_redaction",
    "counter_ids",
    "deny",
    "is_ask_pause",
    "sliding_window",
    "tool",
    "wall_clock_ms",
    "whatif",
]
