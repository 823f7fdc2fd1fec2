"""``helmlog watch`` delivers facts through a consumer group, on a real Redis (R4).

A watch writes every fact to its JSONL file and a second run of the same
group delivers only what came after; ``otlp:URL`` exports each fact to a
collector before acknowledging it, and a collector that refuses leaves the
facts pending until it takes them; an unknown sink exits 2 with one line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from helmlog.cli import app
from helmlog.events import (
    DecisionFiled,
    EventStore,
    MiddlewareDecision,
    open_event_store,
)
from helmlog.events.lowlevel import fact_for
from helmlog.sinks import FactsConsumer, OtlpFactsSink
from tests.otlp_receiver import otlp_receiver
from tests.polling import until

runner = CliRunner()


async def _produce(
    store: EventStore, prefix: str, sessions: int
) -> set[tuple[str, int]]:
    """One decision in each of ``sessions`` new sessions; wait until published."""
    row = MiddlewareDecision(
        middleware="guard",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=False,
    )
    keys = set()
    for i in range(sessions):
        seq = await store.append(
            f"{prefix}-{i}", [DecisionFiled(row=row), fact_for(row)], 0
        )
        keys.add((f"{prefix}-{i}", seq))
    await until(
        "the facts published",
        store.read_facts,
        10,
        ok=lambda facts: keys <= {(f.session_id, f.seq) for f in facts},
    )
    return keys


def produce(url: str, prefix: str, sessions: int) -> set[tuple[str, int]]:
    async def go() -> set[tuple[str, int]]:
        store = open_event_store(url)
        try:
            return await _produce(store, prefix, sessions)
        finally:
            await store.close()

    return asyncio.run(go())


def jsonl_keys(path: Path) -> list[tuple[str, int]]:
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    return [(e["session_id"], e["seq"]) for e in map(msgspec.json.decode, lines)]


@pytest.mark.redis
def test_r4_watch_writes_each_fact_and_resumes_where_the_group_left_off(
    redis_url: str, tmp_path: Path
) -> None:
    """R4: ``watch --sink jsonl:PATH`` writes every fact; the group's next run
    delivers only the facts published after it."""
    path = tmp_path / "facts.jsonl"
    first = produce(redis_url, "w", 12)
    args = ["watch", "--store", redis_url, "--group", "ops", "--consumer", "c1"]
    args += ["--sink", f"jsonl:{path}", "--idle-exit", "0.5"]
    result = runner.invoke(app, args)
    assert 0 == result.exit_code, result.output
    assert first == set(jsonl_keys(path))
    assert "watched 12 facts as c1 of ops" in result.output

    later = produce(redis_url, "x", 5)
    result = runner.invoke(app, args)
    assert 0 == result.exit_code, result.output
    assert "watched 5 facts as c1 of ops" in result.output
    assert first | later == set(jsonl_keys(path))
    assert 17 == len(jsonl_keys(path))


def test_r4_watch_with_an_unknown_sink_exits_2_with_one_line() -> None:
    """R4: a sink spec helmlog does not know is refused before anything is read."""
    result = runner.invoke(app, ["watch", "--group", "g", "--sink", "kafka:topic"])
    assert 2 == result.exit_code
    assert 1 == len(result.output.strip().splitlines())
    assert "unknown sink 'kafka:topic'" in result.output


def test_r4_watch_to_an_unwritable_jsonl_path_exits_2() -> None:
    """R4: a JSONL path that cannot be written fails at start, with one line."""
    result = runner.invoke(
        app, ["watch", "--group", "g", "--sink", "jsonl:/nonexistent/dir/x.jsonl"]
    )
    assert 2 == result.exit_code
    assert "cannot write /nonexistent/dir/x.jsonl" in result.output


@pytest.mark.redis
def test_r4_watch_exports_each_fact_to_an_otlp_collector(redis_url: str) -> None:
    """R4: ``--sink otlp:URL`` sends one decision log record per fact."""
    produce(redis_url, "o", 6)
    with otlp_receiver() as receiver:
        result = runner.invoke(
            app,
            [
                "watch", "--store", redis_url, "--group", "otel",
                "--sink", f"otlp:{receiver.url}/v1/logs", "--idle-exit", "0.5",
            ],
        )  # fmt: skip
        assert 0 == result.exit_code, result.output
        assert 6 == receiver.log_count()


@pytest.mark.redis
def test_r4_r16_a_refusing_collector_keeps_facts_pending_until_it_takes_them(
    redis_url: str,
) -> None:
    """R4/R16: while the collector refuses, nothing is acked; then each fact is."""

    async def go() -> tuple[int, int, int]:
        store = open_event_store(redis_url)
        with otlp_receiver() as receiver:
            receiver.status = 400
            sink = OtlpFactsSink(receiver.url, timeout_s=2)
            consumer = FactsConsumer(
                store, "otel", "c1", sink, retry_s=0.01, retry_max_s=0.05
            )
            try:
                expected = await _produce(store, "r", 3)
                running = asyncio.ensure_future(consumer.run())
                await until("the sink retried", lambda: consumer.failures >= 3, 30)
                acked_while_refused = consumer.acked
                receiver.status = 200
                await until(
                    "the facts acked",
                    lambda: consumer.acked >= len(expected),
                    30,
                )
                consumer.stop()
                await asyncio.wait_for(running, timeout=30)
                return acked_while_refused, consumer.acked, len(expected)
            finally:
                sink.close()
                await store.close()

    refused, acked, expected = asyncio.run(go())
    assert 0 == refused
    assert expected == acked
