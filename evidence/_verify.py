"""Verify an evidence bundle with public keys alone, offline.

Pattern: one pass of checks in a fixed order; the first that fails is the
         verdict (``Verdict.failure`` names it, ``detail`` says where), so
         "what is wrong" has one answer. No check is skipped on success.
Role:    helmlog_evidence; ``helmlog evidence verify`` and ``python -m
         helmlog_evidence verify`` print what ``verify`` returns.

Laws: R3 (the chain recomputed over the stored bytes, for an unkeyed chain),
R19 (a cut tail is ``truncated``), issue 30 item 4 (records -> signed head ->
checkpoint -> an earlier checkpoint the auditor kept).

Why the digest and not the chain hash: a keyed chain's hashes are HMACs; the
signed head commits to a keyless SHA-256 digest of the same stored bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec
from msgspec.structs import replace

from ._bundle import Bundle, decode_bundle
from ._errors import EvidenceFormatError
from ._merkle import leaf_hash, verify_consistency, verify_inclusion
from ._note import (
    DIGEST_START,
    Checkpoint,
    NoteRefused,
    PublicKey,
    SessionHead,
    open_note,
)

FAILURES = (
    "bundle",
    "head-signature",
    "head",
    "session",
    "truncated",
    "order",
    "malformed",
    "chain",
    "hash",
    "digest",
    "checkpoint-signature",
    "checkpoint",
    "inclusion",
    "since-signature",
    "since",
    "consistency",
)


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What ``verify`` found: ``ok``, else the first ``failure`` and where.

    ``failure`` is one of ``FAILURES``; ``seq`` is the record it names, when
    it names one; ``key`` the signed head's key (``name+hex id``).
    """

    ok: bool
    failure: str | None = None
    detail: str = ""
    session_id: str = ""
    seq: int | None = None
    head_seq: int | None = None
    checkpoint_size: int | None = None
    key: str | None = None

    def text(self) -> str:
        """One line: what ``helmlog evidence verify`` prints."""
        if self.ok:
            return (
                f"verified: session {self.session_id} — {self.head_seq} events, "
                f"signed head by {self.key}, in a checkpoint of "
                f"{self.checkpoint_size} heads"
            )
        at = f" at seq {self.seq}" if self.seq is not None else ""
        return f"FAILED {self.failure}{at}: {self.detail}"


class _Envelope(msgspec.Struct):
    session_id: str = ""
    seq: int | None = None
    prev_hash: str = ""


_envelope = msgspec.json.Decoder(_Envelope)


def _keys(public_keys: Iterable[PublicKey | str]) -> list[PublicKey]:
    keys = [k if isinstance(k, PublicKey) else PublicKey.parse(k) for k in public_keys]
    if not keys:
        raise EvidenceFormatError("key", "no public key given")
    return keys


def verify(
    bundle: Bundle | bytes | str,
    public_keys: Iterable[PublicKey | str],
    since: str | None = None,
) -> Verdict:
    """Check a bundle: records -> signed head -> checkpoint (-> ``since``).

    ``public_keys`` are verifier keys (``PublicKey`` or their text); any of
    them may have signed (rotation). ``since`` is a signed checkpoint the
    auditor kept: the bundle's checkpoint must extend it.

    Raises:
        EvidenceFormatError: a public key is malformed, or none is given (the
            auditor's own input); a bad bundle is a verdict, not an error.
    """
    keys = _keys(public_keys)
    if not isinstance(bundle, Bundle):
        try:
            bundle = decode_bundle(bundle)
        except EvidenceFormatError as exc:
            return Verdict(ok=False, failure="bundle", detail=exc.reason)
    verdict = Verdict(ok=False, session_id=bundle.session_id)
    opened = open_note(bundle.head, keys)
    if isinstance(opened, NoteRefused):
        return replace(verdict, failure="head-signature", detail=opened.detail)
    try:
        head = SessionHead.parse(opened.text)
    except EvidenceFormatError as exc:
        return replace(verdict, failure="head", detail=exc.reason)
    key = f"{opened.key.name}+{opened.key.id:08x}"
    verdict = replace(verdict, head_seq=head.seq, key=key)
    if head.session_id != bundle.session_id:
        detail = f"the head is session {head.session_id}"
        return replace(verdict, failure="session", detail=detail)
    broken = _check_records(bundle, head)
    if broken is not None:
        failure, seq, detail = broken
        return replace(verdict, failure=failure, seq=seq, detail=detail)
    opened_cp = open_note(bundle.checkpoint, keys)
    if isinstance(opened_cp, NoteRefused):
        return replace(verdict, failure="checkpoint-signature", detail=opened_cp.detail)
    try:
        checkpoint = Checkpoint.parse(opened_cp.text)
    except EvidenceFormatError as exc:
        return replace(verdict, failure="checkpoint", detail=exc.reason)
    verdict = replace(verdict, checkpoint_size=checkpoint.size)
    leaf = leaf_hash(opened.text.encode())
    if not verify_inclusion(
        bundle.leaf_index, checkpoint.size, leaf, bundle.inclusion, checkpoint.root
    ):
        detail = f"the head is not leaf {bundle.leaf_index} of the checkpoint"
        return replace(verdict, failure="inclusion", detail=detail)
    if since is not None:
        refused = _check_since(bundle, checkpoint, since, keys)
        if refused is not None:
            return replace(verdict, failure=refused[0], detail=refused[1])
    return replace(verdict, ok=True)


