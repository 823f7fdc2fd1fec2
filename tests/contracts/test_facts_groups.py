"""Consumer groups across store instances on one server (R4).

Pattern: tests parametrized over memory, Redis and Redis Cluster
         (``tests/contracts/conftest.py``), beside the shipped generic part
         (``helmlog.events.testing.facts_log``).
Role:    tests/contracts; what ``helmlog.sinks.FactsConsumer`` relies on.

Laws: R4 (a group keeps its position across store instances and processes;
each fact to one consumer, pending until acked, claimable when idle). Each
test waits for ``read_facts`` first: Redis publishes after the append.
"""

from __future__ import annotations

import pytest

from helmlog.events.testing.facts_log import keys, new_name, publish, read_all

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_r4_a_group_resumes_where_it_left_off(store_url: str) -> None:
    """R4: a group's position outlives the store that read it (a new process)."""
    if store_url == "memory://":
        pytest.skip("a memory store lives in one process")
    from helmlog.events import open_event_store

    first = open_event_store(store_url)
    group = new_name("group")
    try:
        old = await publish(first, per_session=2, sessions=2)
        await first.create_facts_group(group)
        seen = await read_all(first, group, "c")
        assert old == set(keys(seen))
        assert len(seen) == await first.ack_facts(group, seen)
    finally:
        await first.close()
    second = open_event_store(store_url)
    try:
        await second.create_facts_group(group)  # idempotent: keeps its position
        new = await publish(second, per_session=1, sessions=2)
        assert new == set(keys(await read_all(second, group, "c")))
    finally:
        await second.close()
