"""Where each key lives: one node, or a Redis Cluster's slot map.

Pattern: a router over ``Wire``s: each command goes to the node owning its
         key's slot, one pipeline per node, nodes in parallel; MOVED reloads
         the slot map and resends, ASK resends once after ``ASKING``.
Role:    events layer, ``events/redis``; the store's cluster topology, used by
         every part of it through ``Backend.routes``.

Laws: R11 (the store runs unchanged on Redis Cluster).

Why a slot map of our own rather than redis-py's ``RedisCluster``: one group
commit is one pipeline per node (appends of many sessions, then their index
ops); redis-py's cluster pipeline does not take raw packed commands, and its
per-command dispatch is what ``bench/ledger.py`` measures against.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis.crc import key_slot
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from .coalesce import Coalescer
from .options import StoreOptions
from .scripts import SCRIPTS
from .wire import DRIVER_ERRORS, Arg, Command, Wire

log = logging.getLogger("helmlog.events")

_REDIRECTS_MAX: Final = 5


class Routes:
    """Where each key lives: one node, or a Redis Cluster's slot map."""

    def __init__(self, seed: Wire, options: StoreOptions, url: str) -> None:
        self.seed = seed
        self.options = options
        self.url = url
        self.cluster = False
        self.ready = False
        self.nodes: dict[tuple[str, int], Wire] = {}
        self.slots: list[Wire] = []
        self._lock = asyncio.Lock()
        self._owned: list[aioredis.ConnectionPool] = []
        self._coalescer = Coalescer(self.call)

    async def prepare(self) -> None:
        """Learn the topology once: standalone, or the cluster's slot map."""
        if self.ready:
            return
        async with self._lock:
            if self.ready:
                return
            wanted = self.options.cluster
            if wanted is None:
                info = await self.seed.call([("INFO", "cluster")])
                if isinstance(info[0], ResponseError):
                    raise info[0]
                wanted = b"cluster_enabled:1" in bytes(info[0])
            if wanted:
                await self._load_slots()
            self.cluster = bool(wanted)
            self.ready = True

    async def refresh(self) -> None:
        """Reload the slot map (after MOVED or a node failure)."""
        if self.cluster:
            async with self._lock:
                await self._load_slots()

    async def _load_slots(self) -> None:
        last: BaseException | None = None
        candidates = [self.seed, *self.nodes.values()]
        for wire in candidates:
            try:
                reply = (await wire.call([("CLUSTER", "SLOTS")]))[0]
            except DRIVER_ERRORS as exc:
                last = exc
                continue
            if isinstance(reply, ResponseError):
                last = reply
                continue
            self._apply_slots(reply)
            return
        raise last if last is not None else RedisConnectionError("no cluster node")

    def _apply_slots(self, reply: Any) -> None:
        seed_kwargs = self.seed.pool.connection_kwargs
        slots: list[Wire | None] = [None] * 16384
        for entry in reply:
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            host = bytes(master[0]).decode() or str(seed_kwargs.get("host", ""))
            addr = (host, int(master[1]))
            wire = self.nodes.get(addr)
            if wire is None:
                wire = self._wire_for(addr)
            for slot in range(start, end + 1):
                slots[slot] = wire
        missing = [i for i, w in enumerate(slots) if w is None]
        if missing:
            raise ResponseError(
                f"CLUSTERDOWN {len(missing)} hash slots are not served (first "
                f"{missing[0]})"
            )
        self.slots = [w for w in slots if w is not None]

    def _wire_for(self, addr: tuple[str, int]) -> Wire:
        seed_pool = self.seed.pool
        kwargs = dict(seed_pool.connection_kwargs)
        if (kwargs.get("host"), kwargs.get("port")) == addr:
            wire = self.seed
        else:
            kwargs["host"], kwargs["port"] = addr
            pool = aioredis.BlockingConnectionPool(
                connection_class=seed_pool.connection_class,
                max_connections=self.options.max_connections,
                timeout=self.options.pool_timeout,
                **kwargs,
            )
            self._owned.append(pool)
            wire = Wire(pool, f"{addr[0]}:{addr[1]}")
        self.nodes[addr] = wire
        return wire

    def masters(self) -> list[Wire]:
        """Every node to scan: the masters of a cluster, else the one server."""
        if not self.cluster:
            return [self.seed]
        return list(dict.fromkeys(self.slots))

    def wire(self, key: str) -> Wire:
        if not self.cluster:
            return self.seed
        return self.slots[key_slot(key.encode())]

    async def call(self, keyed: Sequence[tuple[str, Command]]) -> list[Any]:
        """Send commands to their nodes, one pipeline per node, in parallel.

        Replies come in order; a node that failed puts its exception in the
        place of each of its commands. MOVED refreshes the slot map and
        resends; ASK resends once to the named node after ``ASKING``.
        """
        if not self.cluster:
            return await self.seed.call_loaded([c for _k, c in keyed])
        replies: list[Any] = [None] * len(keyed)
        todo = list(range(len(keyed)))
        for _round in range(_REDIRECTS_MAX):
            groups: dict[Wire, list[int]] = {}
            for i in todo:
                groups.setdefault(self.wire(keyed[i][0]), []).append(i)
            results = await asyncio.gather(
                *(
                    w.call_loaded([keyed[i][1] for i in idx])
                    for w, idx in groups.items()
                ),
                return_exceptions=True,
            )
            moved: list[int] = []
            failed_node = False
            for (_wire, idx), result in zip(groups.items(), results, strict=True):
                if isinstance(result, BaseException):
                    if not isinstance(result, Exception):
                        raise result
                    failed_node = True
                    for i in idx:
                        replies[i] = result
                    continue
                for i, reply in zip(idx, result, strict=True):
                    if isinstance(reply, AskError) and not isinstance(
                        reply, MovedError
                    ):
                        reply = await self._ask(reply, keyed[i][1])
                    if isinstance(reply, MovedError):
                        moved.append(i)
                    else:
                        replies[i] = reply
            if failed_node:
                # A master may have failed over: learn the map again next time.
                try:
                    await self.refresh()
                except DRIVER_ERRORS as exc:
                    log.warning(
                        "redis cluster %s: slot map refresh failed: %s", self.url, exc
                    )
            if not moved:
                return replies
            await self.refresh()
            todo = moved
        for i in todo:
            replies[i] = ResponseError(
                f"TRYAGAIN still redirected after {_REDIRECTS_MAX} tries"
            )
        return replies

    async def _ask(self, error: AskError, command: Command) -> Any:
        """Send one command to the node a slot is migrating to (``ASKING``)."""
        wire = self.nodes.get(error.node_addr) or self._wire_for(error.node_addr)
        reply = (await wire.call([("ASKING",), command]))[1]
        if isinstance(reply, NoScriptError):
            # ASKING covers one command: load, then ask again.
            await wire.call([("SCRIPT", "LOAD", s) for s in SCRIPTS])
            reply = (await wire.call([("ASKING",), command]))[1]
        return reply

    async def one(self, key: str, *command: Arg) -> Any:
        """One command's reply, sent with other callers' in one round trip
        (``coalesce.py``); never a blocking command (``alone`` sends those)."""
        return await self._coalescer.one(key, command)

    async def alone(self, key: str, *command: Arg) -> Any:
        """One command in a round trip of its own (a blocking ``XREAD``)."""
        reply = (await self.call([(key, command)]))[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def close(self) -> None:
        for pool in self._owned:
            await pool.disconnect()
