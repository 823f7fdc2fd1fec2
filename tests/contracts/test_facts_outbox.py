"""The facts outbox on a remote store: what only Redis can break (R4).

Pattern: tests parametrized over the adapters (memory, Redis, Redis Cluster)
         of the ``FactsLog`` port, beside the shipped generic part
         (``helmlog.events.testing.facts_log``).
Role:    tests/contracts; a refusing facts shard, cursors, reads after them.

Laws: R4 (a fact whose publication failed is published later, never lost,
idempotently), R5 (a refusing facts shard never fails an append), R11 (a
deleted stream's cursor goes with ``reindex``). The writing store is closed
before another publishes: closing sends the cursor moves it noted in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from helmlog.events import StoredEvent, TurnStarted
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events.redis import (
    RedisEventStore,
    shard_keys,
    stream_key,
)
from helmlog.events.testing.facts_log import a_governed_session, fact_seqs, published
from helmlog.events.testing.support import (
    decision,
    new_session,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
def remote_kind(request: pytest.FixtureRequest) -> str:
    """A remote store's kind: one Redis, or a 3-master Redis Cluster."""
    kind: str = request.param
    return kind


def facts_key(session_id: str) -> str:
    return shard_keys(shard_of(session_id, DEFAULT_SHARDS))[0]


def cursor_key(session_id: str) -> str:
    return shard_keys(shard_of(session_id, DEFAULT_SHARDS))[3]


@pytest.fixture
def remote_url(remote_kind: str, request: pytest.FixtureRequest) -> str:
    """A clean Redis or Redis Cluster of ``remote_kind``."""
    fixture = "redis_cluster_url" if remote_kind == "cluster" else "redis_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
async def raw(remote_kind: str, remote_url: str) -> AsyncIterator[Any]:
    """A plain client on the same server or cluster, to look behind the store."""
    client: Any = (
        RedisCluster.from_url(remote_url)
        if remote_kind == "cluster"
        else aioredis.Redis.from_url(remote_url)
    )
    yield client
    await client.aclose()


async def test_r4_a_refused_fact_is_published_later_exactly_once(
    remote_url: str, raw: Any
) -> None:
    """R4/R5: facts a refusing shard dropped are published by publish_facts once
    it heals; the append never failed and the cursor never passed them."""
    sid = new_session()
    await raw.set(facts_key(sid), "not a stream")
    writer = RedisEventStore.from_url(remote_url)
    try:
        last = await a_governed_session(writer, sid)
        assert last == (await writer.head(sid))[0]
    finally:
        await writer.close()
    assert await raw.hget(cursor_key(sid), sid) is None
    # R4: the turn's close waits while its facts are unpublished.
    reader = RedisEventStore.from_url(remote_url)
    try:
        assert sid in await reader.open_turns()
        await raw.delete(facts_key(sid))
        expected = fact_seqs(sid, await reader.read(sid))
        assert 4 == await reader.publish_facts(sid)
        assert 0 == await reader.publish_facts(sid)
        assert expected == await published(reader, sid)
        assert str(last).encode() == await raw.hget(cursor_key(sid), sid)
        assert sid not in await reader.open_turns()
    finally:
        await reader.close()


async def test_r4_publish_facts_reads_only_the_stream_after_the_cursor(
    remote_url: str, raw: Any
) -> None:
    """R4: publish_facts reads the records after the cursor, not the stream."""
    sid = new_session()
    writer = RedisEventStore.from_url(remote_url)
    try:
        seq = await writer.append(sid, [TurnStarted(turn=1)], 0)
        for n in range(1, 1_251):  # 2,501 records: more than one XRANGE page
            seq = await writer.append(sid, decision(n), seq)
    finally:
        await writer.close()
    assert str(seq).encode() == await raw.hget(cursor_key(sid), sid)
    await raw.set(facts_key(sid), "not a stream")
    late = RedisEventStore.from_url(remote_url)
    try:
        tail = await late.append(sid, decision(9_999), seq)
    finally:
        await late.close()
    await raw.delete(facts_key(sid))
    reader = RedisEventStore.from_url(remote_url)
    reads: list[tuple[int, int]] = []
    # The outbox reads through the store's reader part (events/redis/reader.py).
    real_read = reader._reader.read

    async def counted(session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        records = await real_read(session_id, after_seq)
        reads.append((after_seq, len(records)))
        return records

    reader._reader.read = counted  # type: ignore[method-assign]
    try:
        assert 1 == await reader.publish_facts(sid)
        assert [(seq, 2)] == reads
        assert [tail] == await published(reader, sid)
        assert str(tail).encode() == await raw.hget(cursor_key(sid), sid)
    finally:
        await reader.close()


async def test_r11_reindex_of_a_deleted_stream_drops_its_cursor(
    remote_url: str, raw: Any
) -> None:
    """R11/R4: the facts-at hash keeps no cursor for a stream that is gone."""
    sid = new_session()
    writer = RedisEventStore.from_url(remote_url)
    try:
        await a_governed_session(writer, sid)
    finally:
        await writer.close()
    assert await raw.hget(cursor_key(sid), sid) is not None
    await raw.delete(stream_key(sid))
    store = RedisEventStore.from_url(remote_url)
    try:
        await store.reindex(sid)
    finally:
        await store.close()
    assert await raw.hget(cursor_key(sid), sid) is None
