"""Consumer-group watchers on a real Redis: killed, split, failing (R4, R16).

A ``helmlog watch`` process killed with SIGKILL mid-stream and restarted
under its name leaves a JSONL file holding every fact exactly once; two
consumers of one group split the facts (each to one, all to both); a sink
that fails is retried with backoff, logged, and nothing is acknowledged until
it succeeds, while the writers keep appending.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    MemoryEventStore,
    MiddlewareDecision,
    open_event_store,
)
from helmlog.events.lowlevel import fact_for
from helmlog.events.redis import shard_keys
from helmlog.sinks import FactsConsumer, JsonlSink
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[3]


def decision(n: int) -> list[Event]:
    """A decision row and its fact: the batch a walker files."""
    row = MiddlewareDecision(
        middleware="guard",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=False,
        tool_name="search",
        tool_call_id=f"call-{n}",
    )
    return [DecisionFiled(row=row), fact_for(row)]


async def produce(
    store: EventStore, prefix: str, sessions: int, per_session: int
) -> set[tuple[str, int]]:
    """Append decisions to ``sessions`` sessions, round-robin; return fact keys."""
    seqs = dict.fromkeys((f"{prefix}-{i}" for i in range(sessions)), 0)
    keys: set[tuple[str, int]] = set()
    for n in range(per_session):
        for sid in seqs:
            seqs[sid] = await store.append(sid, decision(n), seqs[sid])
            keys.add((sid, seqs[sid]))
    return keys


async def all_published(store: EventStore, keys: set[tuple[str, int]]) -> None:
    """Wait until every fact of ``keys`` is on the facts streams."""
    await until(
        "every fact published",
        store.read_facts,
        60.0,
        ok=lambda facts: keys <= {(f.session_id, f.seq) for f in facts},
    )


def jsonl_keys(path: Path) -> list[tuple[str, int]]:
    """The ``(session_id, seq)`` of every whole line of a JSONL sink's file.

    A line the watcher is still writing (no newline yet) is not counted: the
    probe reads the file while the watcher appends to it.
    """
    if not path.exists():
        return []
    whole = path.read_bytes().split(b"\n")[:-1]
    lines = [line for line in whole if line.strip()]
    return [
        (event["session_id"], event["seq"])
        for event in (msgspec.json.decode(line) for line in lines)
    ]


async def pending_count(raw: aioredis.Redis, group: str, shards: int = 16) -> int:
    """How many facts of ``group`` are delivered and not acknowledged."""
    total = 0
    for n in range(shards):
        key = shard_keys(n)[0]
        if await raw.exists(key):
            total += int((await raw.xpending(key, group))["pending"])
    return total


def start_watch(url: str, group: str, consumer: str, path: Path, *extra: str) -> Any:
    """A ``helmlog watch`` process writing to ``path``."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "helmlog.cli", "watch",
            "--store", url, "--group", group, "--consumer", consumer,
            "--sink", f"jsonl:{path}", *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip


