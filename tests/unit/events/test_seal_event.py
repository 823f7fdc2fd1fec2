"""Sealing one event gives the record and what a reader decodes from it (R3, R10, G8).

``seal_event`` (the journal's sealer) encodes each event once and hands back
the event a reader would decode, without decoding (issue 29 item 3). These
properties hold it to the decode: the same bytes as ``seal``, an event equal
to ``record.decode()`` and of the same types all the way down, containers of
its own, and the decoder's typed error where the decoder refuses.
"""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog.events import (
    EVENT_CLASSES,
    TRANSIENT_TYPES,
    DecisionFiled,
    Event,
    EventDecodeError,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    ToolCallRequest,
    ToolEnded,
    ToolStarted,
    TurnStarted,
)
from helmlog.events.lowlevel import seal, seal_event

from .test_codec_properties import _strategy

_appendable = st.one_of(
    [
        _strategy(mi.type_info(cls))
        for cls in EVENT_CLASSES
        if cls.type not in TRANSIENT_TYPES
    ]
)


class _Str(str):
    """A str subclass: encodes as a string, decodes as a plain ``str``."""


# Values a caller may hand a field of type ``Any``: JSON-normal ones, and the
# ones whose decode differs from them (tuples, sets, int keys, NaN, objects).
_odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.text(max_size=6).map(_Str),
)
_values = st.recursive(
    _odd,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        | st.dictionaries(st.integers(0, 9), inner, max_size=2)
        | st.frozensets(st.integers(0, 9), max_size=3)
    ),
    max_leaves=10,
)


def _typed(value: Any) -> Any:
    """``value`` with the type of every part beside it, so that ``1 == 1.0``
    or ``True == 1`` cannot pass for an equal decode."""
    if isinstance(value, msgspec.Struct):
        return (type(value), [_typed(v) for v in msgspec.structs.astuple(value)])
    if isinstance(value, dict):
        return (dict, [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_typed(v) for v in value])
    return (type(value), value)


def _sealed_or_refused(event: Event, seq: int) -> tuple[Any, Any]:
    """``seal_event``'s record and event, or the error it raised."""
    try:
        return seal_event(event, "s", seq=seq, prev_hash="p", timestamp=7)
    except EventDecodeError as exc:
        return exc.reason, None


@settings(max_examples=300, deadline=None)
@given(_appendable, st.sampled_from([1, 2, 9]))
def test_item3_sealed_event_is_the_records_decode(event: Event, seq: int) -> None:
    """Issue 29 item 3, R3, R10: ``seal_event`` stores ``seal``'s bytes and
    hash, and its event is ``record.decode()``, typed the same throughout."""
    record, sealed = seal_event(event, "s", seq=seq, prev_hash="p", timestamp=7)
    _, (expected,) = seal(
        "s",
        [msgspec.structs.replace(event, timestamp=7)],
        after_seq=seq - 1,
        prev_hash="p",
    )
    assert (expected.data, expected.hash, expected.type) == (
        record.data,
        record.hash,
        record.type,
    )
    assert _typed(record.decode()) == _typed(sealed)


