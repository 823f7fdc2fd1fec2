"""ConsoleSink: one line per event on stdout, each seq once, failures typed (R16, R4).

A line is the seq (``-`` for a transient token), the type, ``(replayed)`` for a
replayed event, and the event's fields without its envelope.
"""

from __future__ import annotations

import io

import pytest

from helmlog.events import StreamToken, TurnStarted
from helmlog.sinks import ConsoleSink, ExportError


def test_r16_one_line_per_event_seq_type_mark_and_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R16: ``<seq> <type>[ (replayed)] <fields>``, the envelope left out."""
    sink = ConsoleSink()
    sink.on_event(TurnStarted(session_id="s", seq=1, timestamp=10, turn=1))
    sink.on_event(
        TurnStarted(session_id="s", seq=2, timestamp=11, turn=2, replayed=True)
    )
    sink.on_event(StreamToken(session_id="s", content="hi"))
    expected = [
        "    1 agent.turn_start {'turn': 1}",
        "    2 agent.turn_start (replayed) {'turn': 2}",
        "    - stream.token {'content': 'hi'}",
    ]
    assert expected == capsys.readouterr().out.splitlines()


def test_r4_a_seen_session_and_seq_prints_nothing() -> None:
    """R4: a repeat of ``(session_id, seq)`` prints nothing more."""
    out = io.StringIO()
    sink = ConsoleSink(out)
    event = TurnStarted(session_id="s", seq=1, timestamp=10, turn=1)
    sink.on_event(event)
    sink.on_event(event)
    assert 1 == len(out.getvalue().splitlines())


def test_r4_a_closed_console_is_an_export_error_and_the_event_stays_unprinted() -> None:
    """A stream that cannot be written raises ``ExportError``; the event is
    printed on its redelivery to a working stream."""
    closed = io.StringIO()
    closed.close()
    sink = ConsoleSink(closed)
    event = TurnStarted(session_id="s", seq=1, timestamp=10, turn=1)
    with pytest.raises(ExportError) as raised:
        sink.on_event(event)
    assert "the console" == raised.value.target
    out = io.StringIO()
    sink._stream = out  # the same sink, its console back
    sink.on_event(event)
    assert 1 == len(out.getvalue().splitlines())
