"""The RFC 9162 Merkle tree: known vectors, and every proof of every small tree.

Pattern: the RFC 6962/9162 test vectors of transparency-dev/merkle
         (proof/verify_test.go: eight leaves, their roots, inclusion and
         consistency proofs), then Hypothesis over all trees up to 64 leaves.
Role:    unit tests for ``evidence/_merkle.py``.

Laws: issue 30 item 3 (inclusion and consistency proofs, generated and
verified with the RFC's algorithms; a flipped byte fails).
"""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog_evidence import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]
H = bytes.fromhex
# (leaf, 1-based as in the Go file; tree size; proof)
INCLUSION = [
    (
        1,
        8,
        [
            H("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            H("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            H("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            H("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            H("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (3, 3, [H("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
    (
        2,
        5,
        [
            H("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            H("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]
CONSISTENCY = [
    (
        1,
        8,
        [
            H("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            H("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            H("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            H("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            H("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        5,
        [
            H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            H("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
    (
        6,
        7,
        [
            H("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            H("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
            H("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
]
HASHED = [leaf_hash(d) for d in LEAVES]


def _flipped(proof: list[bytes], at: int, bit: int = 3) -> list[bytes]:
    bad = list(proof)
    bad[at] = bytes([bad[at][0] ^ (1 << bit)]) + bad[at][1:]
    return bad


def test_the_empty_tree_and_the_rfc_roots() -> None:
    """MTH({}) is SHA-256 of nothing; the roots of the first 1..8 vector leaves
    are the RFC 6962 vectors' (issue 30 item 3)."""
    assert hashlib.sha256(b"").digest() == EMPTY_ROOT == root_hash([])
    assert ROOTS == [root_hash(HASHED[:n]) for n in range(1, 9)]


def test_inclusion_proofs_match_the_rfc_vectors_and_verify() -> None:
    """PATH(m, D[n]) is the vectors' proof and verifies against its root; a
    flipped bit, a dropped or an added hash, a wrong index or size fails."""
    for leaf, size, proof in INCLUSION:
        index, root = leaf - 1, ROOTS[size - 1]
        assert proof == inclusion_proof(index, HASHED[:size])
        assert verify_inclusion(index, size, HASHED[index], proof, root)
        for at in range(len(proof)):
            assert not verify_inclusion(
                index, size, HASHED[index], _flipped(proof, at), root
            )
        assert not verify_inclusion(index, size, HASHED[index], proof[:-1], root)
        assert not verify_inclusion(index, size, HASHED[index], [*proof, root], root)
        assert not verify_inclusion(index ^ 2, size, HASHED[index], proof, root)
        assert not verify_inclusion(index, size * 2, HASHED[index], proof, root)
        assert not verify_inclusion(index, size, b"WrongLeaf", proof, root)


def test_consistency_proofs_match_the_rfc_vectors_and_verify() -> None:
    """PROOF(m, D[n]) is the vectors' proof and verifies; a flipped bit, a
    truncated proof, swapped roots or wrong sizes fail."""
    for old, new, proof in CONSISTENCY:
        r1, r2 = ROOTS[old - 1], ROOTS[new - 1]
        assert proof == consistency_proof(old, HASHED[:new])
        assert verify_consistency(old, new, r1, r2, proof)
        for at in range(len(proof)):
            assert not verify_consistency(old, new, r1, r2, _flipped(proof, at, 4))
        assert not verify_consistency(old, new, r1, r2, proof[:-1])
        assert not verify_consistency(old, new, r2, r1, proof)
        assert not verify_consistency(old + 1, new, r1, r2, proof)
        assert not verify_consistency(old, new * 2, r1, r2, proof)
        assert not verify_consistency(old, new, r1, r2, [])


def test_trivial_consistency_cases() -> None:
    """Equal sizes need equal roots and an empty proof; from 0 anything is
    consistent with an empty proof; a shrinking log never is."""
    r = ROOTS[3]
    assert verify_consistency(4, 4, r, r, [])
    assert not verify_consistency(4, 4, r, ROOTS[2], [])
    assert not verify_consistency(4, 4, r, r, [r])
    assert verify_consistency(0, 4, EMPTY_ROOT, r, [])
    assert not verify_consistency(5, 4, ROOTS[4], r, [])


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=64), st.data())
def test_every_inclusion_proof_of_a_small_tree_verifies_and_a_flip_fails(
    n: int, data: st.DataObject
) -> None:
    """For a tree of 1..64 leaves, every leaf's proof verifies; one flipped
    byte anywhere in it, or in the leaf, fails (issue 30 item 3)."""
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    root = root_hash(leaves)
    for index in range(n):
        proof = inclusion_proof(index, leaves)
        assert verify_inclusion(index, n, leaves[index], proof, root)
        assert len(proof) <= max(1, (n - 1).bit_length())
    index = data.draw(st.integers(0, n - 1))
    proof = inclusion_proof(index, leaves)
    flat = b"".join([leaves[index], *proof])
    at = data.draw(st.integers(0, len(flat) - 1))
    bad = bytearray(flat)
    bad[at] ^= 0x01
    parts = [bytes(bad[i : i + 32]) for i in range(0, len(bad), 32)]
    assert not verify_inclusion(index, n, parts[0], parts[1:], root)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=64), st.data())
def test_every_consistency_proof_of_a_small_tree_verifies_and_a_flip_fails(
    n: int, data: st.DataObject
) -> None:
    """Every earlier size of a tree of 1..64 leaves has a consistency proof
    that verifies; a flipped byte in it, or a changed old leaf, fails."""
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    root = root_hash(leaves)
    for old in range(0, n + 1):
        proof = consistency_proof(old, leaves)
        assert verify_consistency(old, n, root_hash(leaves[:old]), root, proof)
    old = data.draw(st.integers(1, n))
    proof = consistency_proof(old, leaves)
    if proof:
        at = data.draw(st.integers(0, len(proof) - 1))
        byte = data.draw(st.integers(0, 31))
        bad = list(proof)
        bad[at] = bad[at][:byte] + bytes([bad[at][byte] ^ 0x80]) + bad[at][byte + 1 :]
        assert not verify_consistency(old, n, root_hash(leaves[:old]), root, bad)
    rewritten = list(leaves)
    rewritten[data.draw(st.integers(0, old - 1))] = leaf_hash(b"rewritten")
    assert not verify_consistency(
        old, n, root_hash(leaves[:old]), root_hash(rewritten), proof
    )