@settings(max_examples=400, deadline=None)
@given(_values, st.sampled_from(["tool_end", "tool_start", "row", "message"]))
def test_item3_any_value_seals_as_its_decode_or_is_refused_alike(
    value: Any, where: str
) -> None:
    """Issue 29 item 3, R10: whatever a caller puts in a value field (tuples,
    sets, int keys, NaN, str subclasses), the sealed event is what decoding
    the record gives, or sealing raises the decoder's typed error."""
    event: Event
    if where == "tool_end":
        event = ToolEnded(tool_name="t", tool_call_id="c", result=value)
    elif where == "tool_start":
        event = ToolStarted(tool_name="t", tool_call_id="c", iteration=1, args=value)
    elif where == "row":
        row = MiddlewareDecision(
            middleware="m",
            moment="after-tool",
            at="tool",
            iteration=1,
            outcome="allow",
            changed=True,
            before=value,
            after=[value],
        )
        event = DecisionFiled(row=row)
    else:
        call = ToolCallRequest(id="c", name="t", args=value)
        event = MessageCommitted(
            message=Message(role="assistant", content="", tool_calls=(call,))
        )
    try:
        expected = seal(
            "s",
            [msgspec.structs.replace(event, timestamp=7)],
            after_seq=1,
            prev_hash="p",
        )[1][0]
        decoded: Any = expected.decode()
    except EventDecodeError as exc:
        decoded = exc.reason
    except (TypeError, ValueError, OverflowError) as exc:  # the encoder refused
        with pytest.raises(type(exc)):
            seal_event(event, "s", seq=2, prev_hash="p", timestamp=7)
        return
    record, sealed = _sealed_or_refused(event, 2)
    if sealed is None:
        assert decoded == record  # both refused, for the same reason
        return
    assert _typed(decoded) == _typed(sealed)


def test_g8_a_sealed_event_shares_no_container_with_its_caller() -> None:
    """G8, issue 29 item 3: mutating what the caller built after sealing
    changes neither the sealed event nor what it would decode to."""
    args = {"order": [1, {"deep": True}]}
    identity = {"user": "ann"}
    call = ToolCallRequest(id="c", name="t", args=args)
    events: list[Event] = [
        ToolStarted(tool_name="t", tool_call_id="c", iteration=1, args=args),
        TurnStarted(turn=1, identity=identity),
        MessageCommitted(
            message=Message(role="assistant", content="", tool_calls=(call,))
        ),
    ]
    sealed = [
        seal_event(e, "s", seq=i + 2, prev_hash="p", timestamp=7)
        for i, e in enumerate(events)
    ]
    args["order"][1]["deep"] = False  # type: ignore[index]
    args["more"] = 1  # type: ignore[assignment]
    identity["user"] = "bob"
    for record, event in sealed:
        assert record.decode() == event


def test_r12_the_sealed_event_names_its_session_at_every_seq() -> None:
    """R12: only seq 1 names the session in its bytes; the sealed event, as a
    reader's decode, names it at every seq."""
    event = ToolEnded(tool_name="t", tool_call_id="c", result=None)
    first, at_one = seal_event(event, "s", seq=1, prev_hash="", timestamp=7)
    later, at_two = seal_event(event, "s", seq=2, prev_hash="p", timestamp=7)
    assert (b'"session_id":"s"' in first.data, b"session_id" in later.data) == (
        True,
        False,
    )
    assert ("s", "s") == (at_one.session_id, at_two.session_id)


def test_item7_a_deep_value_is_refused_as_the_decoder_refuses_it() -> None:
    """Issue 8 item 7: a value nested past MAX_DEPTH is not sealed; the error
    is the decoder's typed ``too-deep``."""
    deep: Any = 1
    for _ in range(400):
        deep = [deep]
    with pytest.raises(EventDecodeError) as caught:
        seal_event(
            ToolEnded(tool_name="t", tool_call_id="c", result=deep),
            "s",
            seq=2,
            prev_hash="p",
            timestamp=7,
        )
    assert "too-deep" == caught.value.reason


def test_item3_an_event_refused_after_a_copy_was_set_is_the_records_decode() -> None:
    """Issue 29 item 3, R10, G8: the sealer sets an owned copy on the fresh
    stamp as it goes; a later field it cannot vouch for (a str subclass after
    the identity) leaves the stamp and gives the record's decode instead,
    plain ``str`` and all, sharing nothing with the caller."""
    identity = {"user": "ann"}
    event = TurnStarted(turn=1, identity=identity, traceparent=_Str("00-ab"))
    record, sealed = seal_event(event, "s", seq=2, prev_hash="p", timestamp=7)
    assert _typed(record.decode()) == _typed(sealed)
    assert (type(sealed.traceparent), sealed.session_id) == (str, "s")
    identity["user"] = "bob"
    assert {"user": "ann"} == sealed.identity
