"""Signed notes (C2SP signed-note), Ed25519 keys, and the two notes we sign.

Pattern: the C2SP formats, byte for byte: a note is UTF-8 text ending in a
         newline, a blank line, then lines ``— <name> <base64(key id ||
         signature)>``; a key id is the first 4 bytes of SHA-256(name || 0x0A
         || 0x01 || public key); a verifier key is ``<name>+<hex id>+<base64(
         0x01 || public key)>`` and a signer key ``PRIVATE+KEY+<name>+<hex
         id>+<base64(0x01 || seed)>`` (golang.org/x/mod/sumdb/note).
Role:    helmlog_evidence; signs and opens checkpoints (C2SP tlog-checkpoint)
         and session heads. Rotation: a verifier holds a set of keys.

Laws: issue 30 items 1, 2 and 5; a note whose signature does not verify under
a key the verifier holds is refused (fails closed), never half-read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Sequence

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ._errors import EvidenceFormatError

ALG_ED25519 = 0x01
_NAME = re.compile(r"[^\s+]+")
_SIG_PREFIX = "— "  # an em dash and a space (C2SP signed-note)
_MAX_SIGNATURES = 100


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise EvidenceFormatError(what, "not base64") from None


def _check_name(name: str, what: str) -> None:
    if not _NAME.fullmatch(name) or not name.isprintable():
        raise EvidenceFormatError(what, f"bad key name {name!r} (no spaces or '+')")


def key_id(name: str, public: bytes) -> int:
    """A key's id: SHA-256(name || 0x0A || 0x01 || public key)[:4], big-endian."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public)
    return int.from_bytes(digest.digest()[:4], "big")


