"""The record from the command line: replay, verify, tail against real Redis (R18).

``helmlog demo --store URL`` records sessions and prints their ids; ``helmlog
verify`` exits 0 for an intact chain and 1 naming the first broken seq;
``helmlog replay`` prints the timeline (or JSON, or re-emits into a JSON-lines
sink with ``replayed=True``); ``helmlog tail`` follows decision facts, facts
only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from helmlog.cli import app
from helmlog.events.redis import stream_key

pytestmark = pytest.mark.redis

runner = CliRunner()


def _demo_session(url: str) -> str:
    result = runner.invoke(app, ["demo", "--store", url, "--json"])
    assert 0 == result.exit_code, result.output
    ids: list[str] = json.loads(result.stdout)["session_ids"]
    return ids[0]


def _rewrite_stream(
    url: str, session_id: str, edit: Callable[[dict[bytes, bytes]], None]
) -> None:
    """Rewrite a session's stream behind the store's back, as an attacker would."""
    client = redis.Redis.from_url(url)
    try:
        key = stream_key(session_id)
        entries = client.xrange(key)
        client.delete(key)
        for entry_id, fields in entries:
            edit(fields)
            client.xadd(key, fields, id=entry_id)
    finally:
        client.close()


def test_r18_verify_intact_session_exits_zero(redis_url: str) -> None:
    """``verify`` on an untouched session exits 0 and says it is intact."""
    sid = _demo_session(redis_url)
    result = runner.invoke(app, ["verify", sid, "--store", redis_url])
    assert 0 == result.exit_code, result.output
    assert result.stdout.startswith(f"intact: session {sid}")


def test_r18_verify_names_the_first_broken_seq(redis_url: str) -> None:
    """An edited event makes ``verify`` exit 1 naming its seq."""
    sid = _demo_session(redis_url)
    edited: list[int] = []

    def edit(fields: dict[bytes, bytes]) -> None:
        if not edited and b"Ana Ruiz" in fields[b"data"]:
            fields[b"data"] = fields[b"data"].replace(b"Ana Ruiz", b"Bob Ruiz")
            edited.append(int(fields[b"seq"]))

    _rewrite_stream(redis_url, sid, edit)
    assert 1 == len(edited)
    result = runner.invoke(app, ["verify", sid, "--store", redis_url])
    assert 1 == result.exit_code
    assert f"breaks at seq {edited[0]}" in result.stdout


def test_r18_verify_unknown_session_exits_one(redis_url: str) -> None:
    """A session the store lacks is reported, not verified as intact."""
    result = runner.invoke(app, ["verify", "nope", "--store", redis_url])
    assert 1 == result.exit_code


def test_r18_replay_prints_the_timeline_and_json(redis_url: str) -> None:
    """``replay`` shows turns, tool calls and each decision with its why."""
    sid = _demo_session(redis_url)
    table = runner.invoke(
        app, ["replay", sid, "--store", redis_url], env={"COLUMNS": "200"}
    )
    assert 0 == table.exit_code, table.output
    for text in (
        "turn start",
        "four-eyes @ before-tool",
        "approved by dana@ops",
        "refund-ceiling @ before-tool",
        "deny",
        "turn end",
    ):
        assert text in table.stdout
    as_json = runner.invoke(app, ["replay", sid, "--store", redis_url, "--json"])
    events = json.loads(as_json.stdout)
    assert list(range(1, len(events) + 1)) == [e["seq"] for e in events]
    assert "pause.request" in {e["type"] for e in events}


def test_r6_replay_jsonl_marks_events_replayed(redis_url: str, tmp_path: Path) -> None:
    """``replay --jsonl`` re-emits every watched event once, ``replayed=True``;
    a second replay into the same file adds nothing (the sink is idempotent)."""
    sid = _demo_session(redis_url)
    out = tmp_path / "events.jsonl"
    for _ in range(2):
        result = runner.invoke(
            app, ["replay", sid, "--store", redis_url, "--jsonl", str(out)]
        )
        assert 0 == result.exit_code, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(line["replayed"] for line in lines)
    seqs = [line["seq"] for line in lines]
    assert sorted(set(seqs)) == seqs
    assert "decision.filed" not in {line["type"] for line in lines}


def test_r4_tail_follows_facts_only(redis_url: str) -> None:
    """``tail`` prints decision facts with session and seq, never a value."""
    sid = _demo_session(redis_url)
    result = runner.invoke(
        app, ["tail", "--store", redis_url, "--from-start", "--count", "5"]
    )
    assert 0 == result.exit_code, result.output
    lines = result.stdout.splitlines()
    assert 5 == len(lines)
    assert all(line.startswith(f"{sid} #") for line in lines)
    assert (
        "ssn-scrub @ input: allow (changed) — masked a social security number"
        in lines[0]
    )
    assert "123-45-6789" not in result.stdout


class _Collector:
    """A minimal OTLP/HTTP collector on loopback: records each POST's path and body."""

    def __init__(self) -> None:
        import http.server
        import threading

        received = self.received = []  # type: ignore[var-annotated]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_r18_replay_otlp_sends_spans_and_decision_records(redis_url: str) -> None:
    """``replay --otlp URL`` exports turn and tool spans and the decision records."""
    sid = _demo_session(redis_url)
    collector = _Collector()
    try:
        result = runner.invoke(
            app, ["replay", sid, "--store", redis_url, "--otlp", collector.url]
        )
    finally:
        collector.close()
    assert 0 == result.exit_code, result.output
    paths = {path for path, _ in collector.received}
    assert {"/v1/traces", "/v1/logs"} == paths
    traces = b"".join(body for path, body in collector.received if path == "/v1/traces")
    logs = b"".join(body for path, body in collector.received if path == "/v1/logs")
    assert b"invoke_agent" in traces
    assert b"execute_tool refund" in traces
    assert b"helmlog.middleware.decision" in logs
    assert b"four-eyes" in logs
    assert b"ana.ruiz@example.com" not in traces + logs  # facts only, no values


def test_r18_verify_names_a_damaged_entry_instead_of_crashing(redis_url: str) -> None:
    """An entry that lost its hash field is a broken link at its seq, not a crash."""
    sid = _demo_session(redis_url)

    def edit(fields: dict[bytes, bytes]) -> None:
        if fields[b"seq"] == b"9":
            del fields[b"hash"]

    _rewrite_stream(redis_url, sid, edit)
    result = runner.invoke(app, ["verify", sid, "--store", redis_url])
    assert 1 == result.exit_code, result.output
    assert "breaks at seq 9" in result.stdout
