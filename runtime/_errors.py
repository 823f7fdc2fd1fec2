"""The runtime's errors: what a governed loop, its builder and its what-if raise.

Role:    runtime layer; leaves of the tree rooted at ``HelmlogError``
         (``helmlog.events``), each with its ``code`` and ``retryable``, raised
         by the loop (a refused message, a turn limit, an output type), the
         builder, resume and recovery, the providers and the what-if.
Laws: G37 (a message refusal), G91 (a provider failure, ``ERR_PROVIDER``),
R23 (turn limits), G92 (output types), G10/G73 (a wrong build).

Why here and not in ``events``: each names a concept of the runtime; the
record's own errors (store, checkpoint, decode, tamper) stay in ``events``.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from helmlog.events import HelmlogError


class MessageDeniedContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a message refusal is made of: who refused, at which phase, why.

    ``MessageDeniedError`` is constructed from one (seed 000); it never
    holds the refused content.
    """

    reason: str
    phase: str
    middleware: str


class MessageDeniedError(HelmlogError):
    """A message chain refused the input or the output (G37).

    Built from a ``MessageDeniedContext`` (``MessageDeniedError(context)``)
    or from its three fields as keywords; ``.context`` gives it back.
    """

    code = "ERR_MESSAGE_DENIED"

    def __init__(
        self,
        context: MessageDeniedContext | None = None,
        *,
        reason: str | None = None,
        phase: str | None = None,
        middleware: str | None = None,
    ) -> None:
        if context is None:
            if reason is None or phase is None or middleware is None:
                raise TypeError(
                    "MessageDeniedError needs a MessageDeniedContext, or reason=, "
                    "phase= and middleware="
                )
            context = MessageDeniedContext(
                reason=reason, phase=phase, middleware=middleware
            )
        self.reason = context.reason
        self.phase = context.phase
        self.middleware = context.middleware
        super().__init__(
            f"Message denied at '{context.phase}' by '{context.middleware}': "
            f"{context.reason}"
        )

    @property
    def context(self) -> MessageDeniedContext:
        """The refusal's context: reason, phase and middleware."""
        return MessageDeniedContext(
            reason=self.reason, phase=self.phase, middleware=self.middleware
        )


class NoConversationError(HelmlogError):
    """There is no conversation to continue (G36, G38, G68)."""

    code = "ERR_NO_CONVERSATION"

    _MESSAGES: ClassVar[dict[str, str]] = {
        "never-run": (
            "There is no conversation to continue: no run of this agent has "
            "passed input admission yet. Start one with run(message)."
        ),
        "last-input-refused": (
            "There is no conversation to continue: input middleware refused the "
            "last message, so it started no conversation. Continue from the "
            "earlier accepted checkpoint with run(message, continue_from=...)."
        ),
        "pending-question": (
            "This session is waiting on a person: resume its pause with "
            "agent.resume(checkpoint, decision) before sending a new message, "
            "or start a new session with run(message)."
        ),
    }

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(self._MESSAGES.get(reason, reason))


class DecisionRequiredError(HelmlogError):
    """``resume`` was given no usable decision for a consent gate (G61, G70)."""

    code = "ERR_DECISION_REQUIRED"

    def __init__(
        self,
        *,
        gate: str,
        middleware: str | None,
        tool_name: str | None,
        received: str,
    ) -> None:
        self.gate = gate
        self.middleware = middleware
        self.tool_name = tool_name
        self.received = received
        if gate == "ask-human":
            text = (
                f"The tool '{tool_name}' asked a person a question: resume with "
                f"their answer (any value but None); received {received}."
            )
        else:
            who = f"middleware '{middleware}'" if middleware else f"tool '{tool_name}'"
            text = (
                f"The {gate} pause of {who} needs a decision: resume with "
                f"check_in_approved(by=...) or check_in_declined(by=...); "
                f"received {received}."
            )
        super().__init__(text)


class RecoveryRequiredError(HelmlogError):
    """A turn holds calls dispatched without a recorded result (R20, R7).

    Continuing the session (``follow_up``, ``run(continue_from=...)``) would
    leave the record silent on whether those calls took effect, so it is
    refused before anything is appended until ``agent.recover(session_id)``
    (or ``helmlog recover``) has recorded what is known. Not retryable as is:
    the caller, or a host's failover, must recover the turn first.
    """

    code = "ERR_RECOVERY_REQUIRED"

    def __init__(self, *, session_id: str, call_ids: tuple[str, ...]) -> None:
        self.session_id = session_id
        self.call_ids = tuple(call_ids)
        listed = ", ".join(self.call_ids)
        super().__init__(
            f"session '{session_id}' has a turn whose calls ({listed}) were "
            "dispatched without a recorded result: finish it with "
            f"agent.recover('{session_id}') or `helmlog recover --store URL "
            f"{session_id}`, then continue"
        )


class ProviderError(HelmlogError):
    """The model provider failed (G91: ERR_PROVIDER)."""

    code = "ERR_PROVIDER"
    retryable = True


class AgentBuildError(HelmlogError, ValueError):
    """An agent was assembled wrongly; nothing was attached (G10, G73)."""

    code = "ERR_AGENT_BUILD"


