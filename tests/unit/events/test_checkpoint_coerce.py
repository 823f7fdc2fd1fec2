"""``Checkpoint.coerce``: the one rule for "a checkpoint or its JSON" (R14, issue 9);
anything else is ``CheckpointError("malformed")``, whatever text it is (R14).

``Agent.run(continue_from=...)``, ``resume`` and the cluster's views accept
the same things and refuse the same things, because they all call it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helmlog.events import Checkpoint, CheckpointError

CP = Checkpoint(kind="conversation", session_id="s1", seq=4)


def test_r14_a_checkpoint_its_json_text_and_its_json_bytes_are_one_checkpoint() -> None:
    """R14: the value as given, or read back equal from ``to_json()``."""
    text = CP.to_json()
    assert [CP, CP, CP] == [
        Checkpoint.coerce(CP),
        Checkpoint.coerce(text),
        Checkpoint.coerce(text.encode()),
    ]
    assert Checkpoint.coerce(CP) is CP


@pytest.mark.parametrize("value", ["not json", 42, None, {"kind": "pause"}])
def test_r14_anything_else_is_a_malformed_checkpoint(value: object) -> None:
    """R14: text that is not a checkpoint, or a value of another type, is
    ``CheckpointError("malformed")``."""
    with pytest.raises(CheckpointError) as raised:
        Checkpoint.coerce(value)
    assert "malformed" == raised.value.reason


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_near_checkpoints = st.fixed_dictionaries(
    {"kind": st.sampled_from(["pause", "conversation"]), "session_id": st.text()},
    optional={"seq": _json, "history": _json, "version": _json, "mac": _json},
).map(json.dumps)
_garbage = st.one_of(
    st.text(),
    st.binary(),
    _json.map(json.dumps),
    _near_checkpoints,
    # Text a str can hold but UTF-8 cannot: lone surrogates, bare or quoted.
    st.text(st.characters(categories=["Cs"]), min_size=1),
    st.text(st.characters(categories=["Cs"]), min_size=1).map(
        lambda s: '{"kind":"pause","session_id":"' + s + '","seq":1}'
    ),
)


def _is_checkpoint(text: str | bytes) -> bool:
    try:
        value = json.loads(text)
    except (ValueError, UnicodeError):
        return False
    return (
        isinstance(value, dict)
        and value.get("kind") in ("pause", "conversation")
        and isinstance(value.get("session_id"), str)
        and type(value.get("seq")) is int
        and value.get("version", 1) == 1
        and isinstance(value.get("history", []), list)
        and not value.get("history")
        and isinstance(value.get("mac"), str | None)
    )


@given(_garbage)
def test_r14_text_that_is_not_a_checkpoint_is_malformed(text: str | bytes) -> None:
    """R14: "text that is not a checkpoint raises `CheckpointError(...malformed)`"."""
    if _is_checkpoint(text):
        return
    with pytest.raises(CheckpointError) as caught:
        Checkpoint.from_json(text)
    assert "malformed" == caught.value.reason
