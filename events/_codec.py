"""Encoding: the stored form of events, canonical JSON, digests, shapes.

Pattern: one module-level encoder and decoder per format (msgspec).
Role:    events layer; stores, the hash chain, checkpoints and the runtime's
         rendering of tool results all encode through here.
Emits:   nothing.

Laws: R10 (an unknown ``type`` decodes to ``UnknownEvent``), R12, the SPEC
conventions for canonical JSON, digests and shapes; issue 8 item 7 (bad bytes
raise ``EventDecodeError``, never ``RecursionError``).

Why decoding is depth-bounded (``MAX_DEPTH``): msgspec recurses per nesting
level, so deep text is refused before it is decoded. Why ``own_values``: a
writer gets the decoded form of what it just encoded without decoding it
(issue 29 item 3). More: docs/design.md.
"""

from __future__ import annotations

import hashlib
import re
import typing
from collections.abc import Callable
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


# -- the decoded form, without a round trip (issue 29 item 3) ---------------
#
# A writer that has just encoded an event needs what a reader decodes from
# those bytes: typed, owning its containers (G8: no mutable value shared with
# whoever built the event), JSON forms in ``Any`` fields (a tuple is a list
# there). Decoding the bytes back gave exactly that, at the cost of a decode
# per append. ``own_values`` gives the same object without one when it can
# show the result is equal: every field holds exactly its declared type (so
# the decoder would accept it and give it back equal), and every container is
# copied into its JSON form. Anything else (a set, an int where a float is
# declared, a str subclass, a non-str key, nesting past ``_OWN_DEPTH``) is
# "not shown", and the caller decodes as before, errors and all.

_NOT_SHOWN: Any = object()
_OWN_DEPTH = 64  # past it, the decoder's own depth check (MAX_DEPTH) judges

Owner = Callable[[Any, int], Any]
Test = Callable[[Any], bool]


_JSON_SCALARS = frozenset((str, int, bool, type(None)))


def _own_json(value: Any, depth: int) -> Any:
    """A JSON-normal copy of ``value`` (an ``Any`` field), or ``_NOT_SHOWN``."""
    kind = type(value)
    # A dict first: what an ``Any`` field most often holds (a tool's
    # arguments or result, a usage, an identity); a scalar in one is tested
    # by one lookup of its type.
    if kind is dict:
        if depth > _OWN_DEPTH:
            return _NOT_SHOWN
        # A shallow copy in C, then only its non-scalar values replaced
        # (storing into an existing key while iterating is allowed).
        out: dict[str, Any] = value.copy()
        for key, item in out.items():
            if type(key) is not str:
                return _NOT_SHOWN
            if type(item) not in _JSON_SCALARS:
                item = _own_json(item, depth + 1)
                if item is _NOT_SHOWN:
                    return _NOT_SHOWN
                out[key] = item
        return out
    if kind in _JSON_SCALARS:
        return value
    if kind is float:
        # Finite only: msgspec writes NaN and infinities as null.
        return value if value - value == 0.0 else _NOT_SHOWN
    if depth > _OWN_DEPTH:
        return _NOT_SHOWN
    if kind is list or kind is tuple:
        items: list[Any] = list(value)
        for i, item in enumerate(items):
            if type(item) not in _JSON_SCALARS:
                item = _own_json(item, depth + 1)
                if item is _NOT_SHOWN:
                    return _NOT_SHOWN
                items[i] = item
        return items
    return _NOT_SHOWN


_CONSTRAINTS = ("min_length", "max_length", "pattern", "gt", "ge", "lt", "le")


def _unconstrained(info: Any) -> bool:
    return all(getattr(info, name, None) is None for name in _CONSTRAINTS) and (
        getattr(info, "multiple_of", None) is None
    )


