"""The lease port (R27) on every store: memory, Redis, Redis Cluster.

A lease is held by one owner at a time, renewed by its owner, freed by its
owner only, and taken by another owner once it expired; the expiry is the
store's clock, so the test polls for it with a deadline.
"""

from __future__ import annotations

import pytest

from helmlog.events import EventStore
from helmlog.events.lowlevel import LeaseStore
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _claimed_within(
    store: LeaseStore, name: str, owner: str, ttl_s: float, within: float = 10.0
) -> None:
    await until(
        f"{owner} gets {name}",
        lambda: store.claim_lease(name, owner, ttl_s),
        within,
    )


def _leases(store: EventStore) -> LeaseStore:
    assert isinstance(store, LeaseStore)
    return store


async def test_r27_a_lease_has_one_holder_who_renews_it(store: EventStore) -> None:
    """R27: a held lease is refused to another owner and renewed by its own."""
    leases = _leases(store)

    assert await leases.claim_lease("c.shard.0-of-2", "host.0", 30.0)
    assert await leases.claim_lease("c.shard.0-of-2", "host.0", 30.0)
    assert not await leases.claim_lease("c.shard.0-of-2", "host.1", 30.0)
    assert await leases.claim_lease("c.shard.1-of-2", "host.1", 30.0)


async def test_r27_an_expired_lease_is_taken_by_another_owner(
    store: EventStore,
) -> None:
    """R27: once its term ends unrenewed, another owner takes the lease, and
    the old owner can no longer renew or release it."""
    leases = _leases(store)
    assert await leases.claim_lease("c.shard.0-of-2", "host.0", 0.2)

    await _claimed_within(leases, "c.shard.0-of-2", "host.1", 30.0)

    assert not await leases.claim_lease("c.shard.0-of-2", "host.0", 30.0)
    assert not await leases.release_lease("c.shard.0-of-2", "host.0")


async def test_r27_only_the_holder_releases_a_lease(store: EventStore) -> None:
    """R27: a release by another owner does nothing; the holder's frees it."""
    leases = _leases(store)
    assert await leases.claim_lease("c.shard.0-of-2", "host.1", 30.0)

    assert not await leases.release_lease("c.shard.0-of-2", "host.0")
    assert not await leases.claim_lease("c.shard.0-of-2", "host.0", 30.0)
    assert await leases.release_lease("c.shard.0-of-2", "host.1")
    assert await leases.claim_lease("c.shard.0-of-2", "host.0", 30.0)


async def test_r27_a_lease_of_no_time_is_refused(store: EventStore) -> None:
    """R27: a term of 0 s is a ValueError, not a lease that never held."""
    with pytest.raises(ValueError, match="more than 0 s"):
        await _leases(store).claim_lease("c.shard.0-of-2", "host.0", 0)
