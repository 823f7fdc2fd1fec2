"""Leases on Redis (R27): a key with a ``PX`` expiry, one script per call.

Pattern: the Redis side of the ``LeaseStore`` port (``events/_lease.py``):
         ``claim`` takes a free or expired lease, or renews its owner's, in
         one atomic script; ``release`` frees it only for its holder. Expiry
         is the server's clock, never the claimant's.
Role:    events layer, ``events/redis``; the store's ``claim_lease`` and
         ``release_lease``.

Laws: R27 (a host owns its shard of open turns through a lease it renews),
R11 (a lease key has a hash tag of its own, one slot).
"""

from __future__ import annotations

from typing import Final

from .._errors import StoreError
from .._lease import lease_key, ttl_ms
from .topology import Routes
from .wire import DRIVER_ERRORS

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


class RedisLeases:
    """Leases as Redis keys with a ``PX`` expiry, one script per call."""

    def __init__(self, routes: Routes, url: str) -> None:
        self._routes = routes
        self._url = url

    async def claim(self, name: str, owner: str, ttl_s: float) -> bool:
        """``claim_lease``."""
        ms = ttl_ms(ttl_s)
        return await self._eval("claim", CLAIM_LUA, name, owner, ms)

    async def release(self, name: str, owner: str) -> bool:
        """``release_lease``."""
        return await self._eval("release", RELEASE_LUA, name, owner)

    async def _eval(self, what: str, script: str, name: str, *args: str | int) -> bool:
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
