"""``Checkpoint.coerce``: the one rule for "a checkpoint or its JSON" (R14, issue 9).

``Agent.run(continue_from=...)``, ``resume`` and the cluster's views accept
the same things and refuse the same things, because they all call it.
"""

from __future__ import annotations

import pytest

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
