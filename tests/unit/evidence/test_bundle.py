"""Evidence bundles verified offline: a good one passes, each tampering fails first.

Pattern: real streams sealed by helmlog's own ``seal`` (keyless and keyed
         chains), heads signed and logged with ``helmlog_evidence``, then one
         change per test to the bundle, the keys or the log; ``verify`` must
         name the first check that fails.
Role:    unit tests for ``evidence/_verify.py``, ``_bundle.py``, ``_log.py``.

Laws: R3 (the chain over the stored bytes), R19 (a cut tail), issue 30 items
1–5 (edit, delete, reorder, truncate, replace; a wrong key; a rotated key; a
truncated proof; a history rewritten and re-signed caught by ``since``; only
typed errors from the parser).
"""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helmlog.events import Message, MessageCommitted
from helmlog.events.lowlevel import seal
from helmlog_evidence import (
    FAILURES,
    Bundle,
    BundleRecord,
    EvidenceFormatError,
    HeadLog,
    SessionHead,
    SigningKey,
    Verdict,
    decode_bundle,
    encode_bundle,
    make_bundle,
    verify,
)

ORIGIN = "helmlog.test/heads"
CHAIN_KEY = b"operator-chain-key"
KEY = SigningKey.generate("helmlog-test")


def records(
    session_id: str, n: int, key: bytes | None = None, tag: str = "m"
) -> list[tuple[int, bytes, str]]:
    """``n`` committed messages sealed as helmlog seals them."""
    events = [
        MessageCommitted(message=Message(role="user", content=f"{tag}{i}"))
        for i in range(n)
    ]
    _stamped, stored = seal(session_id, events, after_seq=0, prev_hash="", key=key)
    return [(r.seq, r.data, r.hash) for r in stored]


def other_head(session_id: str, n: int) -> str:
    """Another session's head text, for the log around the one under test."""
    return SessionHead.over(session_id, records(session_id, n), "sha256").text()


def logged(
    session_id: str = "s-1",
    n: int = 6,
    key: bytes | None = None,
    signer: SigningKey = KEY,
    others: int = 5,
) -> tuple[Bundle, HeadLog, list[tuple[int, bytes, str]]]:
    """A session of ``n`` records, its head logged among ``others`` heads."""
    log = HeadLog(ORIGIN)
    for i in range(others):
        log.append(other_head(f"other-{i}", 2))
    recs = records(session_id, n, key)
    kind = "hmac-sha256" if key else "sha256"
    head = SessionHead.over(session_id, recs, kind)
    index = log.append(head.text())
    log.append(SessionHead.over("after", records("after", 1), "sha256").text())
    bundle = make_bundle(
        session_id,
        recs,
        signer.sign(head.text()),
        log.checkpoint(signer),
        index,
        log.leaves,
    )
    return bundle, log, recs


def with_records(bundle: Bundle, recs: list[tuple[int, bytes, str]]) -> Bundle:
    return msgspec.structs.replace(
        bundle, records=[BundleRecord(seq=s, data=d, hash=h) for s, d, h in recs]
    )


@pytest.mark.parametrize("chain_key", [None, CHAIN_KEY], ids=["sha256", "hmac"])
def test_a_bundle_verifies_with_the_public_key_alone(chain_key: bytes | None) -> None:
    """Records -> signed head -> checkpoint verify with the public key, keyed
    chain or not, and through its encoded bytes (issue 30 item 4)."""
    bundle, log, _recs = logged(key=chain_key)
    verdict = verify(encode_bundle(bundle), [KEY.public.text()])
    assert (
        Verdict(
            ok=True,
            session_id="s-1",
            head_seq=6,
            checkpoint_size=log.size,
            key=f"helmlog-test+{KEY.public.id:08x}",
        )
        == verdict
    )
    assert bundle == decode_bundle(encode_bundle(bundle))


@pytest.mark.parametrize(
    ("chain_key", "expected"),
    [(None, ("hash", 3)), (CHAIN_KEY, ("digest", 6))],
    ids=["sha256", "hmac"],
)
def test_an_edited_event_fails(
    chain_key: bytes | None, expected: tuple[str, int]
) -> None:
    """An event's stored bytes changed after signing fail: at its seq on a
    keyless chain (R3), as the signed digest on a keyed one (no HMAC key)."""
    bundle, _log, recs = logged(key=chain_key)
    seq, data, hashed = recs[2]
    recs[2] = (seq, data.replace(b'"m2"', b'"mX"'), hashed)
    verdict = verify(with_records(bundle, recs), [KEY.public])
    assert expected == (verdict.failure, verdict.seq)