class RecordingSink:
    """Keeps what it was given; fails while ``broken`` is set."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.broken = False
        self.calls = 0

    def on_event(self, event: Any) -> None:
        self.calls += 1
        if self.broken:
            raise OSError("disk full")
        self.seen.append((event.session_id, event.seq))


@pytest.mark.redis
async def test_r4_a_watcher_killed_mid_stream_and_restarted_writes_each_fact_once(
    redis_url: str, tmp_path: Path
) -> None:
    """R4: SIGKILL a ``helmlog watch`` twice mid-stream; its file holds every
    fact exactly once after a restart, and the group has nothing pending."""
    path = tmp_path / "facts.jsonl"
    store = open_event_store(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    try:
        producing = asyncio.ensure_future(produce(store, "k", 40, 50))
        for kill_at in (150, 450):
            proc = start_watch(redis_url, "audit", "w1", path, "--claim-idle", "600000")
            try:
                await until(
                    f"{kill_at} facts in the file",
                    lambda: jsonl_keys(path),
                    60.0,
                    ok=lambda got, at=kill_at: len(got) >= at,
                )
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=30)  # reaps it and closes its pipes
            assert -signal.SIGKILL == proc.returncode
        expected = await producing
        await all_published(store, expected)
        assert len(jsonl_keys(path)) < len(expected)  # both kills were mid-stream

        proc = start_watch(redis_url, "audit", "w1", path, "--idle-exit", "2")
        _out, err = proc.communicate(timeout=120)
        assert 0 == proc.returncode, err.decode()
        written = jsonl_keys(path)
        assert expected == set(written)
        assert len(expected) == len(written)  # exactly once
        assert 0 == await pending_count(raw, "audit")
    finally:
        await raw.aclose()
        await store.close()


@pytest.mark.redis
@pytest.mark.parametrize("server", ["redis_url", "redis_cluster_url"])
async def test_r4_two_consumers_of_one_group_split_the_facts(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """R4: two consumers (two stores, as two processes) share one group: each
    fact reaches one of them, and together they get all (Redis and Cluster)."""
    redis_url: str = request.getfixturevalue(server)
    writer = open_event_store(redis_url)
    stores = [open_event_store(redis_url), open_event_store(redis_url)]
    try:
        expected = await produce(writer, "t", 20, 10)
        await all_published(writer, expected)
        consumers = [
            FactsConsumer(
                store,
                "split",
                f"c{i}",
                JsonlSink(tmp_path / f"c{i}.jsonl"),
                count=2,
                block_ms=100,
                claim_idle_ms=None,
            )
            for i, store in enumerate(stores)
        ]
        counts = await asyncio.gather(*(c.run(idle_exit_s=0.5) for c in consumers))
        a, b = (jsonl_keys(tmp_path / f"c{i}.jsonl") for i in range(2))
        assert set() == set(a) & set(b)
        assert expected == set(a) | set(b)
        assert len(expected) == len(a) + len(b) == sum(counts)
        assert 0 < len(a)
        assert 0 < len(b)
        assert [len(a), len(b)] == [c.acked for c in consumers]
    finally:
        for store in (writer, *stores):
            await store.close()


@pytest.mark.redis
async def test_r4_r16_a_failing_sink_is_retried_and_nothing_is_acked_until_it_succeeds(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R4/R16: while the sink fails, its facts stay pending (none acked), the
    failure is logged, appends go on; once it recovers, each fact lands once."""
    store = open_event_store(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    sink = RecordingSink()
    sink.broken = True
    consumer = FactsConsumer(
        store, "flaky", "c1", sink, retry_s=0.01, retry_max_s=0.05, block_ms=100
    )
    try:
        first = await produce(store, "f", 3, 2)
        await all_published(store, first)
        with caplog.at_level(logging.WARNING, logger="helmlog.sinks"):
            running = asyncio.ensure_future(consumer.run())
            await until(
                "five sink calls", lambda: sink.calls, 60.0, ok=lambda n: n >= 5
            )
            # The writers are not held back by a failing watcher.
            later = await produce(store, "g", 2, 2)
            assert 0 == consumer.acked
            assert [] == sink.seen
            assert len(first) == await pending_count(raw, "flaky")
            assert any("not acknowledged" in r.getMessage() for r in caplog.records)

            sink.broken = False
            expected = first | later
            await until(
                "every fact acked",
                lambda: consumer.acked,
                60.0,
                ok=lambda n: n >= len(expected),
            )
            consumer.stop()
            await asyncio.wait_for(running, timeout=30)
        assert expected == set(sink.seen)
        assert len(expected) == len(sink.seen)
        assert 0 == await pending_count(raw, "flaky")
        assert consumer.failures >= 4
    finally:
        await raw.aclose()
        await store.close()


@pytest.mark.redis
async def test_r4_a_dead_consumers_pending_facts_are_claimed_by_another(
    redis_url: str, tmp_path: Path
) -> None:
    """R4: facts a consumer read and never acked (it died) are claimed by
    another consumer of the group once idle, and delivered."""
    store = open_event_store(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    try:
        expected = await produce(store, "d", 4, 3)
        await all_published(store, expected)
        await store.create_facts_group("claims")
        taken = []
        while batch := await store.read_facts_group("claims", "dead", count=100):
            taken.extend(batch)
        assert len(expected) == len(taken)  # read, never acked: the consumer died
        path = tmp_path / "alive.jsonl"
        alive = FactsConsumer(
            store,
            "claims",
            "alive",
            JsonlSink(path),
            claim_idle_ms=50,
            claim_every_s=0.05,
            block_ms=100,
        )
        running = asyncio.ensure_future(alive.run())
        await until(
            "every fact acked by the live consumer",
            lambda: alive.acked,
            60.0,
            ok=lambda n: n >= len(expected),
        )
        alive.stop()
        await asyncio.wait_for(running, timeout=30)
        assert expected == set(jsonl_keys(path))
        assert len(expected) == len(jsonl_keys(path))
        assert len(expected) == alive.claimed
        assert 0 == await pending_count(raw, "claims")
    finally:
        await raw.aclose()
        await store.close()


async def test_r4_a_consumer_on_the_memory_store_delivers_and_acks() -> None:
    """R4/R11: the embedded store's groups serve a FactsConsumer the same way."""
    store = MemoryEventStore()
    expected = await produce(store, "m", 3, 3)
    sink = RecordingSink()
    consumer = FactsConsumer(store, "mem", "c1", sink, block_ms=10)
    assert len(expected) == await consumer.run(idle_exit_s=0.1)
    assert expected == set(sink.seen)
    assert len(expected) == consumer.acked
    assert [] == await store.read_facts_group("mem", "c1", pending=True)
