"""Signed heads: sign a session's head, check the ones a stream holds, find leaves.

Pattern: ``HeadSigner`` holds a deployment's Ed25519 key (``helmlog_evidence``
         formats) and the public keys it trusts; pure functions walk records
         for the running evidence digest, the heads to check, the log leaves.
Role:    events layer; a store carries its signer (``store.signer``) as it
         carries its chain key, so every journal over it signs alike.

Laws: R19 (with public keys, nothing acts on a stream whose signed head does
not verify: ``StreamTamperedError(reason="signature")``), issue 30 items 1, 2
and 6. Why ``helmlog_evidence`` is imported lazily: it loads ``cryptography``
(about 40 ms), which a process that never signs should not pay.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

import msgspec

from ._chain import StoredEvent, type_of
from ._errors import StreamTamperedError
from ._evidence_events import HeadSigned

if TYPE_CHECKING:
    from helmlog_evidence import PublicKey, SigningKey

# A head is signed after a batch holding one of these: a turn ended (or
# failed), or a pause was recorded (issue 30 item 1).
SIGN_AFTER: frozenset[str] = frozenset(
    {"agent.turn_end", "error.fatal", "pause.request"}
)
DIGEST_START = bytes(32)
Position = tuple[int, bytes]  # (seq, evidence digest over records 1..seq)

SIGNING_KEY_ENV = "HELMLOG_SIGNING_KEY"
PUBLIC_KEYS_ENV = "HELMLOG_PUBLIC_KEYS"


class HeadSigner:
    """A signing key (optional) and the public keys heads are checked against.

    With ``key``, journals sign each turn's head; with public keys (the key's
    own by default, plus ``public_keys``, e.g. rotated-out keys), activation
    checks the signed heads it reads (R19). Neither: nothing is signed.
    """

    __slots__ = ("key", "public_keys")

    def __init__(
        self, key: SigningKey | None = None, *, public_keys: Iterable[PublicKey] = ()
    ) -> None:
        self.key = key
        found = [*([key.public] if key is not None else []), *public_keys]
        self.public_keys: tuple[PublicKey, ...] = tuple(dict.fromkeys(found))

    def __repr__(self) -> str:
        names = ", ".join(k.text() for k in self.public_keys)
        return f"HeadSigner(signs={self.key is not None}, keys=[{names}])"

    @classmethod
    def from_files(
        cls, key_path: str | Path | None, public_keys_path: str | Path | None = None
    ) -> HeadSigner | None:
        """A signer from a signer-key file and a file of verifier keys.

        Raises:
            EvidenceFormatError: a key is malformed; ``OSError``: a bad path.
        """
        from helmlog_evidence import PublicKey, SigningKey

        key = SigningKey.parse(Path(key_path).read_text()) if key_path else None
        public: list[PublicKey] = []
        if public_keys_path:
            lines = Path(public_keys_path).read_text().splitlines()
            public = [PublicKey.parse(line) for line in lines if line.strip()]
        if key is None and not public:
            return None
        return cls(key, public_keys=public)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> HeadSigner | None:
        """``$HELMLOG_SIGNING_KEY`` (a signer-key file) and
        ``$HELMLOG_PUBLIC_KEYS`` (a verifier-key file); ``None`` when unset."""
        env = os.environ if environ is None else environ
        return cls.from_files(env.get(SIGNING_KEY_ENV), env.get(PUBLIC_KEYS_ENV))

    @classmethod
    def of(cls, value: SignerLike) -> HeadSigner | None:
        """A signer from what ``Agent.create(signer=...)`` takes: a
        ``HeadSigner``, a ``SigningKey``, a signer-key file path, or a
        key provider (a callable returning one of those), or ``None``.

        Raises:
            TypeError: none of those.
        """
        from helmlog_evidence import SigningKey

        given: object = value
        if callable(given) and not isinstance(given, HeadSigner | SigningKey):
            given = given()
        if given is None or isinstance(given, HeadSigner):
            return given
        if isinstance(given, SigningKey):
            return cls(given)
        if isinstance(given, str | Path):
            return cls.from_files(given)
        raise TypeError(
            "signer= takes a HeadSigner, a helmlog_evidence.SigningKey, a key "
            f"file path or a callable returning one, not {type(given).__name__}"
        )

    def sign(
        self, session_id: str, seq: int, chain: str, digest: bytes, *, keyed: bool
    ) -> HeadSigned:
        """The signed head of a stream ending at ``(seq, chain)``.

        Raises:
            ValueError: this signer has no key (it only verifies).
        """
        from helmlog_evidence import SessionHead

        if self.key is None:
            raise ValueError("this HeadSigner holds public keys only; it cannot sign")
        head = SessionHead(
            session_id=session_id,
            seq=seq,
            chain=chain,
            chain_kind="hmac-sha256" if keyed else "sha256",
            digest=digest,
        )
        return HeadSigned(note=self.key.sign(head.text()))


SignerLike = Union[HeadSigner, "SigningKey", str, Path, Callable[[], object], None]


def advance(position: Position, records: Iterable[StoredEvent]) -> Position:
    """The evidence digest after ``records`` (those after ``position``)."""
    seq, digest = position
    for record in records:
        seq, digest = record.seq, hashlib.sha256(digest + record.data).digest()
    return seq, digest


def check_heads(
    session_id: str,
    records: Sequence[StoredEvent],
    public_keys: Sequence[PublicKey],
    position: Position = (0, DIGEST_START),
    last_hash: str = "",
) -> Position:
    """Extend the digest over ``records`` (those after ``position``, whose
    last hash is ``last_hash``) and check the latest signed head among them
    under ``public_keys`` (R19); the position they end at.

    A signed head at seq k must be signed by a held key and name seq k-1,
    this session, the hash of record k-1 and the digest of records 1..k-1.
    Only the latest is checked: its digest commits to every record before
    it, earlier signed heads included, so none of them can change unseen.

    Raises:
        StreamTamperedError: ``reason="signature"`` at the signed head's seq.
    """
    latest = -1
    for i, record in enumerate(records):
        if type_of(record) == HeadSigned.type:
            latest = i
    if latest >= 0:
        seq, digest = advance(position, records[:latest])
        before = records[latest - 1].hash if latest > 0 else last_hash
        signed = _signed_head(records[latest], public_keys)
        if signed != (session_id, seq, before, digest):
            raise StreamTamperedError(
                session_id=session_id, seq=records[latest].seq, reason="signature"
            )
        position = (seq, digest)
        records = records[latest:]
    return advance(position, records)


class _Note(msgspec.Struct):
    """Just a signed head's note, from its stored bytes."""

    note: str = ""


