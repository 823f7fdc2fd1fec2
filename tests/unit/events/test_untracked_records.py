"""The records a resident session holds stay out of the cycle collector's view.

Pattern: build each record as the runtime does and ask the collector whether
         it tracks the instance (``gc.is_tracked``).
Role:    unit tests of the events layer's Struct configuration.
Emits:   nothing.

Laws: issue 29 item 2 (fewer tracked objects per resident session: each is
walked by every full collection until frozen); R10 (``gc=False`` changes no
byte: the encoding is the same).
"""

from __future__ import annotations

import gc

import msgspec

from helmlog.events import Checkpoint, Message


def _checkpoint() -> Checkpoint:
    history = (
        Message(role="user", content="Look order 1 up."),
        Message(role="assistant", content="Done."),
    )
    return Checkpoint(kind="conversation", session_id="s", seq=9, history=history)


def test_a_checkpoint_is_not_tracked_by_the_collector() -> None:
    """Issue 29 item 2: every resident session holds its checkpoint; frozen
    and made of values, it is never walked by a collection."""
    checkpoint = _checkpoint()
    assert (False, False) == (
        gc.is_tracked(checkpoint),
        gc.is_tracked(checkpoint.history[0]),
    )


def test_an_untracked_checkpoint_round_trips_and_encodes_as_before() -> None:
    """R14/R10: leaving the collector's view changes neither the JSON round
    trip nor the bytes (field order and omitted defaults as stored)."""
    checkpoint = _checkpoint()
    assert checkpoint == Checkpoint.from_json(checkpoint.to_json())
    assert (
        b'{"kind":"conversation","session_id":"s","seq":9,"history":'
        b'[{"role":"user","content":"Look order 1 up."},'
        b'{"role":"assistant","content":"Done."}],'
        b'"original_input":null,"tool_name":null,"tool_call_id":null,'
        b'"args_digest":null,"policy_version":null,"mac":null,"version":1}'
    ) == msgspec.json.encode(checkpoint)
