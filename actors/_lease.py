"""A host's leases on the shards of open turns: its own renewed, expired ones taken.

Pattern: leader leases per shard (Bigtable's tablet servers on Chubby): every
         third of ``lease_s`` a host renews its own shard's lease and claims
         any expired one; a won claim finishes that shard's open turns (R7).
Role:    actors layer; each ``SessionHost`` runs one ``ShardLeases``; the
         store keeps the leases (``events.lowlevel.LeaseStore``).

Laws: R7, R8, R20, R22, R27.
Why the lease is not the fence: a stopped process cannot know it lost its
lease; the store's seq check stops it. A host that lost its lease drops its
idle sessions (their caches may be behind); it takes no other shard until it
held its own for one ``lease_s`` (hosts start together).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from helmlog.events import StoreError
from helmlog.events.lowlevel import LeaseStore

log = logging.getLogger("helmlog.actors")

# How long a host's lease lasts unless renewed (R27): the longest a stopped
# host keeps its open turns from being finished by another host.
DEFAULT_LEASE_S: Final = 30.0
# A lease is renewed (and expired ones looked for) this many times per term.
RENEWALS_PER_LEASE: Final = 3


def lease_name(cluster: str, index: int, n_hosts: int) -> str:
    """The lease of shard ``index`` of ``n_hosts`` in cluster ``cluster``."""
    return f"{cluster}.shard.{index}-of-{n_hosts}"


class ShardLeases:
    """One host's view of the leases of its cluster's shards.

    Args:
        store: the host's store (opened lazily by the host); one that is
            not a ``LeaseStore`` means no leases (and no takeover).
        cluster: the cluster's name; with ``n_hosts`` it names the leases.
        index: this host's index (its own shard).
        n_hosts: how many hosts (shards) the cluster has.
        lease_s: how long a lease lasts unless renewed.
        take_over: finishes the open turns of the shard it is given (the
            host's ``finish_open_turns``); returns how many it finished.
        on_lost: called when this host finds it no longer held its lease.
        clock: monotonic seconds (it keeps running while a process is
            stopped, so a host that wakes sees how long it was gone).
    """

    def __init__(
        self,
        store: Callable[[], object],
        *,
        cluster: str,
        index: int,
        n_hosts: int,
        lease_s: float,
        take_over: Callable[[int], Awaitable[int]],
        on_lost: Callable[[], object],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, not {lease_s!r}")
        if not 0 <= index < n_hosts:
            raise ValueError(f"host index {index} is not one of {n_hosts} hosts")
        self._store = store
        self._cluster = cluster
        self._index = index
        self._n_hosts = n_hosts
        self.lease_s = lease_s
        self._take_over = take_over
        self._on_lost = on_lost
        self._clock = clock
        self.owner = f"{cluster}.host.{index}"
        self._started = clock()
        # When the lease was last renewed (the clock before the claim);
        # None while this host does not hold it.
        self._renewed: float | None = None
        self._taking: dict[int, asyncio.Task[None]] = {}
        self.lost = 0
        self.takeovers = 0
        self.finished = 0

    @property
    def renew_s(self) -> float:
        """How often the leases are renewed and looked at."""
        return self.lease_s / RENEWALS_PER_LEASE

    def holds(self) -> bool:
        """Whether this host holds its own lease now (as far as it knows)."""
        renewed = self._renewed
        return renewed is not None and self._clock() - renewed < self.lease_s

    async def run(self) -> None:
        """Renew and look every ``renew_s``, until cancelled (the host closes)."""
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.renew_s)
        finally:
            for task in list(self._taking.values()):
                task.cancel()

    async def tick(self) -> None:
        """One round: renew this host's lease, then claim expired ones."""
        store = self._store()
        if not isinstance(store, LeaseStore):
            return  # a store without leases: no takeover, failover still runs
        now = self._clock()
        if self._renewed is not None and now - self._renewed >= self.lease_s:
            self._lose("its lease lapsed while it did not run or reach the store")
        name = lease_name(self._cluster, self._index, self._n_hosts)
        try:
            won = await store.claim_lease(name, self.owner, self.lease_s)
        except StoreError as exc:
            log.warning("lease: host %d cannot renew its lease: %s", self._index, exc)
            return
        if won:
            self._renewed = now
        elif self._renewed is not None:
            self._lose("another host took its shard over")
        if self.holds() and now - self._started >= self.lease_s:
            await self._claim_expired(store)

    def _lose(self, why: str) -> None:
        self._renewed = None
        self.lost += 1
        log.warning(
            "lease: host %d lost its lease (%s); it drops its idle sessions, "
            "and its appends after the takeover conflict (R27, R20)",
            self._index,
            why,
            extra={"host_index": self._index},
        )
        self._on_lost()

    async def _claim_expired(self, store: LeaseStore) -> None:
        """Claim every other shard's lease that expired (or renew one being
        taken over); a claim won starts that shard's takeover."""
        for shard in range(self._n_hosts):
            if shard == self._index:
                continue
            name = lease_name(self._cluster, shard, self._n_hosts)
            try:
                won = await store.claim_lease(name, self.owner, self.lease_s)
            except StoreError as exc:
                log.warning(
                    "lease: host %d cannot look at shard %d: %s",
                    self._index,
                    shard,
                    exc,
                )
                continue
            if won and shard not in self._taking:
                task = asyncio.ensure_future(self._take(store, shard, name))
                self._taking[shard] = task

    async def _take(self, store: LeaseStore, shard: int, name: str) -> None:
        """Finish the open turns of ``shard`` (its lease is ours), then give
        the lease back so that its host, if it wakes, renews it."""
        self.takeovers += 1
        try:
            count = await self._take_over(shard)
            self.finished += count
            if count:
                log.warning(
                    "lease: host %d took over shard %d (its lease expired) and "
                    "finished %d open turns (R27)",
                    self._index,
                    shard,
                    count,
                    extra={"host_index": self._index, "shard": shard},
                )
        except StoreError as exc:  # the next round claims it again
            log.warning(
                "lease: host %d could not read shard %d's open turns: %s",
                self._index,
                shard,
                exc,
            )
        finally:
            del self._taking[shard]
            try:
                await store.release_lease(name, self.owner)
            except StoreError as exc:  # it expires by itself
                log.warning(
                    "lease: host %d could not give back shard %d's lease: %s",
                    self._index,
                    shard,
                    exc,
                )
