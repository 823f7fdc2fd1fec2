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

from typing import Any

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
        "signature",
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