def _scalar_test(info: Any, v: str) -> str | None:
    """A Python expression true when ``v`` holds exactly this scalar type, or
    ``None`` for a type that is not a plain scalar (or union of them)."""
    mi = msgspec.inspect
    if isinstance(info, mi.NoneType):
        return f"{v} is None"
    if not _unconstrained(info):
        return None
    if isinstance(info, mi.StrType):
        return f"type({v}) is str"
    if isinstance(info, mi.BoolType):
        return f"type({v}) is bool"
    if isinstance(info, mi.IntType):
        return f"type({v}) is int"
    if isinstance(info, mi.FloatType):
        return f"(type({v}) is float and {v} - {v} == 0.0)"
    if isinstance(info, mi.UnionType):
        # ``None`` tested first: an optional field most often holds it, and
        # ``v is None`` is one comparison where ``type(v) is str`` is a call.
        arms = sorted(info.types, key=lambda t: not isinstance(t, mi.NoneType))
        tests = [_scalar_test(t, v) for t in arms]
        if any(t is None for t in tests):
            return None
        return "(" + " or ".join(t for t in tests if t is not None) + ")"
    return None


def _compiled_test(info: Any) -> Test | None:
    test = _scalar_test(info, "v")
    if test is None:
        return None
    made: Test = eval(f"lambda v: {test}")
    return made


def _owner(info: Any) -> Owner | None:
    """A function giving a container field's owned, decoded form (or
    ``_NOT_SHOWN``); ``None`` for a type ``own_values`` leaves to the decoder."""
    mi = msgspec.inspect
    if isinstance(info, mi.AnyType):
        return _own_json
    if isinstance(info, mi.UnionType):
        arms = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(arms) != 1 or len(arms) == len(info.types):
            return None
        inner = _owner(arms[0])
        if inner is None:
            return None

        def optional(value: Any, depth: int) -> Any:
            return None if value is None else inner(value, depth)

        return optional
    if not _unconstrained(info):
        return None
    if isinstance(info, mi.DictType):
        key = info.key_type
        if not isinstance(key, mi.StrType) or not _unconstrained(key):
            return None
        return _dict_owner(_owner(info.value_type), _compiled_test(info.value_type))
    if isinstance(info, mi.VarTupleType):
        return _tuple_owner(_owner(info.item_type), _compiled_test(info.item_type))
    if isinstance(info, mi.StructType):
        return _struct_value_owner(info)
    return None


def _dict_owner(item_owner: Owner | None, item_test: Test | None) -> Owner | None:
    if item_owner is None and item_test is None:
        return None

    def owned_dict(value: Any, depth: int) -> Any:
        if type(value) is not dict or depth > _OWN_DEPTH:
            return _NOT_SHOWN
        if not value:
            return {}
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _NOT_SHOWN
            if item_test is not None:
                if not item_test(item):
                    return _NOT_SHOWN
            elif item_owner is not None:
                item = item_owner(item, depth + 1)
                if item is _NOT_SHOWN:
                    return _NOT_SHOWN
            out[key] = item
        return out

    return owned_dict


def _tuple_owner(item_owner: Owner | None, item_test: Test | None) -> Owner | None:
    if item_owner is None and item_test is None:
        return None

    def owned_tuple(value: Any, depth: int) -> Any:
        if type(value) is not tuple or depth > _OWN_DEPTH:
            return _NOT_SHOWN
        if item_test is not None:
            # A tuple of scalars holds nothing mutable: it is its own copy.
            return value if all(map(item_test, value)) else _NOT_SHOWN
        assert item_owner is not None
        items = []
        changed = False
        for item in value:
            owned = item_owner(item, depth + 1)
            if owned is _NOT_SHOWN:
                return _NOT_SHOWN
            changed = changed or owned is not item
            items.append(owned)
        return tuple(items) if changed else value

    return owned_tuple


