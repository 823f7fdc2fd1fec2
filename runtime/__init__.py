"""helmlog.runtime — the governed loop, in one process, with no Ray and no Redis.

Verbs, links and their chains, the five moments, the ``Agent`` builder, tools,
providers, the window, pause/checkpoint/resume and redaction. This is what a
library user imports first (through ``helmlog``) and what most tests use.
"""

from ._agent import Agent, AgentBuilder
from ._builder import counter_ids  # noqa: F401  (helmlog.runtime.testing's)
from ._clock import wall_clock_ms
from ._context import MessageContext, ToolCallContext, ToolResultContext
from ._errors import (
    AgentBuildError,
    AgentFactoryError,
    DecisionRequiredError,
    DivergenceError,
    MessageDeniedContext,
    MessageDeniedError,
    NoConversationError,
    OutputValidationError,
    ProviderError,
    RecoveryRequiredError,
    TurnLimitError,
    UnknownSessionError,
)
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

__all__ = [
    "ACT_KEYS",
    "FLIPS",
    "LOOP_MOMENTS",
    "ActKey",
    "ActOptions",
    "Agent",
    "AgentBuildError",
    "AgentBuilder",
    "AgentFactoryError",
    "Allow",
    "Ask",
    "AskPause",
    "AskPayload",
    "CheckInDecision",
    "DecisionRequiredError",
    "Deny",
    "DivergenceError",
    "Judgement",
    "LoopMoment",
    "MessageContext",
    "MessageDeniedContext",
    "MessageDeniedError",
    "MessageMiddleware",
    "MiddlewareAsk",
    "NoConversationError",
    "OutputValidationError",
    "ProviderError",
    "RecoveryRequiredError",
    "RedactionPolicy",
    "SessionWhatIf",
    "SlidingWindow",
    "Tool",
    "ToolCallContext",
    "ToolCallMiddleware",
    "ToolMiddleware",
    "ToolResultContext",
    "ToolResultMiddleware",
    "TurnLimitError",
    "TurnResult",
    "UnknownSessionError",
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
    "deny",
    "is_ask_pause",
    "sliding_window",
    "tool",
    "wall_clock_ms",
]
