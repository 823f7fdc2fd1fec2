"""The ``site`` fixture: memory, a real Redis, or a real Redis Cluster (site.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helmlog.events import MemoryEventStore
from tests.integration.runtime.site import KINDS, Site


@pytest.fixture(params=KINDS)
async def site(request: pytest.FixtureRequest) -> AsyncIterator[Site]:
    """Memory, a real Redis, or a real Redis Cluster, with raw hands on it."""
    if request.param == "memory":
        made = Site("memory://", MemoryEventStore())
    else:
        fixture = "redis_cluster_url" if request.param == "cluster" else "redis_url"
        made = Site(request.getfixturevalue(fixture), None)
    yield await made.open()
    await made.close()
