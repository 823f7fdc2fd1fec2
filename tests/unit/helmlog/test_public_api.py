"""The public surface, pinned: a new public name is a reviewed change.

Pattern: snapshot tests of each package's ``__all__`` (httpx-style "a small
         pinned public surface"), plus the ``.act()`` completeness lock.
Role:    unit tests for ``helmlog``, ``helmlog.events``, ``helmlog.runtime``,
         ``helmlog.runtime.providers`` and ``runtime/_moments.py``.
Emits:   nothing.

Laws: API.md (the face's names), G71 (the keys are derived from the moments),
G72 (``.act()`` accepts exactly ``ACT_KEYS``; the typed declaration of its
options is checked against them at import, naming a missing or extra key).

Why the pins are literal lists: a test that derives the expected list from
the module would pass for any change; the point is that adding, renaming or
dropping a public name makes this file part of the diff.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import helmlog
from helmlog import ACT_KEYS, LOOP_MOMENTS, Agent, AgentBuildError, sliding_window
from helmlog.events import HelmlogError
from helmlog.runtime import ActOptions
from helmlog.runtime._moments import check_completeness
from helmlog.runtime.providers import scripted
from helmlog.runtime.testing import counter_ids

FACE = [
    "ACT_KEYS",
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
    "Checkpoint",
    "CheckpointError",
    "DecisionRequiredError",
    "Deny",
    "DivergenceError",
    "HelmlogError",
    "Judgement",
    "LedgerAppendError",
    "LedgerOutcomeUnknownError",
    "LoopMoment",
    "Message",
    "MessageContext",
    "MessageDeniedContext",
    "MessageDeniedError",
    "MessageMiddleware",
    "MiddlewareAsk",
    "MiddlewareDecision",
    "NoConversationError",
    "OutputValidationError",
    "ProviderError",
    "RecoveryRequiredError",
    "RedactionPolicy",
    "SequenceConflictError",
    "SessionState",
    "SessionWhatIf",
    "StoreError",
    "StreamTamperedError",
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
    "WindowStrategy",
    "__version__",
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
    "whatif",
]

EVENTS = [
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

RUNTIME = [
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

PROVIDERS = [
    "AnthropicMessagesProvider",
    "FrameworkModel",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "OutputSchema",
    "Provider",
    "ProviderRequest",
    "Reply",
    "ScriptedProvider",
    "TokenSink",
    "ToolSpec",
    "anthropic_messages",
    "framework_model",
    "openai_chat",
    "openai_responses",
    "scripted",
    "word_chunks",
]

SINKS = [
    "ConsoleSink",
    "ExportError",
    "FactsConsumer",
    "FinishedTelemetry",
    "JsonlSink",
    "OtelProcess",
    "OtelSink",
    "OtlpExport",
    "OtlpFactsSink",
    "export",
    "follow_facts",
    "otlp_endpoints",
    "replay",
]
TESTING = [
    "FakeClock",
    "Recorder",
    "counter_ids",
    "fold_of_last_session",
]

ACTORS = [
    "AgentFactory",
    "Cluster",
    "ClusterAgent",
    "ClusterConfigError",
    "ClusterError",
    "HostError",
    "HostUnavailableError",
    "PolicyActor",
    "PolicyLink",
    "SessionHost",
    "ToolExecutor",
    "host_for",
]
GATEWAY = [
    "HttpUpstream",
    "McpProxy",
    "OAuthClientCredentials",
    "ProxyAudit",
    "ProxyContext",
    "RejectionReason",
    "ToolCallTelemetry",
    "UpstreamConfigError",
    "UpstreamError",
    "compose",
    "mark_pass_through_observer",
    "mcp_client",
    "mcp_serve",
    "open_payload",
    "verify_manifest",
]
GATEWAY_HTTP = [
    "AuthConfigError",
    "Authenticator",
    "Principal",
    "ServeConfig",
    "Server",
    "approver_from_environment",
    "create_app",
    "serve",
    "token_digest",
]
EVENTS_LOWLEVEL = [
    "DIGEST_START",
    "SIGN_AFTER",
    "LeaseStore",
    "RecordTaker",
    "advance_digest",
    "append_with_events",
    "binding_mac",
    "canonical_json",
    "check_heads",
    "compact_json",
    "decode_msgpack",
    "digest",
    "encode_msgpack",
    "fact_for",
    "hash_bytes",
    "pause_content_digest",
    "pause_mac",
    "seal",
    "seal_event",
    "sign_checkpoint",
    "stored_encoding",
]
LOWLEVEL = [
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
    "RecordedCall",
    "RecordedCalls",
    "Recovered",
    "Ran",
    "Refused",
    "Residency",
    "Step",
    "SteeredTurn",
    "Steering",
    "SteeringError",
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

RULES = [
    "PII_PATTERNS",
    "ApproveOnce",
    "ArgumentCeiling",
    "Budget",
    "Detector",
    "PiiMatch",
    "PiiScrub",
    "RateLimit",
    "ToolAllowList",
    "TrustKey",
    "approve_once",
    "default_detector",
    "luhn_valid",
    "regex_detector",
]

PINNED = {
    "helmlog": FACE,
    "helmlog.rules": RULES,
    "helmlog.gateway": GATEWAY,
    "helmlog.gateway.http": GATEWAY_HTTP,
    "helmlog.actors": ACTORS,
    "helmlog.sinks": SINKS,
    "helmlog.runtime.testing": TESTING,
    "helmlog.events": EVENTS,
    "helmlog.events.lowlevel": EVENTS_LOWLEVEL,
    "helmlog.runtime": RUNTIME,
    "helmlog.runtime.providers": PROVIDERS,
    "helmlog.runtime.lowlevel": LOWLEVEL,
}


# -- the pins ---------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(PINNED))
def test_all_is_pinned(module: str) -> None:
    """API: each package's __all__ equals its pinned list (order is ruff's)."""
    assert sorted(PINNED[module]) == sorted(importlib.import_module(module).__all__)


@pytest.mark.parametrize("module", sorted(PINNED))
def test_every_public_name_resolves(module: str) -> None:
    """API: every name in __all__ is an attribute of its package."""
    mod = importlib.import_module(module)
    assert [] == [name for name in mod.__all__ if not hasattr(mod, name)]


def test_the_face_holds_the_names_api_md_pins() -> None:
    """API: every name API.md and SPEC.md put on the face is importable from helmlog."""
    contract = {
        "Agent",
        "AgentBuilder",
        "AgentBuildError",
        "allow",
        "deny",
        "ask",
        "Message",
        "Checkpoint",
        "Allow",
        "Deny",
        "Ask",
        "ToolMiddleware",
        "MessageMiddleware",
        "ToolCallContext",
        "ToolResultContext",
        "MessageContext",
        "MiddlewareDecision",
        "tool",
        "Tool",
        "AskPause",
        "is_ask_pause",
        "MiddlewareAsk",
        "check_in_approved",
        "check_in_declined",
        "CheckInDecision",
        "ask_human",
        "sliding_window",
        "WindowStrategy",
        "LOOP_MOMENTS",
        "ACT_KEYS",
        "act_key_for",
        "Watcher",
        "conversation_redaction",
        "RedactionPolicy",
        "MessageDeniedError",
        "NoConversationError",
        "DecisionRequiredError",
        "CheckpointError",
        "SequenceConflictError",
        "LedgerAppendError",
    }
    assert set() == contract - set(helmlog.__all__)


def test_face_errors_carry_distinct_codes() -> None:
    """API: every error on the face is a HelmlogError with its own code."""
    errors = [
        getattr(helmlog, n)
        for n in helmlog.__all__
        if isinstance(getattr(helmlog, n), type)
        and issubclass(getattr(helmlog, n), Exception)
    ]
    assert [] == [e for e in errors if not issubclass(e, HelmlogError)]
    codes = [e.code for e in errors]
    assert len(codes) == len(set(codes))
    assert [] == [c for c in codes if not (isinstance(c, str) and c.startswith("ERR_"))]


# -- G72: .act() accepts exactly ACT_KEYS ---------------------------------


def test_g72_act_options_declare_exactly_the_act_keys() -> None:
    """G72: the ActOptions TypedDict declares ACT_KEYS, in order, nothing else."""
    assert ACT_KEYS == tuple(ActOptions.__annotations__)


def test_g72_act_takes_keywords_not_a_hand_written_list() -> None:
    """G72: .act()'s signature is **keys; the accepted keys come from ACT_KEYS."""
    params = list(inspect.signature(helmlog.AgentBuilder.act).parameters.values())
    assert [("self", "POSITIONAL_OR_KEYWORD"), ("keys", "VAR_KEYWORD")] == [
        (p.name, p.kind.name) for p in params
    ]