class DivergenceError(HelmlogError):
    """A session re-judged under changed rules would have gone another way.

    Raised by ``WhatIfReport.raise_for_divergence()`` (issue 13), like a
    replayer's nondeterminism error: ``session_id`` and the ``seq``,
    ``moment``, ``flip`` and ``tool_call_id`` (``None`` off a tool moment)
    of its divergence point, the first decision that changes what the model
    would have read; ``diverged`` counts the sessions that diverge. Carries
    no value. Not retryable: neither the record nor the rules change by
    asking again.
    """

    code = "ERR_DIVERGENCE"

    def __init__(
        self,
        *,
        session_id: str,
        seq: int,
        moment: str,
        flip: str | None,
        tool_call_id: str | None = None,
        diverged: int = 1,
    ) -> None:
        self.session_id = session_id
        self.seq = seq
        self.moment = moment
        self.flip = flip
        self.tool_call_id = tool_call_id
        self.diverged = diverged
        call = f", call {tool_call_id}" if tool_call_id else ""
        more = f" (and {diverged - 1} more session(s))" if diverged > 1 else ""
        super().__init__(
            f"session '{session_id}' diverges at seq {seq} ({moment}{call}: "
            f"{flip}){more}"
        )


class UnknownSessionError(HelmlogError):
    """A store holds no stream (and no head record) for this session.

    Not retryable: ask for a session the store holds (``store.sessions()``).
    """

    code = "ERR_UNKNOWN_SESSION"

    def __init__(self, *, session_id: str, store: str = "") -> None:
        self.session_id = session_id
        self.store = store
        where = f" in {store}" if store else ""
        super().__init__(f"no session '{session_id}'{where}")


class AgentFactoryError(HelmlogError, ValueError):
    """An agent factory named as ``module:function`` gives no agent.

    ``spec`` is what was named; ``reason`` is ``"malformed"`` (not
    ``module:function``), ``"import"`` (the module does not import),
    ``"missing"`` (no such callable in it) or ``"not-an-agent"`` (calling it
    raised, or returned something else). Not retryable.
    """

    code = "ERR_AGENT_FACTORY"
    REASONS = ("malformed", "import", "missing", "not-an-agent")

    def __init__(self, *, spec: str, reason: str, detail: str) -> None:
        self.spec = spec
        self.reason = reason
        self.detail = detail
        super().__init__(f"--agent {spec!r}: {detail}")


class TurnLimitError(HelmlogError):
    """A turn reached one of its agent's limits and stopped (issue 12 item 1).

    ``limit`` names it (``"max_model_calls"``, ``"max_tool_calls"``,
    ``"max_turn_s"``) and ``value`` is its setting. The turn is recorded as
    ``error.fatal`` with this code; the session stays continuable from its
    last conversation, as after any failed turn. Not retryable as is: the
    same turn would reach the same limit.
    """

    code = "ERR_TURN_LIMIT"

    def __init__(self, *, limit: str, value: float) -> None:
        self.limit = limit
        self.value = value
        super().__init__(
            f"the turn reached its agent's limit {limit}={value:g} and stopped; "
            "the session continues from its last answer (raise the limit with "
            f"Agent.create(..., {limit}=...))"
        )


class OutputValidationError(HelmlogError):
    """The model's answer failed the agent's ``output_type`` after every retry (G92).

    ``output_type`` names the type, ``attempts`` counts the answers that
    failed this turn (``max_output_retries + 1``), ``error`` is the last
    validation error: where and why, never the draft or its values (G43).
    Recorded as ``error.fatal`` with this code; the session stays continuable
    from its last answer, as after any failed turn. Not retryable as is: the
    turn already asked the model again ``max_output_retries`` times.
    """

    code = "ERR_OUTPUT_INVALID"

    def __init__(self, *, output_type: str, attempts: int, error: str) -> None:
        self.output_type = output_type
        self.attempts = attempts
        self.error = error
        super().__init__(
            f"the model's answer failed the output type '{output_type}' "
            f"{attempts} time{'s' if attempts != 1 else ''}; last error: {error}. "
            "The session continues from its last answer (raise "
            "Agent.create(..., max_output_retries=...) to ask again more often)"
        )


class SteeringError(HelmlogError, ValueError):
    """A steered turn was driven out of order (issue 27, ``Steering``).

    ``reason`` names the misuse: ``"no-open-turn"`` (the session has no turn
    open: open one with ``open_turn``), ``"turn-open"`` (``open_turn`` on a
    session whose turn is still open: re-attach with ``turn(session_id)``),
    ``"unknown-call"`` (the call is not one the model proposed in this turn:
    record the reply with ``model_reply`` first), ``"not-admitted"``
    (``after_tool`` for a call ``before_tool`` did not admit),
    ``"pending-question"`` (another call waits on a person), or
    ``"unsupported"`` (an agent option the framework's loop cannot honour).
    Raised before anything is appended; carries no value. Not retryable as is.
    """

    code = "ERR_STEERING"
    REASONS = (
        "no-open-turn",
        "turn-open",
        "unknown-call",
        "not-admitted",
        "pending-question",
        "unsupported",
    )

    def __init__(
        self,
        *,
        reason: str,
        session_id: str,
        detail: str,
        tool_call_id: str | None = None,
    ) -> None:
        self.reason = reason
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        self.detail = detail
        super().__init__(f"session '{session_id}': {detail}" if session_id else detail)


class FrameworkModelError(ProviderError):
    """The native loop called a ``framework_model`` provider (issue 27).

    An agent steered by another framework (``Steering``) never calls its
    provider: that framework calls its own model, and the provider's name
    is only what the record keeps (``gen_ai.provider.name``). Running such
    an agent with ``agent.run``/``resume`` reaches this. Not retryable.
    """

    code = "ERR_FRAMEWORK_MODEL"
    retryable = False

    def __init__(self, *, provider: str) -> None:
        self.provider = provider
        super().__init__(
            f"framework_model({provider!r}) is a placeholder for a model another "
            "framework calls (Steering): the native loop cannot call it; drive "
            "the agent through its framework, or build it with a real provider"
        )