def test_an_edited_and_rehashed_event_fails_at_the_next_link() -> None:
    """Recomputing the edited record's hash breaks its successor's link."""
    bundle, _log, recs = logged()
    seq, data, _hashed = recs[2]
    data = data.replace(b'"m2"', b'"mX"')
    recs[2] = (seq, data, hashlib.sha256(data).hexdigest())
    verdict = verify(with_records(bundle, recs), [KEY.public])
    assert ("chain", 4) == (verdict.failure, verdict.seq)


@pytest.mark.parametrize("chain_key", [None, CHAIN_KEY], ids=["sha256", "hmac"])
def test_a_deleted_a_reordered_and_a_truncated_event_fail(
    chain_key: bytes | None,
) -> None:
    """A dropped record and a swap fail as ``order`` at the position; a cut
    tail as ``truncated`` at the first missing seq (R19)."""
    bundle, _log, recs = logged(key=chain_key)
    dropped = verify(with_records(bundle, recs[:1] + recs[2:]), [KEY.public])
    assert ("order", 2) == (dropped.failure, dropped.seq)
    swapped = verify(
        with_records(bundle, [recs[0], recs[2], recs[1], *recs[3:]]), [KEY.public]
    )
    assert ("order", 2) == (swapped.failure, swapped.seq)
    cut = verify(with_records(bundle, recs[:-2]), [KEY.public])
    assert ("truncated", 5) == (cut.failure, cut.seq)


def test_a_replaced_event_fails() -> None:
    """A record replaced by another stream's record at the same seq fails."""
    bundle, _log, recs = logged()
    recs[3] = records("s-1", 6, tag="z")[3]
    verdict = verify(with_records(bundle, recs), [KEY.public])
    assert ("chain", 4) == (verdict.failure, verdict.seq)


def test_a_wrong_public_key_fails_naming_the_signature() -> None:
    """A key that did not sign the head fails first at the head's signature."""
    bundle, _log, _recs = logged()
    other = SigningKey.generate("helmlog-test")
    verdict = verify(bundle, [other.public])
    assert "head-signature" == verdict.failure
    assert "no signature by a held key" in verdict.detail


def test_a_bundle_from_a_rotated_key_verifies_with_the_old_public_key() -> None:
    """After a rotation, a bundle signed by the old key verifies with the old
    public key, alone or beside the new one (issue 30 item 1)."""
    old = SigningKey.generate("helmlog-2026")
    new = SigningKey.generate("helmlog-2027")
    bundle, _log, _recs = logged(signer=old)
    assert verify(bundle, [old.public]).ok
    assert verify(bundle, [new.public, old.public]).ok
    assert "head-signature" == verify(bundle, [new.public]).failure


def test_a_truncated_or_flipped_inclusion_proof_fails() -> None:
    """An inclusion proof cut short, with a flipped byte, or for another leaf
    fails as ``inclusion`` (issue 30 item 3)."""
    bundle, _log, _recs = logged()
    short = msgspec.structs.replace(bundle, inclusion=bundle.inclusion[:-1])
    assert "inclusion" == verify(short, [KEY.public]).failure
    first = bytes([bundle.inclusion[0][0] ^ 1]) + bundle.inclusion[0][1:]
    flipped = msgspec.structs.replace(bundle, inclusion=[first, *bundle.inclusion[1:]])
    assert "inclusion" == verify(flipped, [KEY.public]).failure
    moved = msgspec.structs.replace(bundle, leaf_index=bundle.leaf_index - 1)
    assert "inclusion" == verify(moved, [KEY.public]).failure


def test_since_a_kept_checkpoint_a_grown_log_verifies() -> None:
    """An auditor's kept checkpoint and a later bundle whose log only grew:
    the consistency proof verifies (issue 30 item 5)."""
    log = HeadLog(ORIGIN)
    for i in range(3):
        log.append(
            SessionHead.over(f"early-{i}", records(f"early-{i}", 2), "sha256").text()
        )
    kept = log.checkpoint(KEY)
    recs = records("s-1", 4)
    head = SessionHead.over("s-1", recs, "sha256")
    index = log.append(head.text())
    bundle = make_bundle(
        "s-1", recs, KEY.sign(head.text()), log.checkpoint(KEY), index, log.leaves, [3]
    )
    assert verify(bundle, [KEY.public], since=kept).ok


