"""JsonlSink: one JSON line per event, each seq once, failures typed (R16, R4).

A line spells out its whole event (defaults included, ``type`` first); a
``(session_id, seq)`` the file holds is skipped, across a restart too; a path
that cannot be written is an ``ExportError`` when the sink is built, and a
write that fails later is one from ``on_event`` that leaves the event
unwritten, so its redelivery writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helmlog.events import PauseResumed, StreamToken, TurnStarted
from helmlog.sinks import ExportError, JsonlSink


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_r16_a_line_is_the_whole_event_type_first_defaults_included(
    tmp_path: Path,
) -> None:
    """R16: each line is one event, ``type`` first, every field spelled out."""
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    sink.on_event(TurnStarted(session_id="s", seq=1, timestamp=10, turn=1))
    (line,) = _lines(path)
    assert "type" == next(iter(line))
    expected = {
        "type": "agent.turn_start",
        "session_id": "s",
        "seq": 1,
        "timestamp": 10,
        "replayed": False,
        "turn": 1,
    }
    assert expected == {k: line[k] for k in expected}


def test_r4_a_seen_session_and_seq_is_skipped_and_a_token_always_written(
    tmp_path: Path,
) -> None:
    """R4: a repeat of ``(session_id, seq)`` writes nothing; tokens have no seq."""
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    first = TurnStarted(session_id="s", seq=1, timestamp=10, turn=1)
    sink.on_event(first)
    sink.on_event(first)
    sink.on_event(TurnStarted(session_id="other", seq=1, timestamp=10, turn=1))
    sink.on_event(StreamToken(session_id="s", content="a"))
    sink.on_event(StreamToken(session_id="s", content="a"))
    expected = [("s", 1), ("other", 1), ("s", None), ("s", None)]
    assert expected == [(x["session_id"], x["seq"]) for x in _lines(path)]


def test_r4_a_restarted_sink_skips_what_its_file_already_holds(tmp_path: Path) -> None:
    """R4: the file is the sink's memory: a new sink on it writes only new seqs."""
    path = tmp_path / "events.jsonl"
    JsonlSink(path).on_event(TurnStarted(session_id="s", seq=1, timestamp=10, turn=1))
    again = JsonlSink(path)
    again.on_event(TurnStarted(session_id="s", seq=1, timestamp=10, turn=1))
    again.on_event(
        PauseResumed(session_id="s", seq=2, timestamp=11, kind="ask", tool_call_id="c")
    )
    assert [1, 2] == [x["seq"] for x in _lines(path)]


@pytest.mark.parametrize("where", ["a missing folder", "a folder"])
def test_a_path_that_cannot_be_written_is_an_export_error_when_built(
    tmp_path: Path, where: str
) -> None:
    """The sink fails when built, typed and naming the path, before any run."""
    path = tmp_path / "missing" / "x.jsonl" if where == "a missing folder" else tmp_path
    with pytest.raises(ExportError) as raised:
        JsonlSink(path)
    assert (str(path), "ERR_EXPORT", True) == (
        raised.value.target,
        raised.value.code,
        raised.value.retryable,
    )


def test_r4_a_failed_write_is_an_export_error_and_its_redelivery_writes_it(
    tmp_path: Path,
) -> None:
    """A write that fails raises ``ExportError``; the event is not counted as
    written, so delivering it again once the path is writable writes it."""
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    event = TurnStarted(session_id="s", seq=1, timestamp=10, turn=1)
    path.unlink()
    path.mkdir()
    with pytest.raises(ExportError) as raised:
        sink.on_event(event)
    assert str(path) == raised.value.target
    path.rmdir()
    sink.on_event(event)
    assert [1] == [x["seq"] for x in _lines(path)]


def test_r4_a_line_cut_short_by_a_killed_writer_is_cut_off_on_open(
    tmp_path: Path,
) -> None:
    """R4: a torn last line goes; its event is written whole when redelivered."""
    path = tmp_path / "facts.jsonl"
    first = JsonlSink(path)
    whole = TurnStarted(session_id="s", seq=1, timestamp=10, turn=1)
    torn = TurnStarted(session_id="s", seq=2, timestamp=11, turn=2)
    first.on_event(whole)
    path.write_bytes(path.read_bytes() + b'{"type":"agent.turn_start","sess')
    again = JsonlSink(path)
    again.on_event(whole)  # already written: nothing
    again.on_event(torn)
    assert [("s", 1), ("s", 2)] == [(x["session_id"], x["seq"]) for x in _lines(path)]


def test_a_file_holding_a_line_that_is_not_an_event_is_an_export_error(
    tmp_path: Path,
) -> None:
    """Bad input: a damaged line in the middle names its number, typed."""
    path = tmp_path / "facts.jsonl"
    path.write_bytes(b"not json\n")
    with pytest.raises(ExportError, match="line 1 is not a JSON event"):
        JsonlSink(path)
