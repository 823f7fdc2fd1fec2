"""A host's leases on its cluster's shards (R27), on the memory lease table.

Two hosts' ``ShardLeases`` share one lease table and one fake clock; the test
moves the clock and runs rounds by hand: one host stops ticking (it is
stopped), the other takes its shard over once its lease expired, and the
stopped one, waking, finds it lost its lease.
"""

from __future__ import annotations

import asyncio

from helmlog.actors._lease import ShardLeases, lease_name
from helmlog.events._lease import MemoryLeases
from helmlog.events.lowlevel import LeaseStore

LEASE_S = 30.0


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Table:
    """The memory store's lease table on the test's clock (a LeaseStore)."""

    def __init__(self, clock: _Clock) -> None:
        self._leases = MemoryLeases(clock)

    async def claim_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        return self._leases.claim(name, owner, ttl_s)

    async def release_lease(self, name: str, owner: str) -> bool:
        return self._leases.release(name, owner)


class _Host:
    """What a host hands its leases: a takeover that records, a loss count."""

    def __init__(self, table: _Table, clock: _Clock, index: int) -> None:
        self.taken: list[int] = []
        self.dropped = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.leases = ShardLeases(
            lambda: table,
            cluster="c",
            index=index,
            n_hosts=2,
            lease_s=LEASE_S,
            take_over=self._take_over,
            on_lost=self._lost,
            clock=clock,
        )

    async def _take_over(self, shard: int) -> int:
        self.taken.append(shard)
        await self.gate.wait()
        return 3

    def _lost(self) -> None:
        self.dropped += 1


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _pair() -> tuple[_Clock, _Table, _Host, _Host]:
    clock = _Clock()
    table = _Table(clock)
    assert isinstance(table, LeaseStore)
    return clock, table, _Host(table, clock, 0), _Host(table, clock, 1)


async def test_r27_a_host_holds_its_own_lease_and_takes_nothing_in_its_first_term() -> (
    None
):
    """R27: a host renews its own lease; a shard nobody holds yet is not a
    dead host's shard within the taker's first lease term."""
    clock, table, _h0, h1 = _pair()

    await h1.leases.tick()
    clock.now += LEASE_S / 2
    await h1.leases.tick()
    await _settle()

    assert h1.leases.holds()
    assert [] == h1.taken
    assert not await table.claim_lease(lease_name("c", 1, 2), "c.host.0", LEASE_S)


async def test_r27_an_expired_shard_is_taken_over_and_its_lease_given_back() -> None:
    """R27: host 1 takes shard 0 once host 0 stopped renewing for a term,
    finishes its turns, and gives the lease back; host 0, waking, finds its
    lease lapsed, drops its idle sessions and holds its lease again."""
    clock, table, h0, h1 = _pair()
    await h0.leases.tick()
    await h1.leases.tick()
    for _ in range(4):  # host 0 is stopped; host 1 renews every third
        clock.now += LEASE_S / 3
        await h1.leases.tick()
    await _settle()

    assert [0] == h1.taken
    assert 3 == h1.leases.finished
    # Given back: host 0's lease is free again.
    assert await table.claim_lease(lease_name("c", 0, 2), "c.host.9", 0.001)
    clock.now += 1

    await h0.leases.tick()

    assert 1 == h0.dropped
    assert h0.leases.holds()
    assert 1 == h0.leases.lost


async def test_r27_a_host_that_wakes_mid_takeover_waits_for_its_lease() -> None:
    """R27: while the taker holds its shard (renewing it), a woken host's
    claim fails and it counts the loss once; after the takeover it renews."""
    clock, _table, h0, h1 = _pair()
    h1.gate.clear()  # the takeover is still finishing turns
    await h0.leases.tick()
    await h1.leases.tick()
    for _ in range(4):
        clock.now += LEASE_S / 3
        await h1.leases.tick()
    await _settle()
    assert [0] == h1.taken

    await h0.leases.tick()
    clock.now += LEASE_S / 3
    await h1.leases.tick()  # renews the lease it is taking over
    await h0.leases.tick()

    assert not h0.leases.holds()
    assert 1 == h0.dropped
    h1.gate.set()
    await _settle()
    await h0.leases.tick()
    assert h0.leases.holds()
    assert 1 == h0.dropped
    assert [0] == h1.taken