def test_a_history_rewritten_and_resigned_by_the_key_holder_fails_since() -> None:
    """The key holder rewrites a session after the auditor kept a checkpoint,
    re-signs its head and rebuilds the log: the bundle verifies alone, but not
    since the kept checkpoint (issue 30 item 5)."""
    log = HeadLog(ORIGIN)
    recs = records("s-1", 4)
    head = SessionHead.over("s-1", recs, "sha256")
    index = log.append(head.text())
    log.append(other_head("s-2", 2))
    kept = log.checkpoint(KEY)
    # The rewrite: new events, a new head signed with the same key, the log
    # rebuilt from the rewritten streams (its leaf replaced), then grown.
    forged = records("s-1", 4, tag="forged")
    forged_head = SessionHead.over("s-1", forged, "sha256")
    rebuilt = HeadLog(ORIGIN)
    assert index == rebuilt.append(forged_head.text())
    rebuilt.append(other_head("s-2", 2))
    rebuilt.append(other_head("s-3", 1))
    bundle = make_bundle(
        "s-1",
        forged,
        KEY.sign(forged_head.text()),
        rebuilt.checkpoint(KEY),
        index,
        rebuilt.leaves,
        [2],
    )
    assert verify(bundle, [KEY.public]).ok
    verdict = verify(bundle, [KEY.public], since=kept)
    assert "consistency" == verdict.failure
    assert "the log was rewritten" in verdict.detail
    no_proof = msgspec.structs.replace(bundle, consistency=[])
    assert "consistency" == verify(no_proof, [KEY.public], since=kept).failure


def test_since_a_checkpoint_of_a_larger_log_fails_as_a_shrunk_log() -> None:
    """A kept checkpoint larger than the bundle's: the log shrank."""
    bundle, log, _recs = logged()
    log.append(other_head("late", 1))
    verdict = verify(bundle, [KEY.public], since=log.checkpoint(KEY))
    assert "consistency" == verdict.failure and "shrank" in verdict.detail


def test_since_a_checkpoint_by_an_unknown_key_fails() -> None:
    """A kept checkpoint must verify under the auditor's keys too."""
    bundle, log, _recs = logged()
    stranger = SigningKey.generate("stranger")
    verdict = verify(bundle, [KEY.public], since=log.checkpoint(stranger, 2))
    assert "since-signature" == verdict.failure


def test_a_head_signed_for_another_session_fails() -> None:
    """A bundle claiming session s-2 with s-1's signed head fails as
    ``session``."""
    bundle, _log, _recs = logged()
    renamed = msgspec.structs.replace(bundle, session_id="s-2")
    assert "session" == verify(renamed, [KEY.public]).failure


def test_verify_refuses_no_key_and_a_malformed_key_with_typed_errors() -> None:
    """The auditor's own input: no key, or a malformed one, raises."""
    bundle, _log, _recs = logged()
    with pytest.raises(EvidenceFormatError):
        verify(bundle, [])
    with pytest.raises(EvidenceFormatError):
        verify(bundle, ["not-a-key"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_fuzzed_bytes_are_a_bundle_verdict_never_an_exception(data: bytes) -> None:
    """Arbitrary bytes: ``decode_bundle`` raises only ``EvidenceFormatError``;
    ``verify`` returns a verdict (issue 30 item 4)."""
    try:
        decode_bundle(data)
    except EvidenceFormatError as exc:
        assert "bundle" == exc.what
    verdict = verify(data, [KEY.public])
    assert verdict.failure in FAILURES


GOOD = encode_bundle(logged()[0])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(GOOD) - 1), st.integers(1, 255))
def test_a_flipped_byte_anywhere_in_a_bundle_is_a_verdict(at: int, xor: int) -> None:
    """One byte of a good bundle's file changed: never an exception, and
    never ``ok`` unless the change left the JSON's meaning intact."""
    data = bytearray(GOOD)
    data[at] ^= xor
    verdict = verify(bytes(data), [KEY.public])
    if verdict.ok:
        assert decode_bundle(GOOD) == decode_bundle(bytes(data))
    else:
        assert verdict.failure in FAILURES
