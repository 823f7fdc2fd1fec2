"""Recorded streams stay decodable, verifiable and fold to what they held (R10).

Schema evolution: every stream under ``tests/fixtures/streams/`` was written
by some version of helmlog; each must decode (an unknown type is reported,
never a crash), verify its hash chain over the stored bytes, fold to the state
recorded with it, and replay to a sink without appending anything (R6).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from helmlog.events import (
    DecisionFiled,
    Event,
    MiddlewareDecisionEvent,
    SessionImported,
    UnknownEvent,
    fold,
    verify_chain,
    watched,
)
from helmlog.sinks import JsonlSink, replay

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


# -- R4: a decision is stored once; its fact is a projection -----------------

# Streams of the same run shape: an older writer's (stored facts) and this one's.
SAME_RUN = [
    ("v1_refund_desk", "v3_refund_desk"),
    ("v2_imported_pause", "v3_imported_pause"),
]
FACT_FIELDS = (
    "middleware",
    "moment",
    "at",
    "iteration",
    "outcome",
    "changed",
    "phase",
    "tool_name",
    "tool_call_id",
    "why",
    "component_id",
)


def _decoded(name: str) -> list[Any]:
    return [r.decode() for r in load_records(FIXTURES / f"{name}.jsonl")]


def _what(fact: MiddlewareDecisionEvent) -> tuple[Any, ...]:
    return tuple(getattr(fact, field) for field in FACT_FIELDS)


@pytest.mark.parametrize(("legacy", "current"), SAME_RUN)
def test_r4_a_new_stream_projects_the_facts_a_legacy_stream_stored(
    legacy: str, current: str
) -> None:
    """R4: the new stream stores no fact, and its facts projection equals the
    facts the older writer stored for the same run."""
    old, new = _decoded(legacy), _decoded(current)
    assert "middleware.decision" in {e.type for e in old}
    assert "middleware.decision" not in {e.type for e in new}
    stored = [e for e in old if isinstance(e, MiddlewareDecisionEvent)]
    projected = [e for e in watched(new) if isinstance(e, MiddlewareDecisionEvent)]
    assert [_what(f) for f in stored] == [_what(f) for f in projected]
    rows = [e for e in new if isinstance(e, DecisionFiled)]
    assert [(r.seq, r.session_id) for r in rows] == [
        (f.seq, f.session_id) for f in projected
    ]
    assert fold(old).middleware_decisions == fold(new).middleware_decisions


@pytest.mark.parametrize("name", [current for _legacy, current in SAME_RUN])
def test_r12_a_new_stream_names_its_session_at_seq_one_only(name: str) -> None:
    """R12: seq 1 stores the session id, later events leave it to the stream's
    key; every event read back has it, and the chain verifies either way."""
    records = load_records(FIXTURES / f"{name}.jsonl")
    assert [True] + [False] * (len(records) - 1) == [
        "session_id" in json.loads(r.data) for r in records
    ]
    sid = records[0].decode().session_id
    assert {sid} == {r.decode().session_id for r in records}
    assert None is verify_chain(records)
    assert None is verify_chain(
        [e for e in (r.decode() for r in records) if isinstance(e, Event)]
    )


async def test_r4_a_legacy_stream_replays_one_fact_per_row_as_before() -> None:
    """R4/R6: an older writer's stream replays exactly as before: every stored
    event but the rows, so each row's stored fact once, at its own seq."""
    records = load_records(FIXTURES / "v1_refund_desk.jsonl")
    seen: list[Any] = []

    class Sink:
        def on_event(self, event: Any) -> None:
            seen.append(event)

    count = await replay(records, Sink())
    decoded = [r.decode() for r in records]
    expected = [
        msgspec.structs.replace(e, replayed=True)
        for e in decoded
        if not isinstance(e, DecisionFiled)
    ]
    assert (len(expected), expected) == (count, seen)
    rows = [e for e in decoded if isinstance(e, DecisionFiled)]
    facts = [e for e in seen if isinstance(e, MiddlewareDecisionEvent)]
    assert [r.seq + 1 for r in rows] == [f.seq for f in facts]


async def test_r4_replay_and_jsonl_get_one_fact_per_row_with_its_seq_and_no_value(
    tmp_path: Path,
) -> None:
    """R4/R16: replaying a new stream into a JSONL sink writes each row as its
    fact, at the row's seq, with no value, and no filing."""
    records = load_records(FIXTURES / "v3_refund_desk.jsonl")
    rows = [e for e in (r.decode() for r in records) if isinstance(e, DecisionFiled)]
    path = tmp_path / "facts.jsonl"
    count = await replay(records, JsonlSink(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == count == len(lines)
    facts = [line for line in lines if line["type"] == "middleware.decision"]
    assert [r.seq for r in rows] == [f["seq"] for f in facts]
    assert "decision.filed" not in {line["type"] for line in lines}
    assert [] == [f for f in facts if {"before", "after", "row"} & set(f)]
    valued = [r.row for r in rows if r.row.changed]
    assert valued  # the stream does hold values, which the facts must not
    assert [] == [
        f for f in facts if any(json.dumps(v.after) in json.dumps(f) for v in valued)
    ]
    assert all(line["replayed"] is True for line in lines)
    assert {records[0].decode().session_id} == {line["session_id"] for line in lines}
