"""The connection every part of a Redis store shares: routes, shards, errors.

Pattern: one small object the parts of ``RedisEventStore`` hold (never a
         base they inherit): the URL errors name, the options, the routes
         (``topology.Routes``: the wire of each node) and the shard keys,
         with the few helpers every part needs (``error``, ``shard``,
         ``shard_reads``, ``shard_command``).
Role:    events layer, ``events/redis``; built by the store, read by its parts.

Laws: R5 (``error``: every driver error becomes a retryable ``StoreError``
naming the store), R11 (keys spanning sessions are sharded into N keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any, Final, TypeVar

from .._errors import StoreError
from .._index import shard_of
from .keys import Op, shard_keys
from .options import StoreOptions
from .scripts import SHARD_SHA
from .topology import Routes
from .wire import DRIVER_ERRORS, Arg

V = TypeVar("V")

# A full bounded map (``put_bounded``) drops this share of its oldest
# entries at once. Why not one a put: a dict's first entry is found by
# walking from its start past every entry deleted since its last resize (a
# put that moves a session to the end leaves one), so evicting one a put at
# 65,536 sessions cost ~7 us a put where one under the bound costs ~0.4,
# twice per append of a new session in a long-lived server (issue 29).
EVICT_SHARE: Final = 8


class Backend:
    """A Redis store's connection: URL, options, routes, shard keys, chain key."""

    __slots__ = ("chain_key", "options", "routes", "shards", "url")

    def __init__(
        self,
        routes: Routes,
        options: StoreOptions,
        url: str,
        chain_key: bytes | None = None,
    ) -> None:
        self.url = url
        # HMAC key of the hash chain (R3); the store's ``chain_key`` is this.
        self.chain_key = chain_key
        self.options = options
        self.routes = routes
        self.shards = [shard_keys(n) for n in range(options.shards)]

    def error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"could not {what} the redis event store {self.url}: "
            f"{type(exc).__name__}: {exc}"
        )

    def shard(self, session_id: str) -> int:
        return shard_of(session_id, self.options.shards)

    async def shard_reads(self, command: str, slot: int, what: str) -> list[Any]:
        """``command`` on key ``slot`` of every shard; a failure is a StoreError."""
        try:
            await self.routes.prepare()
            keyed = [(keys[slot], (command, keys[slot])) for keys in self.shards]
            replies = await self.routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self.error(what, exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self.error(what, reply) from reply
        return replies

    def shard_command(self, keys: Sequence[str], ops: Sequence[Op]) -> list[Arg]:
        """The shard script's call for ``ops`` on one shard's ``keys``."""
        args: list[Arg] = [
            "EVALSHA", SHARD_SHA, 4, *keys, self.options.facts_maxlen
        ]  # fmt: skip
        for op in ops:
            args.extend(op)
        return args

    async def set(self, key: str, *command: Arg) -> object:
        """One write; a driver error or an error reply is a ``StoreError``."""
        try:
            await self.routes.prepare()
            return await self.routes.one(key, *command)
        except DRIVER_ERRORS as exc:
            raise self.error("write to", exc) from exc


def put_bounded(items: dict[str, V], session_id: str, value: V, limit: int) -> None:
    """Set ``items[session_id]`` as the newest entry, keeping at most ``limit``:
    a full map first drops its oldest ``limit // EVICT_SHARE`` (at least one)."""
    items.pop(session_id, None)
    if len(items) >= limit:
        for key in list(islice(items, max(1, limit // EVICT_SHARE))):
            del items[key]
    items[session_id] = value