def empty_value(key: str) -> Any:
    return sliding_window(keep_recent_turns=2) if key == "window" else []


@pytest.mark.parametrize("key", ACT_KEYS)
def test_g72_every_act_key_is_accepted(key: str) -> None:
    """G72: .act() accepts each key of ACT_KEYS."""
    builder = Agent.create(provider=scripted(reply="hi"), model="m", ids=counter_ids())
    assert builder is builder.act(**{key: empty_value(key)})


def test_g72_all_act_keys_are_accepted_together() -> None:
    """G72: .act() accepts every key of ACT_KEYS in one call."""
    builder = Agent.create(provider=scripted(reply="hi"), model="m")
    assert builder is builder.act(**{key: empty_value(key) for key in ACT_KEYS})


@pytest.mark.parametrize(
    "key",
    [
        *LOOP_MOMENTS[1:3],
        "inputs",
        "Input",
        "windows",
        "before",
        "after",
        "tools",
        "messages",
    ],
)
def test_g72_any_other_key_is_refused(key: str) -> None:
    """G72: .act() refuses every key that is not in ACT_KEYS."""
    builder = Agent.create(provider=scripted(reply="hi"), model="m")
    with pytest.raises(AgentBuildError, match=f"unknown key '{key}'"):
        builder.act(**{key: []})


