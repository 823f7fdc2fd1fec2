"""Leases: a named, expiring claim one owner holds in the store (R27).

Pattern: a lease table (Chubby/etcd style, no fencing token of its own): the
         ``LeaseStore`` port and ``MemoryLeases``; the Redis side is
         ``events/redis/leases.py``. Session hosts (``actors/_lease.py``) hold
         one lease per shard of open turns.
Role:    events layer; both stores implement the port by holding leases.

Laws: R27 (a lease that expires is taken over), R2/R20 (a lease decides who
*works*, the seq guard who *writes*: an old owner that wakes is fenced by its
next append's seq check), R11 (a lease key has a hash tag of its own).
A port of its own, not more ``EventStore`` methods: only a cluster's hosts
need it, and a store without one just means no takeover.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol, runtime_checkable

LEASE_PREFIX: Final = "helmlog:lease:{"


@runtime_checkable
class LeaseStore(Protocol):
    """A store that keeps leases (R27): both of helmlog's stores do."""

    async def claim_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take ``name`` for ``owner`` for ``ttl_s`` seconds if it is free,
        expired or already ``owner``'s (then renewed); whether it is now
        ``owner``'s. Raises ``StoreError`` when the store cannot answer."""
        ...

    async def release_lease(self, name: str, owner: str) -> bool:
        """Free ``name`` if ``owner`` holds it; whether it did."""
        ...


def lease_key(name: str) -> str:
    """The Redis key of lease ``name``; ``{name}`` is its hash tag."""
    return f"{LEASE_PREFIX}{name}}}"


def ttl_ms(ttl_s: float) -> int:
    if ttl_s <= 0:
        raise ValueError(f"a lease lasts more than 0 s, not {ttl_s!r}")
    return max(1, int(ttl_s * 1000))


class MemoryLeases:
    """Leases in this process, on the monotonic clock (the memory store's)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._held: dict[str, tuple[str, float]] = {}

    def claim(self, name: str, owner: str, ttl_s: float) -> bool:
        """``claim_lease`` (never yields, so it is atomic)."""
        ms = ttl_ms(ttl_s)
        now = self._clock()
        held = self._held.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._held[name] = (owner, now + ms / 1000)
        return True

    def release(self, name: str, owner: str) -> bool:
        """``release_lease``."""
        held = self._held.get(name)
        if held is None or held[0] != owner or held[1] <= self._clock():
            return False
        del self._held[name]
        return True
