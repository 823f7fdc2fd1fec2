"""Checkpoints: the plain-JSON handle a caller keeps to continue or resume.

Pattern: a versioned, frozen value with a JSON round trip.
Role:    events layer; ``fold`` derives the current checkpoint from a stream,
         the runtime hands it out and checks it on the way back in;
         ``Checkpoint.coerce`` is the one rule for "a checkpoint or its JSON".
Emits:   nothing.

Laws: R14 (fields, ``from_json(c.to_json()) == c``, malformed text is
``CheckpointError(reason="malformed")``), R9 (what a pause checkpoint binds;
a pause MAC is never derivable from what the stream stores), R1.

Why no pause MAC is stored: a reader of the stream could copy it into a
checkpoint of their making. More (the keyed R1 exception): docs/design.md.
Why ``gc=False``: every resident session holds one; frozen and holding only
values (Messages, a PausedCall), it forms no cycle (issue 29 item 2).
"""

from __future__ import annotations

import hashlib
import hmac

import msgspec

from ._chain import _derived
from ._codec import MAX_DEPTH, canonical_json, digest, shape, too_deep
from ._errors import CheckpointError
from ._messages import Message
from ._pause_events import PausedCall

CHECKPOINT_VERSION = 1


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a session stands: a finished turn, or a pause waiting on a person.

    Attributes:
        version: the format version (1).
        kind: ``"conversation"`` or ``"pause"``.
        session_id: the session it belongs to.
        seq: the seq of its ``agent.turn_end`` or ``pause.request``.
        history: the committed messages.
        original_input: the admitted text of the turn's user message.
        tool_name: the paused call's tool (pause only).
        tool_call_id: the paused call's id (pause only).
        args_digest: digest of the arguments as they stood at the pause.
        policy_version: digest of the governance posture at the pause.
        mac: HMAC of the bindings when the store has a chain key.
        call: the paused call, for a store that lacks the session (pause
            only; ``UNSET`` before portable checkpoints).
    """

    kind: str
    session_id: str
    seq: int
    history: tuple[Message, ...] = ()
    original_input: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    args_digest: str | None = None
    policy_version: str | None = None
    mac: str | None = None
    version: int = CHECKPOINT_VERSION
    call: PausedCall | msgspec.UnsetType = msgspec.UNSET

    def digest(self) -> str:
        """Hex SHA-256 of the checkpoint's canonical JSON (what an import records)."""
        return digest(self)

    def content_digest(self) -> str | None:
        """The digest a pause's MAC covers beside its bindings; ``None`` without
        ``call``."""
        if isinstance(self.call, msgspec.UnsetType):
            return None
        return pause_content_digest(
            history=self.history,
            original_input=self.original_input,
            tool_name=self.tool_name,
            call=self.call,
        )

    def to_json(self) -> str:
        """Plain JSON text; ``Checkpoint.from_json`` reads it back equal."""
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        """Read a checkpoint; anything else raises ``CheckpointError("malformed")``."""
        if not isinstance(text, str | bytes):
            raise CheckpointError("malformed", "a checkpoint is JSON text")
        if too_deep(text):
            raise CheckpointError("malformed", f"nested deeper than {MAX_DEPTH}")
        try:
            cp = msgspec.json.decode(text, type=cls)
        # UnicodeError: a str holding lone surrogates is not UTF-8 JSON text.
        except (msgspec.DecodeError, TypeError, UnicodeError) as exc:
            raise CheckpointError("malformed", str(exc)) from None
        except RecursionError:
            detail = "nested past the decoder's limit"
            raise CheckpointError("malformed", detail) from None
        if cp.version != CHECKPOINT_VERSION or cp.kind not in ("conversation", "pause"):
            raise CheckpointError(
                "malformed",
                f"unsupported checkpoint version/kind {cp.version}/{cp.kind}",
            )
        return cp

    def expected_mac(
        self, chain_key: bytes, content_digest: str | None, *, stored: bool = False
    ) -> str:
        """The MAC this pause checkpoint must carry under ``chain_key`` (R9).

        ``pause_mac`` over its bindings; with ``stored``, for a pause whose
        stream stored its MAC (written before R19), the old ``binding_mac``
        under the chain key itself.
        """
        mac = binding_mac if stored else pause_mac
        return mac(
            chain_key,
            session_id=self.session_id,
            seq=self.seq,
            tool_call_id=self.tool_call_id,
            args_digest=self.args_digest,
            policy_version=self.policy_version,
            content_digest=content_digest,
        )

    @classmethod
    def coerce(cls, value: object) -> Checkpoint:
        """A ``Checkpoint`` as given, or read from its JSON text (``str``/``bytes``).

        Raises:
            CheckpointError: ``"malformed"`` for text that is not a checkpoint
                and for a value of any other type.
        """
        if isinstance(value, Checkpoint):
            return value
        if isinstance(value, str | bytes):
            return cls.from_json(value)
        raise CheckpointError(
            "malformed", f"expected a Checkpoint or its JSON, got {shape(value)}"
        )


def pause_content_digest(
    *,
    history: tuple[Message, ...],
    original_input: str | None,
    tool_name: str | None,
    call: PausedCall,
) -> str:
    """Digest of what a pause resumes from beyond its bindings (R9)."""
    return digest(
        {
            "history": history,
            "original_input": original_input,
            "tool_name": tool_name,
            "call": call,
        }
    )


def binding_mac(
    key: bytes,
    *,
    session_id: str,
    seq: int,
    tool_call_id: str | None,
    args_digest: str | None,
    policy_version: str | None,
    content_digest: str | None = None,
) -> str:
    """HMAC-SHA-256 over a pause checkpoint's bindings (R9).

    ``content_digest`` (``pause_content_digest``) is covered when given; pauses
    recorded before it existed were MACed without it, and still verify.
    """
    bindings: dict[str, object] = {
        "session_id": session_id,
        "seq": seq,
        "tool_call_id": tool_call_id,
        "args_digest": args_digest,
        "policy_version": policy_version,
    }
    if content_digest is not None:
        bindings["content_digest"] = content_digest
    body = canonical_json(bindings)
    return hmac.new(
        key, b"helmlog/v1/checkpoint\x00" + body, hashlib.sha256
    ).hexdigest()


_CHECKPOINT_KEY_LABEL = b"helmlog/v1/checkpoint-key"


def pause_mac(
    chain_key: bytes,
    *,
    session_id: str,
    seq: int,
    tool_call_id: str | None,
    args_digest: str | None,
    policy_version: str | None,
    content_digest: str | None = None,
) -> str:
    """The MAC of a pause checkpoint (R9), never stored in the stream.

    ``binding_mac`` under a key derived from the chain key for checkpoints,
    so neither a stored hash nor a head's MAC can serve as one.
    """
    return binding_mac(
        _derived(chain_key, _CHECKPOINT_KEY_LABEL),
        session_id=session_id,
        seq=seq,
        tool_call_id=tool_call_id,
        args_digest=args_digest,
        policy_version=policy_version,
        content_digest=content_digest,
    )
