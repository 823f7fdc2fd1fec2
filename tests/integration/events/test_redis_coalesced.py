"""Reads issued together share round trips, on a real Redis (issue 29 item 1).

A turn's store reads (a session's catch-up read, a new session's head and
stream) are single commands; many sessions' reads issued in one turn of the
event loop go out as one pipeline, up to a few round trips at once, instead
of a pooled connection and a round trip each. What the server sees says so:
the connections the store opened. What each caller gets is its own reply or
its own typed error (R5), as before.
"""

from __future__ import annotations

import asyncio

import pytest

from helmlog.events import StoreError, TurnStarted
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events.redis import RedisEventStore
from helmlog.events.redis.coalesce import IN_FLIGHT
from helmlog.events.redis.keys import registry_key
from tests.fixtures_redis import RedisServer

pytestmark = [pytest.mark.redis]

SESSIONS = 60


def _connections_received(server: RedisServer) -> int:
    info = server.command("INFO", "stats").decode()
    return int(info.split("total_connections_received:")[1].split()[0])


@pytest.mark.asyncio(loop_scope="session")
async def test_issue29_concurrent_reads_share_round_trips_and_each_gets_its_stream(
    private_redis: RedisServer,
) -> None:
    """Issue 29 item 1, R11: sixty sessions read at once open at most a few
    connections (one per round trip in flight, not one per read), and each
    read returns that session's own records."""
    store = RedisEventStore.from_url(private_redis.url)
    try:
        for i in range(SESSIONS):
            await store.append(f"co-{i}", [TurnStarted(turn=i + 1)], 0)
        before = _connections_received(private_redis)
        read = await asyncio.gather(*(store.read(f"co-{i}") for i in range(SESSIONS)))
        opened = _connections_received(private_redis) - before
        assert [[1]] * SESSIONS == [[r.seq for r in rs] for rs in read]
        assert [f"co-{i}" for i in range(SESSIONS)] == [rs[0].session_id for rs in read]
        assert opened <= IN_FLIGHT
    finally:
        await store.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_r5_reads_sharing_a_round_trip_each_fail_with_a_store_error(
    private_redis: RedisServer,
) -> None:
    """R5: with the server gone, every read of a shared round trip raises a
    retryable ``StoreError`` of its own, never a driver error."""
    store = RedisEventStore.from_url(private_redis.url)
    try:
        await store.append("gone", [TurnStarted(turn=1)], 0)
        private_redis.stop()
        results = await asyncio.gather(
            *(store.read(f"gone-{i}") for i in range(8)), return_exceptions=True
        )
        assert [StoreError] * 8 == [type(r) for r in results]
        assert all(r.retryable for r in results if isinstance(r, StoreError))
    finally:
        private_redis.start()
        await store.close()


def _registered(server: RedisServer, sid: str) -> bool:
    """Whether the store-wide registry (R25) holds ``sid``, asked raw."""
    key = registry_key(shard_of(sid, DEFAULT_SHARDS))
    return server.command("SISMEMBER", key, sid) == b":1\r\n"


def _calls(server: RedisServer, command: str) -> int:
    info = server.command("INFO", "commandstats").decode()
    marker = f"cmdstat_{command}:calls="
    return int(info.split(marker)[1].split(",")[0]) if marker in info else 0


@pytest.mark.asyncio(loop_scope="session")
async def test_r25_first_appends_at_once_each_return_with_their_session_registered(
    private_redis: RedisServer,
) -> None:
    """R25, issue 29 item 1: sixty sessions' first appends at once, whose
    registry entries ride the appender's round trips: each append returns with
    its session in the store-wide registry (once), and a later append of the
    session adds nothing to it."""
    store = RedisEventStore.from_url(private_redis.url)
    try:
        sids = [f"reg-{i}" for i in range(SESSIONS)]
        await asyncio.gather(*(store.append(s, [TurnStarted(turn=1)], 0) for s in sids))
        assert [True] * SESSIONS == [_registered(private_redis, s) for s in sids]
        assert SESSIONS == _calls(private_redis, "sadd")
        await asyncio.gather(*(store.append(s, [TurnStarted(turn=2)], 1) for s in sids))
        assert SESSIONS == _calls(private_redis, "sadd")
    finally:
        await store.close()