def _check_records(bundle: Bundle, head: SessionHead) -> tuple[str, int, str] | None:
    """The first bad record: ``(failure, seq, detail)``, or ``None``."""
    if head.seq < 1:
        return ("head", 0, "a signed head names at least one record")
    records = bundle.records
    digest, prev, keyless = DIGEST_START, "", head.chain_kind == "sha256"
    for position, record in enumerate(records[: head.seq], start=1):
        if record.seq != position:
            return ("order", position, f"record {position} says seq {record.seq}")
        try:
            env = _envelope.decode(record.data)
        except (msgspec.DecodeError, RecursionError):
            return ("malformed", position, "its stored bytes are not an event")
        if env.seq != position:
            return ("order", position, f"its bytes say seq {env.seq}")
        if position == 1 and env.session_id and env.session_id != head.session_id:
            return ("session", 1, f"the stream is session {env.session_id}")
        if keyless and hashlib.sha256(record.data).hexdigest() != record.hash:
            return ("hash", position, "its stored bytes do not hash to its hash")
        if env.prev_hash != prev:
            return ("chain", position, "its prev_hash is not its predecessor's hash")
        digest = hashlib.sha256(digest + record.data).digest()
        prev = record.hash
    if len(records) < head.seq:
        return (
            "truncated",
            len(records) + 1,
            f"{len(records)} records; the signed head says {head.seq}",
        )
    if len(records) > head.seq:
        return ("order", head.seq + 1, "records past the signed head")
    if prev != head.chain:
        return ("head", head.seq, "the last record's hash is not the signed head's")
    if digest != head.digest:
        return ("digest", head.seq, "the records do not hash to the signed digest")
    return None


def _check_since(
    bundle: Bundle, checkpoint: Checkpoint, since: str, keys: list[PublicKey]
) -> tuple[str, str] | None:
    opened = open_note(since, keys)
    if isinstance(opened, NoteRefused):
        return ("since-signature", opened.detail)
    try:
        old = Checkpoint.parse(opened.text)
    except EvidenceFormatError as exc:
        return ("since", exc.reason)
    if old.origin != checkpoint.origin:
        return ("since", f"the kept checkpoint is of another log ({old.origin})")
    if old.size > checkpoint.size:
        return (
            "consistency",
            f"the log shrank: {old.size} heads kept, {checkpoint.size} now",
        )
    proofs = [p.proof for p in bundle.consistency if p.old_size == old.size]
    if old.size in (0, checkpoint.size):
        proofs.append([])
    if not proofs:
        return ("consistency", f"the bundle holds no proof from size {old.size}")
    if not any(
        verify_consistency(old.size, checkpoint.size, old.root, checkpoint.root, p)
        for p in proofs
    ):
        return (
            "consistency",
            f"the checkpoint of {checkpoint.size} heads does not extend the kept "
            f"one of {old.size}: the log was rewritten",
        )
    return None