@settings(max_examples=200, deadline=None)
@given(key=st.text(min_size=1, max_size=20).filter(lambda k: k not in ACT_KEYS))
def test_g72_every_key_outside_act_keys_is_refused(key: str) -> None:
    """G72: whatever the spelling, a key that is not in ACT_KEYS is refused."""
    builder = Agent.create(provider=scripted(reply="hi"), model="m")
    with pytest.raises(AgentBuildError) as caught:
        builder.act(**{key: []})
    assert f"unknown key '{key}'" in str(caught.value)
    assert builder is builder.act()


# -- G72: the completeness lock --------------------------------------------


def test_g72_check_completeness_accepts_a_complete_declaration() -> None:
    """G72: a declaration equal to ACT_KEYS passes the lock."""
    assert None is check_completeness(ACT_KEYS, ACT_KEYS)


def test_g72_check_completeness_names_a_missing_key() -> None:
    """G72: a moment without a key fails, naming the key."""
    with pytest.raises(ImportError) as caught:
        check_completeness(ACT_KEYS[:-1], ACT_KEYS)
    assert "moments without an .act() key: ['output']" in str(caught.value)


def test_g72_check_completeness_names_an_extra_key() -> None:
    """G72: a key without a moment fails, naming the key."""
    with pytest.raises(ImportError) as caught:
        check_completeness((*ACT_KEYS, "after_output"), ACT_KEYS)
    assert ".act() keys without a moment: ['after_output']" in str(caught.value)


MOMENTS_SOURCE = Path(inspect.getfile(check_completeness)).read_text(encoding="utf-8")


def load_moments(source: str) -> dict[str, Any]:
    """Execute a variant of runtime/_moments.py as a module body."""
    namespace: dict[str, Any] = {"__name__": "moments_variant"}
    exec(compile(source, "moments_variant.py", "exec"), namespace)
    return namespace


