"""helmlog.runtime.lowlevel — the kernel that upper layers build on.

Pattern: a public low-level namespace (trio's ``trio.lowlevel``): the walkers,
         the journal, the one tool-call pipeline (``ToolPipeline``, ``Entry``,
         ``Step``, outcomes, ``IN_AGENT``/``SERVED``), ``Steering`` (an
         agent's turns driven by another framework's loop), the conversation
         ``Cursor``, the ``Residency`` cache, ``decide_pending``, the
         recovery sweep and what-if over a store, pinned by a test.
Role:    runtime layer; imported by ``actors`` and ``gateway``, so no other
         layer reaches into a private module of ``runtime``. Not for ordinary
         agent code (``helmlog``, ``helmlog.runtime``).

Why re-exports: the private modules stay free to be split and renamed.
"""

from ._chain import CallSite, walk_tool_calls, walk_tool_results
from ._collector import settle_collector
from ._cursor import Cursor
from ._errors import FrameworkModelError, SteeringError
from ._journal import Journal
from ._links import Link, as_tool_link, tool_link_problem
from ._pipeline import ToolPipeline
from ._recorded import NotRecorded, RecordedCall, RecordedCalls
from ._residency import Residency
from ._steering import SteeredTurn, Steering
from ._steps import (
    IN_AGENT,
    SERVED,
    Admitted,
    CallRecorder,
    CallRules,
    Entry,
    Outcome,
    Paused,
    Ran,
    Refused,
    Step,
    ask_human_text,
)
from ._sweep import Recovered, recover_sessions
from ._tools import (
    CredentialResolver,
    call_execute,
    invalid_arguments_text,
    render_result,
    unknown_tool_text,
    with_credentials,
)
from ._validation import quick_check
from ._watchers import Listeners
from .pause._decide import NoPendingAsk, decide_pending
from .pause._pause import AskHumanSignal, PauseKind, pause_kind, running_tool
from .whatif._sessions import sessions_since, whatif, whatif_store
from .whatif._whatif import WhatIf

__all__ = [
    "IN_AGENT",
    "SERVED",
    "Admitted",
    "AskHumanSignal",
    "CallRecorder",
    "CallRules",
    "CallSite",
    "CredentialResolver",
    "Cursor",
    "Entry",
    "FrameworkModelError",
    "Journal",
    "Link",
    "Listeners",
    "NoPendingAsk",
    "NotRecorded",
    "Outcome",
    "PauseKind",
    "Paused",
    "Ran",
    "RecordedCall",
    "RecordedCalls",
    "Recovered",
    "Refused",
    "Residency",
    "SteeredTurn",
    "Steering",
    "SteeringError",
    "Step",
    "ToolPipeline",
    "WhatIf",
    "as_tool_link",
    "ask_human_text",
    "call_execute",
    "decide_pending",
    "invalid_arguments_text",
    "pause_kind",
    "quick_check",
    "recover_sessions",
    "render_result",
    "running_tool",
    "sessions_since",
    "settle_collector",
    "tool_link_problem",
    "unknown_tool_text",
    "walk_tool_calls",
    "walk_tool_results",
    "whatif",
    "whatif_store",
    "with_credentials",
]
