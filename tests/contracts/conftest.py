"""Fixtures of the contract suite: one clean store of each kind per test.

Pattern: a parametrized fixture over the adapters of the ``EventStore`` port;
         every test taking ``store``/``make_store`` runs on each of them.
Role:    tests/contracts support; the Redis kinds run on real servers started
         by ``tests/fixtures_redis.py``.
Emits:   nothing.

Laws: R11 (every adapter passes the same suite, on a real server, never a
fake).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from helmlog.events import EventStore, open_event_store

StoreFactory = Callable[..., EventStore]


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
def store_url(request: pytest.FixtureRequest) -> str:
    """The URL of a clean store of each kind: memory, Redis, Redis Cluster."""
    if request.param == "memory":
        return "memory://"
    fixture = "redis_cluster_url" if request.param == "cluster" else "redis_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
async def make_store(store_url: str) -> AsyncIterator[StoreFactory]:
    """Open stores on this test's URL; every one is closed at teardown."""
    opened: list[EventStore] = []

    def make(*, chain_key: bytes | None = None) -> EventStore:
        store = open_event_store(store_url, chain_key=chain_key)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory) -> EventStore:
    """One store of each kind, without a chain key."""
    return make_store()


@pytest.fixture
async def raw_redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain client on the test's Redis database, to look behind the store."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()
