"""Recorded streams stay decodable, verifiable and fold to what they held (R10).

Schema evolution: every stream under ``tests/fixtures/streams/`` was written
by some version of helmlog; each must decode (an unknown type is reported,
never a crash), verify its hash chain over the stored bytes, fold to the state
recorded with it, and replay to a sink without appending anything (R6).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helmlog.events import SessionImported, UnknownEvent, fold, verify_chain
from helmlog.sinks import replay

from .streams import (
    FIXTURES,
    ReplayDivergenceError,
    chain_key_of,
    check_fold,
    load_records,
)

STREAMS = sorted(p.stem for p in FIXTURES.glob("*.jsonl"))


def test_r10_there_are_golden_streams() -> None:
    """The fixture folder holds streams (an empty folder would prove nothing)."""
    assert len(STREAMS) >= 2


@pytest.mark.parametrize("name", STREAMS)
def test_r10_golden_stream_decodes_verifies_and_folds(name: str) -> None:
    """Each recorded stream decodes, its chain verifies, and it folds as recorded."""
    records = load_records(FIXTURES / f"{name}.jsonl")
    assert verify_chain(records, chain_key_of(name)) is None
    events = [r.decode() for r in records]
    assert [r.seq for r in records] == [e.seq for e in events]
    check_fold(name, fold(events))


def test_r10_unknown_event_type_is_reported_not_a_crash() -> None:
    """An event type this reader lacks is listed in ``unknown_events`` and skipped."""
    records = load_records(FIXTURES / "v0_old_fields_and_unknown_type.jsonl")
    events = [r.decode() for r in records]
    unknown = [e for e in events if isinstance(e, UnknownEvent)]
    assert [(3, "agent.mood_changed")] == [(e.seq, e.type) for e in unknown]
    state = fold(events)
    assert ((3, "agent.mood_changed"),) == state.unknown_events
    assert ["hi", "hello"] == [m.content for m in state.history]


def test_r10_old_events_get_defaults_for_newer_fields() -> None:
    """Fields added after a stream was written decode to their defaults."""
    records = load_records(FIXTURES / "v0_old_fields_and_unknown_type.jsonl")
    turn_start = records[0].decode()
    assert (0, None) == (turn_start.base_seq, turn_start.identity)  # type: ignore[union-attr]


def test_replay_divergence_is_a_named_error() -> None:
    """A stream that no longer folds as recorded raises ``ReplayDivergenceError``."""
    records = load_records(FIXTURES / "v1_refund_desk.jsonl")
    with pytest.raises(ReplayDivergenceError, match="v1_refund_desk"):
        check_fold("v1_refund_desk", fold(r.decode() for r in records[:-1]))


async def test_r6_replay_marks_events_and_never_changes_the_record(
    tmp_path: Path,
) -> None:
    """Replay delivers each event once, ``replayed=True``; bytes unchanged."""
    records = load_records(FIXTURES / "v1_refund_desk.jsonl")
    before = [(r.seq, r.data, r.hash) for r in records]
    seen: list[object] = []

    class Sink:
        def on_event(self, event: object) -> None:
            seen.append(event)

    count = await replay(records, Sink())
    assert count == len(seen)
    assert all(getattr(e, "replayed", False) for e in seen)
    assert "decision.filed" not in {getattr(e, "type", "") for e in seen}
    assert before == [(r.seq, r.data, r.hash) for r in records]
    assert verify_chain(records) is None


def test_r9_an_imported_stream_starts_with_its_import_and_folds_its_pause() -> None:
    """R9: a stream seeded from a pause checkpoint opens with ``session.imported``
    (its digest, kind and seq where it was taken) and folds a pending pause."""
    records = load_records(FIXTURES / "v2_imported_pause.jsonl")
    first = records[0].decode()
    assert isinstance(first, SessionImported)
    assert ("pause", 11, 64) == (
        first.kind,
        first.checkpoint_seq,
        len(first.checkpoint_digest),
    )
    state = fold(r.decode() for r in records)
    assert state.pending is not None
    assert ({11}, "c2") == (set(state.resolved_pauses), state.pending.tool_call_id)