def _struct_value_owner(info: Any) -> Owner | None:
    fields = _field_owner(info)
    if fields is None:
        return None
    cls = info.cls

    def owned_struct(value: Any, depth: int) -> Any:
        if type(value) is not cls or depth > _OWN_DEPTH:
            return _NOT_SHOWN
        changes = fields(value, depth)
        if changes is _NOT_SHOWN:
            return _NOT_SHOWN
        # A frozen struct whose containers need no copy is its own copy.
        return msgspec.structs.replace(value, **changes) if changes else value

    return owned_struct


# Fields the sealer stamps itself (R3, R12): never taken from the caller.
_STAMPED = frozenset(("session_id", "seq", "prev_hash", "replayed"))
_field_owners: dict[type, Owner | None] = {}


def _field_owner(info: Any) -> Owner | None:
    """Generated code for one frozen struct type: it checks that every field
    holds exactly its type and returns ``{name: owned copy}`` for the fields
    whose copy is a new object, ``None`` when there are none (``_NOT_SHOWN``
    when a field does not pass).

    Why generated: it runs for every event a journal appends, and straight-
    line attribute tests cost a fraction of a loop over a table of fields.
    """
    cls = info.cls
    if cls in _field_owners:
        return _field_owners[cls]
    _field_owners[cls] = None  # a recursive type is left to the decoder
    made: Owner | None = _generated_owner(info, in_place=False)
    if made is not None:
        _field_owners[cls] = made
    return made


def _generated_owner(info: Any, *, in_place: bool) -> Any:
    """``_field_owner``'s code; ``in_place``: for a fresh event only, the
    sealer's form (``_EVENT_SEALERS``), which sets each owned copy and the
    session id on the event itself and returns ``None`` (``_NOT_SHOWN``, the
    event then partly set, when a field does not pass): no ``changes`` dict
    built, read back and set by the caller (issue 29 item 3)."""
    cls = info.cls
    if not cls.__struct_config__.frozen:
        return None
    mi = msgspec.inspect
    envelope = issubclass(cls, Event)
    scope: dict[str, Any] = {
        "NOT_SHOWN": _NOT_SHOWN,
        "replace": msgspec.structs.replace,
        "set_": msgspec.structs.force_setattr,
    }
    lines = (
        [
            "def owned_fields(ev, session_id, depth=0, type=type, str=str,"
            " int=int, bool=bool, float=float, tuple=tuple, NOT_SHOWN=NOT_SHOWN,"
            " set_=set_):",
        ]
        if in_place
        else [
            "def owned_fields(ev, depth, type=type, str=str, int=int, bool=bool,"
            " float=float, tuple=tuple, NOT_SHOWN=NOT_SHOWN):",
            "    changes = None",
        ]
    )

    def put(name: str, value: str, indent: str) -> list[str]:
        if in_place:
            return [f"{indent}set_(ev, {name!r}, {value})"]
        return [
            f"{indent}if changes is None: changes = {{}}",
            f"{indent}changes[{name!r}] = {value}",
        ]

    # A run of scalar fields is tested by one condition, each field read in
    # it (no local per field): most of an event's fields are scalars.
    scalars: list[str] = []
    for i, field in enumerate(info.fields):
        if envelope and field.name in _STAMPED:
            continue
        test = _scalar_test(field.type, f"ev.{field.name}")
        if test is not None:
            scalars.append(test)
            continue
        if scalars:
            lines.append(f"    if not ({' and '.join(scalars)}): return NOT_SHOWN")
            scalars = []
        lines.append(f"    v = ev.{field.name}")
        store = [
            "        if w is NOT_SHOWN: return NOT_SHOWN",
            "        if w is not v:",
            *put(field.name, "w", "            "),
        ]
        if isinstance(field.type, mi.StructType):
            # A nested struct (a row, a message): its fields inline, and a
            # copy only when one of its containers needed one.
            nested = _field_owner(field.type)
            if nested is None:
                return None
            scope[f"cls_{i}"], scope[f"fields_{i}"] = field.type.cls, nested
            lines += [
                f"    if type(v) is not cls_{i}: return NOT_SHOWN",
                f"    w = fields_{i}(v, depth + 1)",
                "    if w is NOT_SHOWN: return NOT_SHOWN",
                "    if w:",
                *put(field.name, "replace(v, **w)", "        "),
            ]
            continue
        item = getattr(field.type, "item_type", None)
        if isinstance(field.type, mi.VarTupleType) and isinstance(item, mi.StructType):
            # A tuple of structs (a message's tool calls): each item's fields
            # inline, and a new tuple only when an item needed a copy.
            item_fields = _field_owner(item)
            if item_fields is None or not _unconstrained(field.type):
                return None
            scope[f"cls_{i}"], scope[f"fields_{i}"] = item.cls, item_fields
            lines += [
                "    if type(v) is not tuple: return NOT_SHOWN",
                "    if v:",
                "        items = []",
                "        for x in v:",
                f"            if type(x) is not cls_{i}: return NOT_SHOWN",
                f"            c = fields_{i}(x, depth + 2)",
                "            if c is NOT_SHOWN: return NOT_SHOWN",
                "            items.append(replace(x, **c) if c else x)",
                *put(field.name, "tuple(items)", "        "),
            ]
            continue
        owner = _owner(field.type)
        if owner is None:
            return None
        scope[f"own_{i}"] = owner
        if isinstance(field.type, mi.VarTupleType):
            # An empty tuple is its own copy.
            lines += [
                "    if type(v) is not tuple: return NOT_SHOWN",
                "    if v:",
                f"        w = own_{i}(v, depth + 1)",
                *store,
            ]
            continue
        # Every other type an owner serves takes None to None (Any, optional)
        # or refuses it (a dict).
        guard = "v is not None" if _takes_none(field.type) else "True"
        lines += [
            f"    if {guard}:",
            f"        w = own_{i}(v, depth + 1)",
            *store,
        ]
    if scalars:
        lines.append(f"    if not ({' and '.join(scalars)}): return NOT_SHOWN")
    if in_place:
        lines += ["    set_(ev, 'session_id', session_id)", "    return None"]
    else:
        lines.append("    return changes")
    exec("\n".join(lines), scope)
    return scope["owned_fields"]


