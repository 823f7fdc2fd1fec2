"""Encoding: the stored form of events, canonical JSON, digests, shapes.

Pattern: one module-level encoder and decoder per format (msgspec).
Role:    events layer; stores, the hash chain, checkpoints and the runtime's
         rendering of tool results all encode through here.
Emits:   nothing.

Laws: R10 (an unknown ``type`` decodes to ``UnknownEvent``, never a crash),
R12 (JSON and msgpack decode into the union), the SPEC conventions for
canonical JSON, digests and shapes.

Why an ``enc_hook`` that falls back to ``str``: a tool may return any Python
object. The model reads it as JSON (G25) and the stream must keep a record of
it; a value msgspec cannot encode is recorded as its text rather than losing
the whole event, which would stop the run (R5) over a rendering detail.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ._types import AnyEvent, Event, UnknownEvent


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    return str(obj)


_json_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_canonical_encoder = msgspec.json.Encoder(enc_hook=_enc_hook, order="sorted")
_msgpack_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_json_decoder = msgspec.json.Decoder(AnyEvent)
_msgpack_decoder = msgspec.msgpack.Decoder(AnyEvent)


class _Envelope(msgspec.Struct, kw_only=True):
    """Enough of any event, known or not, to place and verify it."""

    type: str = ""
    session_id: str = ""
    seq: int | None = None
    timestamp: int = 0
    prev_hash: str = ""


_envelope_decoder = msgspec.json.Decoder(_Envelope)


def encode_event(event: Event) -> bytes:
    """The stored (JSON) encoding of an event."""
    return _json_encoder.encode(event)


def decode_event(data: bytes) -> Event | UnknownEvent:
    """Decode one stored event; an unknown ``type`` becomes ``UnknownEvent``."""
    try:
        return _json_decoder.decode(data)
    except msgspec.ValidationError:
        env = _envelope_decoder.decode(data)
        from ._types import EVENT_TYPES

        if env.type in EVENT_TYPES:
            raise
        return UnknownEvent(
            type=env.type,
            session_id=env.session_id,
            seq=env.seq,
            timestamp=env.timestamp,
            prev_hash=env.prev_hash,
            data=bytes(data),
        )


def decode_envelope(data: bytes) -> tuple[str, int | None, str]:
    """``(type, seq, prev_hash)`` of any stored event, known or not."""
    env = _envelope_decoder.decode(data)
    return env.type, env.seq, env.prev_hash


def encode_msgpack(event: Event) -> bytes:
    """The msgpack encoding actors exchange (R12)."""
    return _msgpack_encoder.encode(event)


def decode_msgpack(data: bytes) -> Event:
    """Decode a msgpack-encoded event."""
    return _msgpack_decoder.decode(data)


def compact_json(value: Any) -> str:
    """Compact JSON: separators ``(",", ":")``, non-ASCII kept, keys as given."""
    return _json_encoder.encode(value).decode()


def canonical_json(value: Any) -> bytes:
    """Canonical JSON: compact, sorted keys, UTF-8."""
    return _canonical_encoder.encode(value)


def digest(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def shape(value: Any) -> str:
    """``None``, or "a"/"an" + the type's ``__name__`` — never the value."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}"
