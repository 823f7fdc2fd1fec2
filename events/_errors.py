"""The helmlog exception tree: one root, errors that carry data, never values.

Pattern: a drawn exception tree (httpx-style); every error has a ``code`` and
         says whether retrying can help. The tree, each leaf with its code,
         is drawn in docs/design.md ("The exception tree").
Role:    events layer: the root ``HelmlogError`` and the record's own errors
         (store, checkpoint, decode, tamper); every layer's errors derive
         from the root, so a caller catches one type.
Emits:   nothing.

Why no refused value rides on an error: errors travel to logs, traces and
callers that were never cleared to read the refused content. Errors carry who,
where and why; the record holds the rest, under the redaction policy.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec


class HelmlogError(Exception):
    """Root of every error helmlog raises on purpose."""

    code: str = "ERR_HELMLOG"
    retryable: bool = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (Ray actors): rebuild them with their
        # data, without calling an __init__ whose keywords pickle cannot know.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(
    cls: type[HelmlogError], args: tuple[Any, ...], state: dict[str, Any]
) -> HelmlogError:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


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


class CheckpointError(HelmlogError):
    """A checkpoint was refused before anything was appended (R9, R14).

    ``"session-deleted"`` (R25): the store once held the checkpoint's session
    and no longer has it, so the checkpoint is not imported as a new one.
    """

    code = "ERR_CHECKPOINT"
    REASONS = (
        "malformed",
        "unknown-session",
        "tampered",
        "replayed",
        "stale",
        "policy-changed",
        "session-deleted",
    )

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        text = f"checkpoint refused ({reason})"
        super().__init__(f"{text}: {detail}" if detail else text)


class EventDecodeError(HelmlogError, msgspec.DecodeError):
    """Stored or received bytes do not decode to an event (R10, R12).

    ``reason`` is ``"malformed"`` (not JSON/msgpack, or a known type with bad
    fields) or ``"too-deep"`` (nested past the decoders' depth bound). Also a
    ``msgspec.DecodeError`` (so a ``ValueError``): callers that guarded a
    decode with those keep working. Not retryable: the bytes will not change.
    """

    code = "ERR_EVENT_DECODE"

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        text = f"event does not decode ({reason})"
        super().__init__(f"{text}: {detail}" if detail else text)


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


class StreamTamperedError(HelmlogError):
    """A session's stream failed verification, so nothing ran on it (R19, R3).

    ``seq`` is the first bad seq; ``reason`` says what failed there:
    ``"order"`` (a seq out of order, or a body naming another seq),
    ``"malformed"`` (bytes that are not an event), ``"hash"`` (the recomputed
    hash differs from the stored one: an edit, or a hash not made with this
    store's chain key), ``"chain"`` (``prev_hash`` is not its predecessor's
    hash), ``"truncated"`` (the head record names a later seq than the stream
    holds: ``seq`` is the first missing one), ``"deleted"`` (the head record
    remains, the stream is gone), ``"head"`` (the head record's MAC or hash
    does not verify) or ``"no-head"`` (R26: the store writes head records and
    this stream has none; ``seq`` is 0, the head's place). Not retryable: the
    stored bytes will not change.
    """

    code = "ERR_STREAM_TAMPERED"
    REASONS = (
        "order",
        "malformed",
        "hash",
        "chain",
        "truncated",
        "deleted",
        "head",
        "no-head",
    )

    def __init__(self, *, session_id: str, seq: int, reason: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.reason = reason
        super().__init__(
            f"session '{session_id}' failed verification at seq {seq} ({reason}); "
            "nothing was run on it: check the stream with `helmlog verify`"
        )


class StoreError(HelmlogError):
    """An event store could not do what was asked; retrying may help."""

    code = "ERR_STORE"
    retryable = True


class SequenceConflictError(StoreError):
    """An append expected a different last seq: another writer got there (R2)."""

    code = "ERR_SEQUENCE_CONFLICT"

    def __init__(self, *, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session '{session_id}': expected last seq {expected}, "
            f"the stream is at {actual}"
        )


class LedgerAppendError(StoreError):
    """An append failed, so the governed action did not happen (R5).

    R24: the append is not in the stream. A store whose reply was lost reads
    the stream back before it answers; when it cannot tell, the error is
    ``LedgerOutcomeUnknownError``. (A store that breaks R24 is still caught:
    the session's next activation reports an append that landed after all
    and publishes its facts.)
    """

    code = "ERR_LEDGER_APPEND"

    def __init__(self, *, session_id: str, store: str, cause: str) -> None:
        self.session_id = session_id
        self.store = store
        super().__init__(
            f"could not append to session '{session_id}' in {store}: {cause}; "
            "the append is not in the stream and the action was not taken — retry"
        )


class LedgerOutcomeUnknownError(LedgerAppendError):
    """An append was sent, its reply was lost, and the store did not answer a
    read-back in time: whether it landed is unknown (R24).

    The governed action did not happen either way. Retryable: nothing acts
    on the session again before an activation has read its stream back,
    which settles the question (an append that landed is reported and its
    facts published; the retry continues from the stream as it is).
    """

    code = "ERR_LEDGER_OUTCOME_UNKNOWN"

    def __init__(self, *, session_id: str, store: str, cause: str) -> None:
        self.session_id = session_id
        self.store = store
        StoreError.__init__(
            self,
            f"could not learn whether an append to session '{session_id}' in "
            f"{store} landed: {cause}; the action was not taken, and the "
            "session's next activation reads the stream back and reconciles "
            "it — retry once the store answers",
        )


class ProviderError(HelmlogError):
    """The model provider failed (G91: ERR_PROVIDER)."""

    code = "ERR_PROVIDER"
    retryable = True


class AgentBuildError(HelmlogError, ValueError):
    """An agent was assembled wrongly; nothing was attached (G10, G73)."""

    code = "ERR_AGENT_BUILD"


class ClusterError(HelmlogError):
    """A cluster of session hosts could not serve a call (R8, R21, R22)."""

    code = "ERR_CLUSTER"


class ClusterConfigError(ClusterError, ValueError):
    """A cluster was asked for something its hosts are not, or cannot use.

    ``what`` names the setting (``"store_url"``, ``"n_hosts"``, ``"factory"``,
    ``"chain_key"``); ``existing`` and ``requested`` are what the running hosts
    have and what this client asked for (a store URL without credentials).
    """

    code = "ERR_CLUSTER_CONFIG"

    def __init__(
        self, *, name: str, what: str, existing: str, requested: str, hint: str = ""
    ) -> None:
        self.name = name
        self.what = what
        self.existing = existing
        self.requested = requested
        text = (
            f"cluster '{name}': {what} is {existing}, not {requested}"
            if existing
            else f"cluster '{name}': {what} {requested}"
        )
        super().__init__(f"{text}; {hint}" if hint else text)


class HostUnavailableError(ClusterError):
    """The host of a session died, is restarting or stopped answering; the
    call may not have run.

    The session's turn, if one started, is finished by the restarted host's
    failover (R22) or by the host that takes over its lease (R27); retry a
    read, or continue from the session's checkpoint.
    """

    code = "ERR_HOST_UNAVAILABLE"
    retryable = True

    def __init__(self, *, session_id: str, host: int, cause: str) -> None:
        self.session_id = session_id
        self.host = host
        self.cause = cause
        super().__init__(
            f"the host of session '{session_id}' (host {host}) is unavailable: "
            f"{cause}; a turn it started is finished when the host restarts "
            "or another host takes over its lease"
        )


class HostError(ClusterError):
    """A host raised an error that is not one of helmlog's (its type is named)."""

    code = "ERR_HOST"

    def __init__(self, *, session_id: str, error_type: str, detail: str) -> None:
        self.session_id = session_id
        self.error_type = error_type
        self.detail = detail
        super().__init__(
            f"the host of session '{session_id}' raised {error_type}: {detail}"
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
