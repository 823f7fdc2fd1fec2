"""Codecs round-trip every event type, in JSON and msgpack (R12, R10).

Strategies are derived from the event classes themselves (``msgspec.inspect``),
so an event type or field added later is covered without editing this file.
"""

from __future__ import annotations

from typing import Any

import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog.events import (
    EVENT_CLASSES,
    TRANSIENT_TYPES,
    Event,
    MiddlewareDecisionEvent,
    decode_event,
    encode_event,
    fold,
    verify_chain,
)
from helmlog.events.lowlevel import decode_msgpack, encode_msgpack, seal

_text = st.text(max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3)
    ),
    max_leaves=8,
)


def _strategy(t: mi.Type) -> st.SearchStrategy[Any]:
    if isinstance(t, mi.StrType):
        return _text
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        return st.integers(0, 2**40)
    if isinstance(t, mi.FloatType):
        return st.floats(-1e9, 1e9, allow_nan=False)
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.AnyType):
        return _json
    if isinstance(t, mi.UnionType):
        return st.one_of([_strategy(x) for x in t.types])
    if isinstance(t, mi.DictType):
        return st.dictionaries(
            _strategy(t.key_type), _strategy(t.value_type), max_size=3
        )
    if isinstance(t, mi.VarTupleType):
        return st.lists(_strategy(t.item_type), max_size=2).map(tuple)
    if isinstance(t, mi.StructType):
        fields = {
            f.name: _strategy(f.type)
            for f in t.fields
            if f.name not in {"session_id", "seq", "timestamp", "prev_hash", "replayed"}
        }
        return st.builds(t.cls, **fields)
    raise AssertionError(f"no strategy for {t!r}: extend the test")


_events = st.one_of([_strategy(mi.type_info(cls)) for cls in EVENT_CLASSES])
_appendable = st.one_of(
    [
        _strategy(mi.type_info(cls))
        for cls in EVENT_CLASSES
        if cls.type not in TRANSIENT_TYPES
    ]
)


@settings(max_examples=300, deadline=None)
@given(_events)
def test_r12_every_event_round_trips_json_and_msgpack(event: Event) -> None:
    """R12: each event decodes from JSON and msgpack into an equal typed event."""
    assert event == decode_event(encode_event(event))
    assert event == decode_msgpack(encode_msgpack(event))


@settings(max_examples=100, deadline=None)
@given(st.lists(_appendable, max_size=12))
def test_r1_r3_sealed_streams_verify_and_fold_purely(events: list[Event]) -> None:
    """R1/R3: any sealed stream verifies, and folding it twice gives equal states."""
    stamped, records = seal("s", events, after_seq=0, prev_hash="")
    assert verify_chain(records) is None
    decoded = [r.decode() for r in records]
    assert stamped == decoded
    assert fold(decoded) == fold(r.decode() for r in records)


def test_g49_the_fact_has_no_value_field_by_schema() -> None:
    """G49: the decision fact's schema has no before/after or any value field."""
    fields = set(MiddlewareDecisionEvent.__struct_fields__)
    assert not fields & {"before", "after", "args", "result", "content", "detail"}


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.type)
def test_r10_added_fields_have_defaults(cls: type[Event]) -> None:
    """R10: every event decodes from its envelope plus required fields only."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    required = [f.name for f in info.fields if f.required]
    # Schema evolution adds fields with defaults; the required set is the
    # original one and must never grow (pinned per type below).
    assert required == REQUIRED[cls.type]


REQUIRED: dict[str, list[str]] = {
    "decision.filed": ["row"],
    "middleware.decision": [
        "middleware",
        "moment",
        "at",
        "iteration",
        "outcome",
        "changed",
    ],
    "agent.turn_start": ["turn"],
    "agent.turn_end": ["turn", "final_content"],
    "stream.llm_start": ["iteration", "model"],
    "stream.llm_end": ["iteration", "content"],
    "stream.token": ["content"],
    "stream.tool_start": ["tool_name", "tool_call_id", "iteration"],
    "stream.tool_end": ["tool_name", "tool_call_id"],
    "pause.request": ["kind", "tool_name", "tool_call_id"],
    "pause.resume": ["kind", "tool_call_id"],
    "error.fatal": ["code"],
    "message.committed": ["message"],
    "output.rejected": ["iteration", "attempt", "error"],
    "proxy.call_started": ["request_id", "tool"],
    "proxy.call_finished": [
        "request_id",
        "route",
        "tool",
        "outcome",
        "input_digest",
        "output_digest",
    ],
    "proxy.session_closed": ["manifest"],
    "conversation.seeded": [],
    "session.imported": ["kind", "checkpoint_digest"],
    "tool.dispatched": ["tool_name", "tool_call_id"],
    "tool.outcome_unknown": ["tool_name", "tool_call_id"],
    "window.compacted": [
        "strategy",
        "iteration",
        "keep_recent_turns",
        "removed_message_count",
        "window_chars_before",
        "window_chars_after",
        "turns_before",
        "turns_after",
    ],
    # Issue 30: a signed head is its signed note, whole.
    "session.head_signed": ["note"],
}


def test_r12_a_transient_event_is_never_sealed() -> None:
    """R12: ``stream.token`` is transient: sealing one for a store is refused."""
    from helmlog.events import StreamToken

    with pytest.raises(ValueError, match="transient"):
        seal("s", [StreamToken(content="hi")], after_seq=0, prev_hash="")