_note_decoder = msgspec.json.Decoder(_Note)


def _note_of(record: StoredEvent) -> str | None:
    """A signed head record's note (``None`` when its bytes hold none).

    Decoded alone, not as the whole union: appends and activation read it
    once per signed turn, and the note is most of the record's bytes.
    """
    try:
        note = _note_decoder.decode(record.data).note
    except msgspec.DecodeError:
        return None
    return note or None


def _signed_head(
    record: StoredEvent, public_keys: Sequence[PublicKey]
) -> tuple[str, int, str, bytes] | None:
    """``(session, seq, chain, digest)`` a signed head names, when its note
    verifies under a held key; else ``None``."""
    from helmlog_evidence import (
        EvidenceFormatError,
        NoteRefused,
        SessionHead,
        open_note,
    )

    note = _note_of(record)
    if note is None:
        return None
    opened = open_note(note, public_keys)
    if isinstance(opened, NoteRefused):
        return None
    try:
        head = SessionHead.parse(opened.text)
    except EvidenceFormatError:
        return None
    return head.session_id, head.seq, head.chain, head.digest


def note_leaf(note: str) -> bytes | None:
    """A signed note's log leaf hash (SHA-256(0x00 || its text)); ``None``
    when it has no signature block."""
    text, sep, _sigs = note.rpartition("\n\n")
    if not sep:
        return None
    return hashlib.sha256(b"\x00" + (text + "\n").encode()).digest()


def head_leaves(records: Iterable[StoredEvent]) -> list[bytes]:
    """The log leaf hash of each signed head among ``records``, in order
    (RFC 9162: SHA-256(0x00 || the head note's text)); a record that is not
    a well-formed signed note is skipped (verification names it)."""
    leaves: list[bytes] = []
    for record in records:
        if type_of(record) != HeadSigned.type:
            continue
        leaf = note_leaf(_note_of(record) or "")
        if leaf is not None:
            leaves.append(leaf)
    return leaves