class PublicKey(msgspec.Struct, frozen=True):
    """An Ed25519 verifier key with its name and key id."""

    name: str
    id: int
    raw: bytes

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """A verifier key from its text (``<name>+<hex id>+<base64>``).

        Raises:
            EvidenceFormatError: not such a key, or its id does not match.
        """
        parts = text.strip().split("+", 2)
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
            raise EvidenceFormatError("key", "want <name>+<hex id>+<base64 key>")
        name, hex_id, body = parts
        _check_name(name, "key")
        raw = _unb64(body, "key")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise EvidenceFormatError("key", "not an Ed25519 verifier key")
        key = cls(name=name, id=int(hex_id, 16), raw=raw[1:])
        if key.id != key_id(name, key.raw):
            raise EvidenceFormatError("key", "its id does not match its name and key")
        return key

    def text(self) -> str:
        """The verifier key's text (signed-note verifier key format)."""
        return f"{self.name}+{self.id:08x}+{_b64(bytes([ALG_ED25519]) + self.raw)}"

    def verifies(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message``."""
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, message)
        except InvalidSignature:
            return False
        return True


class SigningKey:
    """An Ed25519 signer key with its name and key id (never printed)."""

    def __init__(self, name: str, seed: bytes) -> None:
        _check_name(name, "key")
        if len(seed) != 32:
            raise EvidenceFormatError("key", "an Ed25519 seed is 32 bytes")
        self.name = name
        self._private = Ed25519PrivateKey.from_private_bytes(seed)
        self._seed = seed
        raw = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public = PublicKey(name=name, id=key_id(name, raw), raw=raw)

    def __repr__(self) -> str:
        return f"SigningKey({self.public.text()!r})"

    @classmethod
    def generate(cls, name: str) -> SigningKey:
        """A fresh key pair named ``name``."""
        seed = Ed25519PrivateKey.generate().private_bytes_raw()
        return cls(name, seed)

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """A signer key from its text (``PRIVATE+KEY+<name>+<hex id>+<base64>``).

        Raises:
            EvidenceFormatError: not such a key, or its id does not match.
        """
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise EvidenceFormatError("key", "want PRIVATE+KEY+<name>+<hex id>+<key>")
        if not re.fullmatch(r"[0-9a-f]{8}", parts[3]):
            raise EvidenceFormatError("key", "bad key id")
        raw = _unb64(parts[4], "key")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise EvidenceFormatError("key", "not an Ed25519 signer key")
        key = cls(parts[2], raw[1:])
        if key.public.id != int(parts[3], 16):
            raise EvidenceFormatError("key", "its id does not match its name and key")
        return key

    def text(self) -> str:
        """The signer key's text; keep it secret (file mode 0600)."""
        body = _b64(bytes([ALG_ED25519]) + self._seed)
        return f"PRIVATE+KEY+{self.name}+{self.public.id:08x}+{body}"

    def sign(self, body: str) -> str:
        """``body`` (a note's text) as a signed note with this key's line."""
        _check_text(body)
        signature = self._private.sign(body.encode())
        blob = self.public.id.to_bytes(4, "big") + signature
        return f"{body}\n{_SIG_PREFIX}{self.name} {_b64(blob)}\n"


# Control characters but the newline (C0, DEL, C1) and the Unicode line and
# paragraph separators: a note's lines are split on "\n" alone.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _check_text(body: str) -> None:
    if not body.endswith("\n") or "\n\n" in body:
        raise EvidenceFormatError("note", "text must end in one newline, no blank line")
    if _CONTROL.search(body):
        raise EvidenceFormatError("note", "text holds a control character")


class OpenedNote(msgspec.Struct, frozen=True):
    """A note whose signature verified: its text and the key that signed it."""

    text: str
    key: PublicKey


class NoteRefused(msgspec.Struct, frozen=True):
    """Why a note was refused: ``"malformed"``, ``"unknown-key"`` (no line
    names a key the verifier holds) or ``"signature"`` (a line names a held
    key and does not verify under it)."""

    reason: str
    detail: str


def open_note(note: str | bytes, keys: Iterable[PublicKey]) -> OpenedNote | NoteRefused:
    """Split a signed note and verify it under any of ``keys`` (rotation).

    Lines by keys the verifier does not hold are skipped (a witness may
    cosign); any line by a held key must verify.
    """
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            return NoteRefused("malformed", "not UTF-8")
    text, sep, sigs = note.rpartition("\n\n")
    text += "\n"
    if not sep or not sigs.endswith("\n"):
        return NoteRefused("malformed", "no signature block")
    try:
        _check_text(text)
    except EvidenceFormatError as exc:
        return NoteRefused("malformed", exc.reason)
    held = {(k.name, k.id): k for k in keys}
    lines = sigs[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        return NoteRefused("malformed", "too many signatures")
    verified: PublicKey | None = None
    for line in lines:
        if not line.startswith(_SIG_PREFIX):
            return NoteRefused("malformed", f"not a signature line: {line[:40]!r}")
        name, space, body = line[len(_SIG_PREFIX) :].partition(" ")
        if not space or not _NAME.fullmatch(name) or " " in body:
            return NoteRefused("malformed", "bad signature line")
        try:
            blob = _unb64(body, "note")
        except EvidenceFormatError:
            return NoteRefused("malformed", "signature is not base64")
        if len(blob) < 5:
            return NoteRefused("malformed", "signature too short")
        key = held.get((name, int.from_bytes(blob[:4], "big")))
        if key is None:
            continue
        if not key.verifies(text.encode(), blob[4:]):
            return NoteRefused("signature", f"bad signature by {name}+{key.id:08x}")
        verified = verified or key
    if verified is None:
        names = ", ".join(sorted(f"{k.name}+{k.id:08x}" for k in held.values()))
        return NoteRefused("unknown-key", f"no signature by a held key ({names})")
    return OpenedNote(text=text, key=verified)


class Checkpoint(msgspec.Struct, frozen=True):
    """A C2SP tlog-checkpoint: origin, tree size, root hash (+ extensions)."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        """The checkpoint's note text (unsigned)."""
        lines = [self.origin, str(self.size), _b64(self.root), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """A checkpoint from its note text.

        Raises:
            EvidenceFormatError: not a checkpoint body.
        """
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise EvidenceFormatError("checkpoint", "want origin, size, root lines")
        origin, size, root = lines[:3]
        if not origin or origin == HEAD_ORIGIN:
            raise EvidenceFormatError("checkpoint", "bad origin line")
        if not re.fullmatch(r"0|[1-9][0-9]{0,18}", size):
            raise EvidenceFormatError("checkpoint", "bad tree size line")
        raw = _unb64(root, "checkpoint")
        if len(raw) != 32:
            raise EvidenceFormatError("checkpoint", "root hash is not 32 bytes")
        return cls(
            origin=origin, size=int(size), root=raw, extensions=tuple(lines[3:-1])
        )


HEAD_ORIGIN = "helmlog/session-head/v1"
CHAIN_KINDS = ("sha256", "hmac-sha256")


class SessionHead(msgspec.Struct, frozen=True, kw_only=True):
    """A session's head, as signed: where its stream ends and what it holds.

    ``chain`` is the store's chain hash at ``seq`` (``chain_kind`` says
    whether it is keyed); ``digest`` is the keyless evidence digest over the
    stored bytes of records 1..seq (``evidence_digest``), which any verifier
    recomputes without the chain key.
    """

    session_id: str
    seq: int
    chain: str
    chain_kind: str
    digest: bytes

    def text(self) -> str:
        """The head's note text (unsigned); also the log leaf's data."""
        if self.chain_kind not in CHAIN_KINDS or len(self.digest) != 32:
            raise EvidenceFormatError("head", "bad chain kind or digest")
        if not re.fullmatch(r"[0-9a-f]{64}", self.chain) or self.seq < 0:
            raise EvidenceFormatError("head", "bad chain hash or seq")
        if not self.session_id.isprintable() or not self.session_id.strip():
            raise EvidenceFormatError("head", "session id must be printable text")
        return (
            f"{HEAD_ORIGIN}\nsession {self.session_id}\nseq {self.seq}\n"
            f"chain {self.chain_kind} {self.chain}\ndigest {_b64(self.digest)}\n"
        )

    @classmethod
    def over(
        cls,
        session_id: str,
        records: Sequence[tuple[int, bytes, str]],
        chain_kind: str,
        start: tuple[int, bytes] = (0, bytes(32)),
    ) -> SessionHead:
        """The head of a stream whose records (``(seq, stored bytes, hash)``,
        in order, after ``start``: a ``(seq, digest)`` already computed) end
        it; the digest continues from ``start``.

        Raises:
            EvidenceFormatError: no record, or a seq out of order.
        """
        seq, digest = start
        for record_seq, data, _hash in records:
            if record_seq != seq + 1:
                raise EvidenceFormatError("head", f"seq {record_seq} after {seq}")
            seq, digest = record_seq, hashlib.sha256(digest + data).digest()
        if not records:
            raise EvidenceFormatError("head", "a head names at least one record")
        head = cls(
            session_id=session_id,
            seq=seq,
            chain=records[-1][2],
            chain_kind=chain_kind,
            digest=digest,
        )
        head.text()  # refuses a session id or chain kind a note cannot hold
        return head

    @classmethod
    def parse(cls, text: str) -> SessionHead:
        """A head from its note text.

        Raises:
            EvidenceFormatError: not a head body.
        """
        lines = text.split("\n")
        if len(lines) != 6 or lines[0] != HEAD_ORIGIN or lines[-1] != "":
            raise EvidenceFormatError("head", "not a helmlog session head")
        session, seq, chain, digest = lines[1:5]
        kind, _, chain_hash = chain.removeprefix("chain ").partition(" ")
        if (
            not session.startswith("session ")
            or not re.fullmatch(r"seq (0|[1-9][0-9]{0,18})", seq)
            or not chain.startswith("chain ")
            or kind not in CHAIN_KINDS
            or not re.fullmatch(r"[0-9a-f]{64}", chain_hash)
            or not digest.startswith("digest ")
        ):
            raise EvidenceFormatError("head", "bad head line")
        raw = _unb64(digest.removeprefix("digest "), "head")
        if len(raw) != 32:
            raise EvidenceFormatError("head", "digest is not 32 bytes")
        return cls(
            session_id=session.removeprefix("session "),
            seq=int(seq.removeprefix("seq ")),
            chain=chain_hash,
            chain_kind=kind,
            digest=raw,
        )


DIGEST_START = bytes(32)


def digest_step(digest: bytes, data: bytes) -> bytes:
    """The evidence digest after one more record: SHA-256(digest || data).

    ``digest`` is 32 bytes, so the concatenation is unambiguous.
    """
    return hashlib.sha256(digest + data).digest()


def evidence_digest(records: Iterable[bytes], start: bytes = DIGEST_START) -> bytes:
    """The evidence digest over stored records, in seq order, from ``start``."""
    digest = start
    for data in records:
        digest = hashlib.sha256(digest + data).digest()
    return digest
