"""Bad bytes get typed errors: the decoders are depth-bounded and total.

Pattern: fuzzing (Hypothesis) over random JSON, mutations of valid encodings
         and deep nesting, accepting only the typed errors of the tree.
Role:    unit tests for ``decode_event``, ``decode_msgpack`` and
         ``Checkpoint.from_json`` (issue 8 item 7).
Emits:   nothing.

Laws: R10 (an unknown type is reported, never a crash), R12, R14 (text that
is not a checkpoint is ``CheckpointError("malformed")``); issue 8 item 7
(nesting past ``MAX_DEPTH`` is refused, never a ``RecursionError``).

Why mutations of valid encodings as well as random text: random text is
almost never JSON, so it only exercises the parser's first byte; a valid
event or checkpoint with a byte flipped, a field retyped or a value nested
deep reaches the validating decoder and the fold.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    EventDecodeError,
    Message,
    MessageCommitted,
    PauseRequested,
    ToolCallRequest,
    ToolDispatched,
    UnknownEvent,
    decode_event,
    encode_event,
    fold,
)
from helmlog.events._codec import MAX_DEPTH, decode_envelope, too_deep
from helmlog.events.lowlevel import decode_msgpack, encode_msgpack

DEEP = 1_000

_scalar = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_json = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

SAMPLES: list[bytes] = [
    encode_event(
        ToolDispatched(
            session_id="s",
            seq=3,
            tool_name="refund",
            tool_call_id="c1",
            args={"order": 7, "amount": 900},
        )
    ),
    encode_event(
        MessageCommitted(
            session_id="s",
            seq=2,
            message=Message(
                role="assistant",
                tool_calls=(ToolCallRequest(id="c1", name="refund", args={"a": [1]}),),
            ),
        )
    ),
    encode_event(
        PauseRequested(
            session_id="s",
            seq=4,
            kind="ask",
            tool_name="refund",
            tool_call_id="c1",
            middleware="four-eyes",
            link_index=0,
            args={"order": 7},
        )
    ),
    b'{"type":"agent.mood_changed","seq":5,"mood":{"x":[1,2]}}',
]
CHECKPOINT = Checkpoint(
    kind="pause",
    session_id="s",
    seq=4,
    history=(Message(role="user", content="refund order 7"),),
    tool_name="refund",
    tool_call_id="c1",
    args_digest="0" * 64,
    policy_version="1" * 64,
).to_json()


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def decode_any(data: bytes) -> None:
    """Decode and fold, accepting only the typed error."""
    try:
        event = decode_event(data)
    except EventDecodeError as exc:
        assert exc.reason in ("malformed", "too-deep")
        assert "ERR_EVENT_DECODE" == exc.code
        return
    fold([event])


def checkpoint_any(text: str | bytes) -> None:
    try:
        Checkpoint.from_json(text)
    except CheckpointError as exc:
        assert "malformed" == exc.reason


def _mutate(data: bytes, draw: Any) -> bytes:
    """One structural or byte-level change of a valid encoding."""
    how = draw(st.sampled_from(["flip", "cut", "field", "deep", "splice"]))
    if how == "flip":
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    if how == "cut":
        return data[: draw(st.integers(0, len(data) - 1))]
    body = json.loads(data)
    key = draw(st.sampled_from(sorted(body)))
    if how == "field":
        body[key] = draw(_json)
    elif how == "deep":
        # Built as text: Python's json module itself recurses per level.
        body[key] = "@deep@"
        deep = nested(draw(st.integers(MAX_DEPTH - 2, DEEP)))
        return json.dumps(body).replace('"@deep@"', deep).encode()
    else:
        body[draw(st.text(max_size=6))] = draw(_json)
    return json.dumps(body).encode()


@st.composite
def mutated_events(draw: Any) -> bytes:
    return _mutate(draw(st.sampled_from(SAMPLES)), draw)


@st.composite
def mutated_checkpoints(draw: Any) -> bytes:
    return _mutate(CHECKPOINT.encode(), draw)


# -- depth ------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        nested(DEEP).encode(),
        b'{"type":"tool.dispatched","tool_name":"a","tool_call_id":"b","args":'
        + nested(DEEP).encode()
        + b"}",
        b'{"type":"agent.mood_changed","x":' + nested(DEEP).encode() + b"}",
        ("{" + '"a":{' * DEEP + "}" * (DEEP + 1)).encode(),
    ],
    ids=["bare-array", "known-type", "unknown-type", "objects"],
)
def test_item7_deep_nesting_in_an_event_is_a_typed_error(data: bytes) -> None:
    """Issue 8 item 7: JSON nested ~1,000 deep is EventDecodeError, never recursion."""
    with pytest.raises(EventDecodeError) as caught:
        decode_event(data)
    assert "too-deep" == caught.value.reason
    with pytest.raises(EventDecodeError):
        decode_envelope(data)


def test_item7_deep_nesting_in_a_checkpoint_is_malformed() -> None:
    """Issue 8 item 7, R14: a checkpoint nested ~1,000 deep is malformed."""
    for text in (
        nested(DEEP),
        CHECKPOINT.replace('"history":[', '"history":[' + nested(DEEP) + ","),
        CHECKPOINT[:-1] + ',"extra":' + nested(DEEP - 10) + "}",
    ):
        with pytest.raises(CheckpointError) as caught:
            Checkpoint.from_json(text)
        assert "malformed" == caught.value.reason


def test_item7_nesting_up_to_the_bound_still_decodes() -> None:
    """A value nested exactly to the bound is kept (old streams stay readable)."""
    args = json.loads(nested(MAX_DEPTH - 2))
    data = encode_event(ToolDispatched(tool_name="t", tool_call_id="c", args=args))
    assert not too_deep(data)
    decoded = decode_event(data)
    assert isinstance(decoded, ToolDispatched)
    assert args == decoded.args


def test_item7_brackets_inside_strings_do_not_count() -> None:
    """The depth scan skips JSON strings, escaped quotes included."""
    text = "[" * (MAX_DEPTH + 5) + '\\"'
    data = encode_event(ToolDispatched(tool_name="t", tool_call_id="c", args=text))
    assert text == decode_event(data).args  # type: ignore[union-attr]


def test_item7_msgpack_that_is_no_event_is_a_typed_error() -> None:
    """decode_msgpack raises EventDecodeError for garbage and for deep nesting."""
    deep = b"\x91" * DEEP + b"\x01"
    deep_map = b"\x81\xa1a" * DEEP + b"\x01"
    for data in (b"", b"\xc1", deep, deep_map, msgspec.msgpack.encode({"x": 1})):
        with pytest.raises(EventDecodeError):
            decode_msgpack(data)


def test_item7_a_known_type_with_bad_fields_is_malformed() -> None:
    """A known type that fails validation is EventDecodeError("malformed")."""
    with pytest.raises(EventDecodeError) as caught:
        decode_event(b'{"type":"tool.dispatched","tool_name":5}')
    assert ("malformed", "ERR_EVENT_DECODE") == (caught.value.reason, caught.value.code)
    assert isinstance(caught.value, ValueError)  # old guards keep working
    assert isinstance(caught.value, msgspec.DecodeError)


def test_item7_an_unknown_type_still_decodes_to_unknown_event() -> None:
    """R10 is kept: an unknown type is UnknownEvent, not an error."""
    event = decode_event(SAMPLES[-1])
    assert isinstance(event, UnknownEvent)
    assert ("agent.mood_changed", 5) == (event.type, event.seq)


# -- fuzz -------------------------------------------------------------------


@settings(max_examples=3_000, deadline=None)
@given(data=st.binary(max_size=64) | _json.map(lambda v: json.dumps(v).encode()))
def test_item7_fuzz_random_bytes_decode_or_raise_typed(data: bytes) -> None:
    """Random bytes and random JSON: an event, or EventDecodeError; never other."""
    decode_any(data)
    with contextlib.suppress(EventDecodeError):
        decode_msgpack(data)


@settings(max_examples=3_000, deadline=None)
@given(data=mutated_events())
def test_item7_fuzz_mutated_events_decode_or_raise_typed(data: bytes) -> None:
    """Mutated valid events (flips, cuts, retyped fields, deep values) stay typed."""
    decode_any(data)
    try:
        event = decode_event(data)
        packed = encode_msgpack(event)  # type: ignore[arg-type]
    except EventDecodeError:
        return
    except OverflowError:
        return  # JSON holds integers past msgpack's 64 bits; an encoding limit
    with contextlib.suppress(EventDecodeError):
        decode_msgpack(packed)


@settings(max_examples=3_000, deadline=None)
@given(
    text=st.text(max_size=64)
    | _json.map(json.dumps)
    | mutated_checkpoints()
    | st.integers(0, DEEP).map(nested)
)
def test_item7_fuzz_checkpoint_text_is_a_checkpoint_or_malformed(
    text: str | bytes,
) -> None:
    """Checkpoint.from_json over random and mutated text: only malformed."""
    checkpoint_any(text)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


_bracketed = st.text(alphabet='[]{}"\\ab', max_size=6)
_nested = st.recursive(
    st.none() | st.integers() | _bracketed,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_bracketed, inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=2_000, deadline=None)
@given(value=_nested, limit=st.integers(0, 6))
def test_item7_the_depth_bound_is_exact(value: Any, limit: int) -> None:
    """too_deep(text, limit) is exactly "nests deeper than limit", whatever the
    strings hold (brackets, quotes, escapes), for JSON as msgspec writes it."""
    data = encode_event(ToolDispatched(tool_name="t", tool_call_id="c", args=value))
    assert (_depth(value) + 1 > limit) == too_deep(data, limit)
