"""The evidence bundle: one file holding all an auditor needs for one session.

Pattern: msgspec structs, strict on decode (unknown fields refused, types
         exact), JSON on disk (``bytes`` as base64): the session's records as
         stored, its signed head, a signed checkpoint, the head's inclusion
         proof, and any consistency proofs from earlier tree sizes.
Role:    helmlog_evidence; ``helmlog evidence SESSION`` writes one,
         ``verify`` reads one. The format is documented in docs/design.md.

Laws: issue 30 item 4 (one file; a parser raises ``EvidenceFormatError``
and nothing else, whatever the bytes).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._errors import EvidenceFormatError

FORMAT = "helmlog-evidence/1"
MAX_BUNDLE_BYTES = 256 * 1024 * 1024


class BundleRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One record as the store keeps it: seq, stored bytes, stored chain hash."""

    seq: int
    data: bytes
    hash: str


class ConsistencyProof(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A proof that the checkpoint's tree extends the tree of ``old_size``."""

    old_size: int
    proof: list[bytes]


class Bundle(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An evidence bundle (``format`` ``helmlog-evidence/1``).

    ``head`` and ``checkpoint`` are signed notes (text); ``leaf_index`` is the
    head's position in the log; ``inclusion`` its proof in ``checkpoint``;
    ``consistency`` proofs from earlier sizes an auditor may hold.
    """

    format: Literal["helmlog-evidence/1"] = "helmlog-evidence/1"
    session_id: str
    records: list[BundleRecord]
    head: str
    checkpoint: str
    leaf_index: int
    inclusion: list[bytes]
    consistency: list[ConsistencyProof] = []


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Bundle)


def encode_bundle(bundle: Bundle) -> bytes:
    """A bundle's bytes (compact JSON)."""
    return _encoder.encode(bundle)


def decode_bundle(data: bytes | str) -> Bundle:
    """A bundle from its bytes.

    Raises:
        EvidenceFormatError: not a bundle (``what="bundle"``), with why.
    """
    if len(data) > MAX_BUNDLE_BYTES:
        raise EvidenceFormatError("bundle", "larger than 256 MiB")
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise EvidenceFormatError("bundle", str(exc)) from None
    except RecursionError:
        raise EvidenceFormatError("bundle", "nested too deep") from None
