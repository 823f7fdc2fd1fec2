"""Signed heads in the events layer: the signer's forms, and R19's check.

Pattern: streams sealed with ``seal``, heads signed with ``HeadSigner.sign``
         over ``advance_digest`` as the journal signs them; ``check_heads``
         must pass them and refuse a forged or misplaced one.
Role:    unit tests for ``events/_signed_heads.py``.

Laws: R19 (with public keys, a signed head that does not verify is
``StreamTamperedError(reason="signature")``), issue 30 items 1 and 6 (a key
file, a key provider, the environment; a verifier-only signer).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helmlog.events import (
    HeadSigned,
    HeadSigner,
    Message,
    MessageCommitted,
    StoredEvent,
    StreamTamperedError,
    TurnEnded,
)
from helmlog.events.lowlevel import DIGEST_START, advance_digest, check_heads, seal
from helmlog_evidence import SigningKey

KEY = SigningKey.generate("unit")


def signed_stream(
    signer: HeadSigner, *, key: bytes | None = None, turns: int = 2
) -> list[StoredEvent]:
    """``turns`` turns, each ended and followed by its signed head."""
    stream: list[StoredEvent] = []
    for turn in range(turns):
        batch = [
            MessageCommitted(message=Message(role="user", content=f"t{turn}")),
            TurnEnded(turn=turn + 1, final_content="ok"),
        ]
        after = stream[-1].seq if stream else 0
        prev = stream[-1].hash if stream else ""
        _e, records = seal("s", batch, after_seq=after, prev_hash=prev, key=key)
        stream += records
        _seq, digest = advance_digest((0, DIGEST_START), stream)
        last = stream[-1]
        head = signer.sign("s", last.seq, last.hash, digest, keyed=key is not None)
        _e, signed = seal("s", [head], after_seq=last.seq, prev_hash=last.hash, key=key)
        stream += signed
    return stream


@pytest.mark.parametrize("chain_key", [None, b"chain"], ids=["sha256", "hmac"])
def test_r19_signed_heads_check_whole_and_from_a_position(
    chain_key: bytes | None,
) -> None:
    """A stream's signed heads pass, read whole or after a verified position;
    the position is the running digest (issue 30 item 6)."""
    stream = signed_stream(HeadSigner(KEY), key=chain_key)
    whole = check_heads("s", stream, [KEY.public])
    assert whole == advance_digest((0, DIGEST_START), stream)
    first = check_heads("s", stream[:3], [KEY.public])
    assert whole == check_heads("s", stream[3:], [KEY.public], first, stream[2].hash)


def test_r19_a_head_by_a_key_not_held_is_refused() -> None:
    """A head signed by a key the verifier does not hold fails at its seq."""
    stream = signed_stream(HeadSigner(SigningKey.generate("other")))
    with pytest.raises(StreamTamperedError) as caught:
        check_heads("s", stream, [KEY.public])
    assert ("signature", 6) == (caught.value.reason, caught.value.seq)


def test_r19_a_head_that_names_another_digest_or_session_is_refused() -> None:
    """A genuinely signed head moved to another stream (another session, or
    over other records) fails: it names what it signed."""
    stream = signed_stream(HeadSigner(KEY))
    with pytest.raises(StreamTamperedError) as caught:
        check_heads("t", stream, [KEY.public])
    assert "signature" == caught.value.reason
    # s's first two records under a head signing another digest.
    forged_head = HeadSigner(KEY).sign("s", 2, stream[1].hash, bytes(32), keyed=False)
    _e, forged = seal("s", [forged_head], after_seq=2, prev_hash=stream[1].hash)
    with pytest.raises(StreamTamperedError):
        check_heads("s", [*stream[:2], *forged], [KEY.public])


def test_the_signer_takes_a_key_a_file_a_provider_or_the_environment(
    tmp_path: Path,
) -> None:
    """``HeadSigner.of`` takes a key, a key file, a provider; ``from_env``
    reads ``HELMLOG_SIGNING_KEY`` and ``HELMLOG_PUBLIC_KEYS`` (issue 30 item 1)."""
    path = tmp_path / "k.key"
    path.write_text(KEY.text() + "\n")
    vkeys = tmp_path / "old.vkey"
    old = SigningKey.generate("old")
    vkeys.write_text(old.public.text() + "\n")
    for given in (KEY, str(path), path, lambda: KEY, lambda: str(path)):
        signer = HeadSigner.of(given)
        assert signer is not None and (KEY.public,) == signer.public_keys
    assert HeadSigner.of(None) is None
    with pytest.raises(TypeError, match="signer= takes"):
        HeadSigner.of(42)  # type: ignore[arg-type]
    env = {"HELMLOG_SIGNING_KEY": str(path), "HELMLOG_PUBLIC_KEYS": str(vkeys)}
    signer = HeadSigner.from_env(env)
    assert signer is not None and (KEY.public, old.public) == signer.public_keys
    assert HeadSigner.from_env({}) is None
    verifier = HeadSigner.from_env({"HELMLOG_PUBLIC_KEYS": str(vkeys)})
    assert verifier is not None and verifier.key is None
    with pytest.raises(ValueError, match="cannot sign"):
        verifier.sign("s", 1, "ab" * 32, bytes(32), keyed=False)
    assert isinstance(
        HeadSigner(KEY).sign("s", 1, "ab" * 32, bytes(32), keyed=False), HeadSigned
    )
