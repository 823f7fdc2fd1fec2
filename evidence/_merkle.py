"""A Merkle tree in the manner of RFC 9162: hashes, proofs, their verification.

Pattern: the RFC's definitions, written as its sections give them: MTH
         (2.1.1), PATH and its verification (2.1.3), PROOF/SUBPROOF and its
         verification (2.1.4), over SHA-256 with the 0x00 leaf and 0x01 node
         prefixes (second-preimage resistance between leaves and nodes).
Role:    helmlog_evidence; the store-wide log of signed heads proves with it,
         and the verifier checks with it, offline.

Laws: issue 30 item 3 (an inclusion proof ties a head to a checkpoint; a
consistency proof shows a later checkpoint extends an earlier one).

Why generation from leaf hashes: a log keeps each leaf's hash (32 bytes), never
re-reads its leaves; generation is O(n) per proof, fine for a log of heads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``: a leaf's hash (RFC 9162 2.1.1)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: an interior node's hash."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n > 1``)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_hash(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes (not leaf data): the tree's root."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = _split(n)
    return node_hash(root_hash(leaves[:k]), root_hash(leaves[k:]))


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(index, D[n]) over leaf hashes (RFC 9162 2.1.3.1).

    Raises:
        ValueError: ``index`` is not a leaf of the tree.
    """
    n = len(leaves)
    if not 0 <= index < n:
        raise ValueError(f"leaf {index} is not in a tree of {n}")
    if n == 1:
        return []
    k = _split(n)
    if index < k:
        return [*inclusion_proof(index, leaves[:k]), root_hash(leaves[k:])]
    return [*inclusion_proof(index - k, leaves[k:]), root_hash(leaves[:k])]


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) over leaf hashes (RFC 9162 2.1.4.1); empty for 0 or n.

    Raises:
        ValueError: ``old_size`` is negative or larger than the tree.
    """
    n = len(leaves)
    if not 0 <= old_size <= n:
        raise ValueError(f"size {old_size} is not a prefix of a tree of {n}")
    if old_size in (0, n):
        return []
    return _subproof(old_size, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root_hash(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), root_hash(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), root_hash(leaves[:k])]


def root_from_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes]
) -> bytes | None:
    """The root a proof leads to (RFC 9162 2.1.3.2), or ``None`` when the
    proof cannot be one for ``index`` in a tree of ``size``."""
    if not 0 <= index < size or any(len(p) != HASH_SIZE for p in proof):
        return None
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether ``leaf`` (a leaf hash) is leaf ``index`` of the tree ``root``."""
    return root_from_inclusion(index, size, leaf, proof) == root


def verify_consistency(
    old_size: int,
    new_size: int,
    old_root: bytes,
    new_root: bytes,
    proof: Sequence[bytes],
) -> bool:
    """Whether the tree ``new_root`` extends the tree ``old_root`` (RFC 9162
    2.1.4.2): its first ``old_size`` leaves are the old tree's, unchanged."""
    if not 0 <= old_size <= new_size or any(len(p) != HASH_SIZE for p in proof):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # an exact power of two
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0
