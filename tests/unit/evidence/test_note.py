"""Signed notes, keys and checkpoints, byte for byte as C2SP and Go's note.

Pattern: the vectors of golang.org/x/mod/sumdb/note (note_test.go: the
         PeterNeumann key pair, its signed note, a cosigned note), then
         manglings of each; checkpoints and heads round-trip and refuse junk.
Role:    unit tests for ``evidence/_note.py``.

Laws: issue 30 items 1 and 2 (Ed25519 keys with a key id, C2SP signed-note
and tlog-checkpoint formats; rotation: a verifier holds a set of keys).
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog_evidence import (
    Checkpoint,
    EvidenceFormatError,
    NoteRefused,
    OpenedNote,
    PublicKey,
    SessionHead,
    SigningKey,
    key_id,
    open_note,
)

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = (
    "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
)
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZ"
    "SNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5o"
    "vTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)


def test_signing_matches_gos_note_vector() -> None:
    """The Go note package's signer key signs its text to the very bytes its
    test expects; its verifier key parses with the same id (issue 30 item 1)."""
    signer = SigningKey.parse(PETER_SKEY)
    assert PETER_VKEY == signer.public.text()
    assert 0xC74F20A3 == signer.public.id == key_id("PeterNeumann", signer.public.raw)
    assert TEXT + "\n" + PETER_SIG == signer.sign(TEXT)
    assert PETER_SKEY == signer.text()
    assert "PRIVATE" not in repr(signer)


def test_a_cosigned_note_opens_under_either_key_and_rotation_keeps_old_keys() -> None:
    """A line by a key the verifier lacks is skipped; a set of keys (old and
    new, after a rotation) opens a note signed by either."""
    note = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    peter, enoch = PublicKey.parse(PETER_VKEY), PublicKey.parse(ENOCH_VKEY)
    assert OpenedNote(text=TEXT, key=peter) == open_note(note, [peter])
    assert OpenedNote(text=TEXT, key=enoch) == open_note(note, [enoch])
    fresh = SigningKey.generate("helmlog-2027")
    rotated = [fresh.public, peter]
    assert OpenedNote(text=TEXT, key=peter) == open_note(
        TEXT + "\n" + PETER_SIG, rotated
    )
    refused = open_note(TEXT + "\n" + ENOCH_SIG, [fresh.public])
    assert isinstance(refused, NoteRefused) and "unknown-key" == refused.reason


def test_a_bad_signature_by_a_held_key_refuses_the_note() -> None:
    """A held key's line that does not verify refuses the whole note (fails
    closed), and a changed text does too."""
    peter = PublicKey.parse(PETER_VKEY)
    bad = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    refused = open_note(bad, [peter])
    assert isinstance(refused, NoteRefused) and "signature" == refused.reason
    changed = TEXT.replace("answer", "ANSWER") + "\n" + PETER_SIG
    refused = open_note(changed, [peter])
    assert isinstance(refused, NoteRefused) and "signature" == refused.reason


@pytest.mark.parametrize(
    "note",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        TEXT + "\n" + "— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUg\n",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        TEXT + "\n" + PETER_SIG * 101,
    ],
)
def test_malformed_notes_are_refused_as_malformed(note: str) -> None:
    """The Go package's malformed notes are ``malformed`` here too."""
    refused = open_note(note, [PublicKey.parse(PETER_VKEY)])
    assert isinstance(refused, NoteRefused) and "malformed" == refused.reason


def test_every_mangled_verifier_key_is_refused() -> None:
    """Each one-character change, and each proper substring, of a verifier key
    is a typed error (Go's TestNewVerifier)."""
    for i in range(len(PETER_VKEY)):
        mangled = PETER_VKEY[:i] + chr(ord(PETER_VKEY[i]) + 1) + PETER_VKEY[i + 1 :]
        with pytest.raises(EvidenceFormatError):
            PublicKey.parse(mangled)
    for cut in range(1, len(PETER_VKEY)):
        with pytest.raises(EvidenceFormatError):
            PublicKey.parse(PETER_VKEY[:cut])
    with pytest.raises(EvidenceFormatError):
        SigningKey.parse(PETER_SKEY.replace("c74f20a3", "c74f20a4"))


def test_a_checkpoint_round_trips_and_refuses_junk() -> None:
    """A tlog-checkpoint body is origin, decimal size, base64 root (+ extension
    lines); anything else is a typed error."""
    cp = Checkpoint(origin="example.com/log", size=12, root=bytes(range(32)))
    assert (
        "example.com/log\n12\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"
        == cp.text()
    )
    assert cp == Checkpoint.parse(cp.text())
    with_ext = Checkpoint(origin="o", size=0, root=bytes(32), extensions=("x y",))
    assert with_ext == Checkpoint.parse(with_ext.text())
    for junk in ("o\n012\nAA==\n", "o\n1\nAA==\n", "\n1\n" + cp.text()[-46:], "o\n1\n"):
        with pytest.raises(EvidenceFormatError):
            Checkpoint.parse(junk)


def test_a_session_head_round_trips_and_is_never_a_checkpoint() -> None:
    """A head's note text parses back to itself; it is not a checkpoint, so a
    signed head cannot pass for a signed checkpoint (or back)."""
    head = SessionHead(
        session_id="s-1", seq=7, chain="ab" * 32, chain_kind="sha256", digest=bytes(32)
    )
    assert head == SessionHead.parse(head.text())
    with pytest.raises(EvidenceFormatError):
        Checkpoint.parse(head.text())
    cp = Checkpoint(origin="o", size=1, root=bytes(32))
    with pytest.raises(EvidenceFormatError):
        SessionHead.parse(cp.text())
    with pytest.raises(EvidenceFormatError):
        SessionHead(
            session_id="a\nb",
            seq=1,
            chain="ab" * 32,
            chain_kind="sha256",
            digest=bytes(32),
        ).text()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parsers_raise_only_typed_errors(text: str) -> None:
    """Whatever the text, the key, checkpoint and head parsers return or raise
    ``EvidenceFormatError``; ``open_note`` returns a refusal (issue 30 item 4)."""
    for parse in (
        PublicKey.parse,
        SigningKey.parse,
        Checkpoint.parse,
        SessionHead.parse,
    ):
        with contextlib.suppress(EvidenceFormatError):
            parse(text)
    result = open_note(text, [PublicKey.parse(PETER_VKEY)])
    assert isinstance(result, NoteRefused | OpenedNote)
