"""Unit tests of the index rules: the shard function and the batch scan.

Pattern: plain unit tests of pure functions, no store.
Role:    tests/unit for ``events/_index.py``; the stores' behaviour is in
         ``tests/contracts/test_indexes.py``.
Emits:   nothing.

Laws: R11 (the shard of a session is sha256 of its id mod N, the same in
every process and release), R7/R18 (what a batch does to the open-turn and
pending-ask entries), R10 (a record of another encoding is still typed).
"""

from __future__ import annotations

import hashlib

import msgspec

from helmlog.events import (
    FatalError,
    PauseRequested,
    PauseResumed,
    PendingAsk,
    StoredEvent,
    TurnEnded,
    TurnStarted,
    event_type,
)
from helmlog.events._index import (
    IndexDelta,
    MemoryIndex,
    decode_ask,
    delta_of,
    encode_ask,
    shard_of,
)
from helmlog.events.lowlevel import seal


def test_r11_shard_of_is_sha256_mod_n_and_pinned() -> None:
    """R11: shard_of is sha256(id)[:8] big-endian mod N; pinned values never move."""
    for sid in ("s-1", "tenant:7/run{x", "ünïcode sess", ""):
        digest = hashlib.sha256(sid.encode()).digest()
        assert int.from_bytes(digest[:8], "big") % 16 == shard_of(sid, 16)
    assert [2, 1, 8, 10] == [shard_of(s, 16) for s in ("s-1", "s-2", "s-3", "a")]
    assert 0 == shard_of("anything", 1)


def test_r7_delta_of_a_batch_keeps_the_last_word() -> None:
    """R7/R18: the scan gives the last start, the close after it, the live ask."""
    ask = PauseRequested(kind="ask", tool_name="pay", tool_call_id="c2", question="ok?")
    events = [
        TurnStarted(turn=1),
        TurnEnded(turn=1, final_content=""),
        TurnStarted(turn=2),
        PauseRequested(kind="ask", tool_name="pay", tool_call_id="c1"),
        PauseResumed(kind="ask", tool_call_id="c1", approved=True),
        ask,
    ]
    _, records = seal("s", events, after_seq=10, prev_hash="")
    delta = delta_of("s", records)
    assert delta is not None
    assert (13, 0, 15) == (delta.open_at, delta.close_at, delta.resolved_at)
    assert (
        PendingAsk(
            session_id="s",
            seq=16,
            kind="ask",
            tool_name="pay",
            tool_call_id="c2",
            question="ok?",
        )
        == delta.ask
    )
    _, plain = seal(
        "s", [TurnEnded(turn=1, final_content="")], after_seq=0, prev_hash=""
    )
    assert IndexDelta(close_at=1) == delta_of("s", plain)
    _, fatal = seal("s", [FatalError(code="E")], after_seq=3, prev_hash="")
    assert IndexDelta(close_at=4) == delta_of("s", fatal)


def test_r7_records_without_index_effect_give_none() -> None:
    """R7: a batch with no turn or pause event leaves the index alone."""
    data = msgspec.json.encode({"type": "stream.llm_start", "iteration": 1})
    assert None is delta_of("s", [StoredEvent(seq=1, data=data, hash="h")])
    assert None is delta_of("s", [])


def test_r10_event_type_reads_reordered_encodings() -> None:
    """R10: a record whose type is not its first field is still typed."""
    data = msgspec.json.encode({"seq": 1, "type": "agent.turn_start", "turn": 1})
    assert "agent.turn_start" == event_type(data)
    assert "future.thing" == event_type(b'{"type":"future.thing","x":1}')
    assert "" == event_type(b"not an event")
    # A known type's name opening a longer, unknown one is not taken for it.
    _, (filed,) = seal("s", [FatalError(code="E")], after_seq=0, prev_hash="")
    assert "error.fatal" == event_type(filed.data) == event_type(filed.data)
    assert "error.fatality" == event_type(b'{"type":"error.fatality","seq":1}')


def test_r7_records_built_by_hand_are_typed_from_their_bytes() -> None:
    """R7: a record with no ``type`` (built by hand) still moves the index."""
    _, records = seal("s", [TurnStarted(turn=1)], after_seq=0, prev_hash="")
    bare = StoredEvent(seq=1, data=records[0].data, hash=records[0].hash)
    assert ("agent.turn_start", "") == (records[0].type, bare.type)
    assert IndexDelta(open_at=1) == delta_of("s", [bare])


def test_r18_ask_entries_round_trip_with_their_seq_first() -> None:
    """R18: the stored entry starts with its seq (the shard script reads it)."""
    ask = PendingAsk(
        session_id="s", seq=42, kind="ask", tool_name="t", tool_call_id="c"
    )
    entry = encode_ask(ask)
    assert entry.startswith(b"42:")
    assert ask == decode_ask(entry)


def test_r7_memory_index_rules_are_seq_guarded() -> None:
    """R7: a late close or resume never removes a newer mark or ask."""
    index = MemoryIndex()
    index.mark_open("s", 10)
    index.mark_open("s", 4)  # a stale mark never moves it back
    index.apply("s", IndexDelta(close_at=8))  # the close of an older turn
    assert {"s": 10} == index.open
    ask = PendingAsk(
        session_id="s", seq=12, kind="ask", tool_name="t", tool_call_id="c"
    )
    index.apply("s", IndexDelta(ask=ask))
    index.apply("s", IndexDelta(resolved_at=11))  # resolves an older ask
    index.apply("s", IndexDelta(close_at=20))  # paused: stays open
    assert ({"s": 10}, {"s": ask}) == (index.open, index.asks)
    index.apply("s", IndexDelta(resolved_at=13, close_at=20))
    assert ({}, {}) == (index.open, index.asks)
