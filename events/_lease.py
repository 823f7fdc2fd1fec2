"""Leases: a named, expiring claim one owner holds in the store (R27).

Pattern: a lease table (Chubby/etcd style, without a fencing token of its
         own): ``claim_lease`` takes a lease that is free or expired, or
         renews one its owner holds, in one atomic step; ``release_lease``
         gives it back. Expiry is the store's clock (Redis ``PX``), never
         the claimant's.
Role:    events layer; the ``LeaseStore`` port both stores implement by
         holding a ``MemoryLeases`` or a ``RedisLeases``; session hosts
         (``actors/_lease.py``) hold one lease per shard of open turns.
Emits:   nothing.

Laws: R27 (a host owns its shard of open turns through a lease it renews; a
lease that expires is taken over), R2/R20 (a lease decides who *works*, the
sequence guard decides who *writes*: an old owner that wakes after its lease
was taken is fenced by its next append's seq check, so no fencing token is
needed here), R11 (a lease key has a hash tag of its own, one slot).

Why a port of its own and not three more ``EventStore`` methods: the stream
recorder's contract is what every adapter (and a third party's) must pass;
a lease is for a cluster's hosts only, and a store without one just means
no takeover (hosts still fail over when they restart, R22).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from ._errors import StoreError

if TYPE_CHECKING:  # the memory store must import without redis installed
    from ._redis_wire import Routes

LEASE_PREFIX: Final = "helmlog:lease:{"

# Take the lease when it is free or already ours (a renewal); one atomic step.
CLAIM_LUA: Final = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
# Give the lease back only if it is still ours.
RELEASE_LUA: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


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


def _ttl_ms(ttl_s: float) -> int:
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
        ttl_ms = _ttl_ms(ttl_s)
        now = self._clock()
        held = self._held.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._held[name] = (owner, now + ttl_ms / 1000)
        return True

    def release(self, name: str, owner: str) -> bool:
        """``release_lease``."""
        held = self._held.get(name)
        if held is None or held[0] != owner or held[1] <= self._clock():
            return False
        del self._held[name]
        return True


class RedisLeases:
    """Leases as Redis keys with a ``PX`` expiry, one script per call."""

    def __init__(self, routes: Routes, url: str) -> None:
        self._routes = routes
        self._url = url

    async def claim(self, name: str, owner: str, ttl_s: float) -> bool:
        """``claim_lease``."""
        ttl_ms = _ttl_ms(ttl_s)
        return await self._eval("claim", CLAIM_LUA, name, owner, ttl_ms)

    async def release(self, name: str, owner: str) -> bool:
        """``release_lease``."""
        return await self._eval("release", RELEASE_LUA, name, owner)

    async def _eval(self, what: str, script: str, name: str, *args: str | int) -> bool:
        from ._redis_wire import DRIVER_ERRORS

        key = lease_key(name)
        try:
            await self._routes.prepare()
            reply = await self._routes.one(key, "EVAL", script, 1, key, *args)
        except DRIVER_ERRORS as exc:
            raise StoreError(
                f"could not {what} lease {name!r} in the redis event store "
                f"{self._url}: {type(exc).__name__}: {exc}"
            ) from exc
        return bool(reply)