def test_g72_the_unchanged_module_passes_its_own_lock() -> None:
    """G72: the shipped module body runs its lock and passes."""
    assert ACT_KEYS == load_moments(MOMENTS_SOURCE)["ACT_KEYS"]


def test_g72_a_moment_added_without_a_key_fails_at_import() -> None:
    """G72: adding a moment to LOOP_MOMENTS alone fails the import, naming it."""
    source = MOMENTS_SOURCE.replace(
        '"window", "output"]\n"""Where', '"window", "output", "audit-log"]\n"""Where'
    )
    assert source != MOMENTS_SOURCE
    with pytest.raises(ImportError, match="audit_log"):
        load_moments(source)


def test_g72_a_key_literal_out_of_step_fails_at_import() -> None:
    """G72: an ``ActKey`` spelling no moment fails the import, naming it."""
    source = MOMENTS_SOURCE.replace(
        '"window", "output"]\n"""An', '"window", "outputs"]\n"""An'
    )
    assert source != MOMENTS_SOURCE
    with pytest.raises(ImportError, match="outputs"):
        load_moments(source)


def test_seed_names_are_the_face_s_types() -> None:
    """Issue 22 (seed 000/004): the seed's type names are exported and mean
    what the seeds say: LoopMoment/ActKey are the moments and keys, ActOptions
    the bundle, AskPayload what a MiddlewareAsk extends, MessageDeniedContext
    what MessageDeniedError is built from, ToolCallMiddleware and
    ToolResultMiddleware the two arms of ToolMiddleware."""
    from typing import get_args

    assert LOOP_MOMENTS == get_args(helmlog.LoopMoment)
    assert ACT_KEYS == get_args(helmlog.ActKey)
    assert ACT_KEYS == tuple(helmlog.ActOptions.__annotations__)
    asked = helmlog.ask("Refund $800?", {"amount": 800})
    assert helmlog.AskPayload("Refund $800?", {"amount": 800}) == asked.payload
    assert issubclass(helmlog.MiddlewareAsk, helmlog.AskPayload)
    context = helmlog.MessageDeniedContext(
        reason="no codenames", phase="output", middleware="scrub"
    )
    err = helmlog.MessageDeniedError(context)
    assert (context, "no codenames") == (err.context, err.reason)
    assert str(err) == str(
        helmlog.MessageDeniedError(
            reason="no codenames", phase="output", middleware="scrub"
        )
    )
    with pytest.raises(TypeError, match="MessageDeniedContext"):
        helmlog.MessageDeniedError(reason="r")
    on_call = helmlog.ToolCallMiddleware(
        name="c", on_tool_call=lambda c: helmlog.allow()
    )
    on_result = helmlog.ToolResultMiddleware(
        name="r", on_tool_result=lambda c: helmlog.allow()
    )
    both = helmlog.ToolMiddleware(
        name="b",
        on_tool_call=lambda c: helmlog.allow(),
        on_tool_result=lambda c: helmlog.allow(),
    )

    class Duck:
        name = "duck"

        def on_tool_result(self, call: Any) -> Any:
            return helmlog.allow()

    assert [True, False, True, False] == [
        isinstance(x, helmlog.ToolCallMiddleware)
        for x in (on_call, on_result, both, Duck())
    ]
    assert [False, True, True, True] == [
        isinstance(x, helmlog.ToolResultMiddleware)
        for x in (on_call, on_result, both, Duck())
    ]
    assert all(
        isinstance(x, helmlog.ToolMiddleware) for x in (on_call, on_result, Duck())
    )
    with pytest.raises(ValueError, match="on_tool_call"):
        helmlog.ToolCallMiddleware(name="c", on_tool_call=None)  # type: ignore[arg-type]


def test_g72_a_key_added_without_a_moment_fails_at_import() -> None:
    """G72: adding a key to ActOptions alone fails the import, naming it."""
    declared = "    output: list[Any] | tuple[Any, ...]\n"
    source = MOMENTS_SOURCE.replace(declared, declared + "    tools: list[Any]\n")
    assert source != MOMENTS_SOURCE
    with pytest.raises(ImportError, match="tools"):
        load_moments(source)
