"""Fixtures the cluster tests share: a store and a raw Redis client on the
session's real ``redis-server`` (``tests/fixtures_redis.py``).

Each test module keeps its own ``cluster`` fixture: hosts are named and
detached, and each module names (and sizes, and times) its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from helmlog.events import EventStore, open_event_store


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[EventStore]:
    """The cluster's store, as a client process opens it."""
    s = open_event_store(redis_url)
    yield s
    await s.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Any]:
    """A raw Redis client, for what a test checks beside the store."""
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()
