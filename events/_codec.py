"""Encoding: the stored form of events, canonical JSON, digests, shapes.

Pattern: one module-level encoder and decoder per format (msgspec).
Role:    events layer; stores, the hash chain, checkpoints and the runtime's
         rendering of tool results all encode through here.
Emits:   nothing.

Laws: R10 (an unknown ``type`` decodes to ``UnknownEvent``), R12, the SPEC
conventions for canonical JSON, digests and shapes; issue 8 item 7 (bad bytes
raise ``EventDecodeError``, never ``RecursionError``).

Why decoding is depth-bounded (``MAX_DEPTH``): msgspec recurses per nesting
level, so deep text is refused before it is decoded. More: docs/design.md.
"""

from __future__ import annotations

import hashlib
import re
import typing
from typing import Any

import msgspec

from ._envelope import Event, UnknownEvent
from ._errors import EventDecodeError
from ._types import EVENT_TYPES, AnyEvent

MAX_DEPTH = 256
"""The deepest nesting of arrays and objects a decoder accepts."""

# A JSON string, escapes included, so a bracket inside one never counts. The
# closing quote is optional: an unterminated string runs to the end in one
# match, so the scan stays linear whatever the text.
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def too_deep(text: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays/objects deeper than ``limit``.

    Malformed text may be judged either way; its decode then fails on its own.
    """
    if isinstance(text, bytes):
        data = text
    elif isinstance(text, str):
        data = text.encode("utf-8", "replace")
    else:
        data = bytes(text)
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    # Each pass removes the innermost pairs, one level everywhere at once (in
    # C; a removed pair is first marked, so the pair around it waits for the
    # next pass); the usual event takes a few passes, nesting past ``limit``
    # is left.
    if b'\\"' in data:
        outside = _STRINGS.sub(b"", data)
    else:  # no escaped quote: every other piece between quotes is a string
        outside = b"".join(data.split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        fewer = brackets.replace(b"[]", b"x").replace(b"{}", b"x").replace(b"x", b"")
        if not fewer or fewer == brackets:
            return False  # flat now, or unbalanced: the decoder judges that
        brackets = fewer
    return True


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    return str(obj)


_json_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_canonical_encoder = msgspec.json.Encoder(enc_hook=_enc_hook, order="sorted")
_msgpack_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_json_decoder = msgspec.json.Decoder(AnyEvent)
_msgpack_decoder = msgspec.msgpack.Decoder(AnyEvent)


def _holds_containers(info: Any, seen: tuple[type, ...] = ()) -> bool:
    """Whether a value of this (msgspec) type can hold a mutable container."""
    mi = msgspec.inspect
    if isinstance(info, mi.Metadata):
        return _holds_containers(info.type, seen)
    if isinstance(info, mi.DictType | mi.ListType | mi.SetType | mi.AnyType):
        return True
    if isinstance(info, mi.VarTupleType | mi.FrozenSetType):
        return _holds_containers(info.item_type, seen)
    if isinstance(info, mi.TupleType):
        return any(_holds_containers(t, seen) for t in info.item_types)
    if isinstance(info, mi.UnionType):
        return any(_holds_containers(t, seen) for t in info.types)
    if isinstance(info, mi.StructType):
        if info.cls in seen:
            return False
        return not info.cls.__struct_config__.frozen or any(
            _holds_containers(f.type, (*seen, info.cls)) for f in info.fields
        )
    return False


# Each event type's fields that can hold a mutable container (a tool's
# arguments, a message): the ones a reader's copy must not share.
CONTAINER_FIELDS: dict[type, tuple[str, ...]] = {
    info.cls: tuple(f.name for f in info.fields if _holds_containers(f.type))
    for info in msgspec.inspect.multi_type_info(typing.get_args(AnyEvent))
    if isinstance(info, msgspec.inspect.StructType)
}


def redecode_event(data: bytes) -> Event | UnknownEvent:
    """A fresh copy of an event from bytes ``decode_event`` already accepted.

    Skips the depth check those bytes passed; anything else decodes as
    ``decode_event`` does.
    """
    try:
        return _json_decoder.decode(data)
    except msgspec.DecodeError:
        return decode_event(data)


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


def _refuse_deep(data: bytes | str) -> None:
    # Text no longer than the limit cannot hold more containers than it: the
    # usual event skips even the two counts.
    if len(data) > MAX_DEPTH and too_deep(data):
        raise EventDecodeError("too-deep", f"nested deeper than {MAX_DEPTH}")


def decode_event(data: bytes) -> Event | UnknownEvent:
    """Decode one stored event; an unknown ``type`` becomes ``UnknownEvent``.

    Raises:
        EventDecodeError: the bytes are not an event (``"malformed"``) or nest
            deeper than ``MAX_DEPTH`` (``"too-deep"``).
    """
    _refuse_deep(data)
    try:
        return _json_decoder.decode(data)
    except msgspec.ValidationError as exc:
        invalid = str(exc)
    except msgspec.DecodeError as exc:
        raise EventDecodeError("malformed", str(exc)) from None
    except RecursionError:
        raise EventDecodeError("too-deep", "nested past the decoder's limit") from None
    try:
        env = _envelope_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise EventDecodeError("malformed", str(exc)) from None
    except RecursionError:
        raise EventDecodeError("too-deep", "nested past the decoder's limit") from None
    if env.type in EVENT_TYPES:
        raise EventDecodeError("malformed", invalid)
    return UnknownEvent(
        type=env.type,
        session_id=env.session_id,
        seq=env.seq,
        timestamp=env.timestamp,
        prev_hash=env.prev_hash,
        data=bytes(data),
    )


def decode_envelope(data: bytes) -> tuple[str, int | None, str]:
    """``(type, seq, prev_hash)`` of any stored event, known or not.

    Raises:
        EventDecodeError: as ``decode_event`` (a ``msgspec.DecodeError`` too).
    """
    _refuse_deep(data)
    try:
        env = _envelope_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise EventDecodeError("malformed", str(exc)) from None
    except RecursionError:
        raise EventDecodeError("too-deep", "nested past the decoder's limit") from None
    return env.type, env.seq, env.prev_hash


_TAG_PREFIX = b'{"type":"'
# The stored tag of each known type, to its (interned) name.
_KNOWN_TAGS: dict[bytes, str] = {t.encode(): t for t in EVENT_TYPES}
# Enough of a record's first bytes to hold the longest known tag and its
# closing quote: two records that open with the same window have one type.
_WINDOW = len(_TAG_PREFIX) + max(map(len, EVENT_TYPES)) + 1
_SEEN_MAX = 4_096
# Windows already typed, to their type: the window after a tag is the first
# field's name (and a few bytes of its value), so a stream has few of them.
_seen: dict[bytes, str] = {}


def event_type(data: bytes) -> str:
    """The ``type`` of one stored event, read from its first bytes.

    A known type is read from the tag msgspec writes first (once per distinct
    opening, then looked up); anything else is found by decoding the envelope
    (an unknown type is named, R10). Never raises: bytes that are not an
    event have the type ``""``, and decoding them later reports why.
    """
    window = data[:_WINDOW]
    name = _seen.get(window)
    if name is not None:
        return name
    if window[:9] == _TAG_PREFIX:
        end = data.find(b'"', 9)
        name = _KNOWN_TAGS.get(data[9:end])
        if name is not None:
            if end < _WINDOW and len(_seen) < _SEEN_MAX:
                _seen[window] = name
            return name
    try:
        return decode_envelope(data)[0]
    except EventDecodeError:
        return ""


def encode_msgpack(event: Event) -> bytes:
    """The msgpack encoding actors exchange (R12)."""
    return _msgpack_encoder.encode(event)


def decode_msgpack(data: bytes) -> Event:
    """Decode a msgpack-encoded event.

    Raises:
        EventDecodeError: the bytes are not an event of the union.
    """
    try:
        return _msgpack_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise EventDecodeError("malformed", str(exc)) from None
    except RecursionError:
        raise EventDecodeError("too-deep", "nested past the decoder's limit") from None


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
