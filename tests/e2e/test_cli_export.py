"""Exports from the command line reach a real collector, or fail loudly (issue 8).

``helmlog demo --otlp URL`` and ``helmlog replay --otlp/--jsonl`` send GenAI
spans and fact records to a real local OTLP/HTTP receiver; an export that
fails (a refusing or absent collector, a path that cannot be written) exits
non-zero with one line on stderr, within the exporter's bounded timeout.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helmlog.cli import app
from tests.otlp_receiver import attributes, otlp_receiver

runner = CliRunner()
FAST = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _demo_session(url: str) -> str:
    result = runner.invoke(app, ["demo", "--store", url, "--json"])
    assert 0 == result.exit_code, result.output
    ids: list[str] = json.loads(result.stdout)["session_ids"]
    return ids[0]


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert 1 == len(lines), text
    return lines[0]


def test_demo_otlp_sends_genai_spans_and_fact_records() -> None:
    """``demo --otlp URL`` exports chat, tool and agent spans and the facts."""
    with otlp_receiver() as receiver:
        result = runner.invoke(app, ["demo", "--json", "--otlp", receiver.url])
        assert 0 == result.exit_code, result.output
        names = set(receiver.span_names())
        logs = receiver.log_count()
    rows = json.loads(result.stdout)["rows"]
    assert {"chat scripted", "execute_tool refund", "invoke_agent helmlog"} <= names
    assert rows == logs


def test_issue26_demo_otlp_traces_have_one_root_and_every_record_is_traced() -> None:
    """Issue 26 item 6: what ``demo --otlp`` exports has one root per trace
    (each turn's ``invoke_agent``), no parent left unexported, the provider
    on every span, the refused call in error, and a trace and span id on
    every decision record (the input walk's too)."""
    with otlp_receiver() as receiver:
        result = runner.invoke(app, ["demo", "--json", "--otlp", receiver.url])
        assert 0 == result.exit_code, result.output
        spans, records = receiver.spans(), receiver.log_records()
    traces: dict[bytes, list[Any]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    assert json.loads(result.stdout)["turns"] == len(traces)
    for members in traces.values():
        ids = {s.span_id for s in members}
        roots = [s.name for s in members if not s.parent_span_id]
        assert ["invoke_agent helmlog"] == roots
        assert all(s.parent_span_id in ids for s in members if s.parent_span_id)
    assert {"helmlog.scripted"} == {
        attributes(s.attributes)["gen_ai.provider.name"] for s in spans
    }
    refused = [s for s in spans if attributes(s.attributes).get("error.type")]
    assert ["execute_tool refund"] == [s.name for s in refused]
    assert "denied" == attributes(refused[0].attributes)["error.type"]
    span_ids = {s.span_id: s.trace_id for s in spans}
    assert json.loads(result.stdout)["rows"] == len(records)
    assert all(span_ids.get(r.span_id) == r.trace_id for r in records)


def test_demo_otlp_to_a_refusing_collector_exits_one_with_one_line() -> None:
    """A collector answering 400 makes ``demo --otlp`` exit 1, saying so once."""
    with otlp_receiver() as receiver:
        receiver.status = 400
        result = runner.invoke(app, ["demo", "--json", "--otlp", receiver.url])
    assert 1 == result.exit_code, result.output
    assert _one_line(result.stderr).startswith("helmlog demo failed: export to")


@pytest.mark.redis
@pytest.mark.parametrize("path", ["", "/v1/traces", "/v1/traces/"])
def test_replay_otlp_accepts_the_base_and_the_traces_url(
    redis_url: str, path: str
) -> None:
    """``replay --otlp`` takes the collector's base URL or its signal URL."""
    sid = _demo_session(redis_url)
    with otlp_receiver() as receiver:
        result = runner.invoke(
            app, ["replay", sid, "--store", redis_url, "--otlp", receiver.url + path]
        )
        assert 0 == result.exit_code, result.output
        assert {"/v1/traces", "/v1/logs"} == set(receiver.posts)
        assert "chat scripted" in receiver.span_names()


@pytest.mark.redis
def test_replay_otlp_to_an_unreachable_collector_exits_two_with_one_line(
    redis_url: str,
) -> None:
    """Nothing listening: exit 2 and one line, after the bounded timeout."""
    sid = _demo_session(redis_url)
    url = f"http://127.0.0.1:{_free_port()}"
    result = runner.invoke(
        app, ["replay", sid, "--store", redis_url, "--otlp", url], env=FAST
    )
    assert 2 == result.exit_code, result.output
    line = _one_line(result.stderr)
    assert line.startswith(f"helmlog replay failed: ExportError: export to {url}")


@pytest.mark.redis
def test_replay_jsonl_into_a_missing_folder_exits_two_with_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    """``replay --jsonl`` into a path that cannot be written: exit 2, one line."""
    sid = _demo_session(redis_url)
    target = tmp_path / "nonexistent" / "x.jsonl"
    result = runner.invoke(
        app, ["replay", sid, "--store", redis_url, "--jsonl", str(target)]
    )
    assert 2 == result.exit_code, result.output
    assert _one_line(result.stderr).startswith("helmlog replay failed: ExportError")
    assert "Traceback" not in result.output


@pytest.mark.redis
def test_replay_jsonl_into_a_folder_exits_two_with_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    """A directory given as the JSON-lines path is refused in one line."""
    sid = _demo_session(redis_url)
    result = runner.invoke(
        app, ["replay", sid, "--store", redis_url, "--jsonl", str(tmp_path)]
    )
    assert 2 == result.exit_code, result.output
    assert _one_line(result.stderr).startswith("helmlog replay failed:")
