"""helmlog_evidence: check a helmlog evidence bundle alone, offline, with no secret.

Pattern: a small standalone package (stdlib, msgspec, cryptography): RFC 9162
         Merkle proofs, C2SP signed notes and checkpoints, the bundle format
         and ``verify``. It imports nothing of helmlog, Redis or Ray, so an
         auditor installs the wheel and never starts the runtime.
Role:    shipped in helmlog's wheel as the top-level ``helmlog_evidence``;
         helmlog's store-wide log of heads and ``helmlog evidence`` build on
         these names; ``python -m helmlog_evidence`` verifies without helmlog.

Laws: R3, R19; issue 30 items 1–5. The design (why the signed head commits to
a keyless digest): docs/design.md, "Evidence an auditor checks alone".
"""

from __future__ import annotations

from ._bundle import (
    FORMAT,
    Bundle,
    BundleRecord,
    ConsistencyProof,
    decode_bundle,
    encode_bundle,
)
from ._errors import EvidenceError, EvidenceFormatError
from ._log import HeadLog, make_bundle
from ._merkle import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    root_hash,
    verify_consistency,
    verify_inclusion,
)
from ._note import (
    DIGEST_START,
    HEAD_ORIGIN,
    Checkpoint,
    NoteRefused,
    OpenedNote,
    PublicKey,
    SessionHead,
    SigningKey,
    digest_step,
    evidence_digest,
    key_id,
    open_note,
)
from ._verify import FAILURES, Verdict, verify

__all__ = [
    "DIGEST_START",
    "EMPTY_ROOT",
    "FAILURES",
    "FORMAT",
    "HEAD_ORIGIN",
    "Bundle",
    "BundleRecord",
    "Checkpoint",
    "ConsistencyProof",
    "EvidenceError",
    "EvidenceFormatError",
    "HeadLog",
    "NoteRefused",
    "OpenedNote",
    "PublicKey",
    "SessionHead",
    "SigningKey",
    "Verdict",
    "consistency_proof",
    "decode_bundle",
    "digest_step",
    "encode_bundle",
    "evidence_digest",
    "inclusion_proof",
    "key_id",
    "leaf_hash",
    "make_bundle",
    "node_hash",
    "open_note",
    "root_from_inclusion",
    "root_hash",
    "verify",
    "verify_consistency",
    "verify_inclusion",
]