def _takes_none(info: Any) -> bool:
    mi = msgspec.inspect
    if isinstance(info, mi.AnyType):
        return True
    return isinstance(info, mi.UnionType) and any(
        isinstance(t, mi.NoneType) for t in info.types
    )


def _event_owners() -> dict[type, Owner]:
    owners: dict[type, Owner] = {}
    for info in msgspec.inspect.multi_type_info(typing.get_args(AnyEvent)):
        if isinstance(info, msgspec.inspect.StructType):
            owner = _field_owner(info)
            if owner is not None:
                owners[info.cls] = owner
    return owners


_EVENT_OWNERS = _event_owners()
# The sealer's in-place form of each owner (``_generated_owner``): for an
# event made by the sealer itself, that no one else holds.
Sealer = Callable[[Any, str], Any]
_EVENT_SEALERS: dict[type, Sealer] = {
    cls: _generated_owner(msgspec.inspect.type_info(cls), in_place=True)
    for cls in _EVENT_OWNERS
}
_force = msgspec.structs.force_setattr


def own_values(event: Event) -> bool:
    """Make ``event`` what decoding its stored encoding gives, in place.

    Only for an event no one else holds yet (a sealer's fresh stamp): its
    containers are replaced by owned JSON-normal copies, which encode to the
    same bytes. Returns ``False``, with ``event`` unchanged, when an equal
    decode is not shown (see above): the caller then decodes.
    """
    owner = _EVENT_OWNERS.get(type(event))
    if owner is None:
        return False
    changes = owner(event, 0)
    if changes is _NOT_SHOWN:
        return False
    if changes:
        for name, value in changes.items():
            _force(event, name, value)
    return True
