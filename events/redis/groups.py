"""Consumer groups on a Redis store's facts shards (R4).

Pattern: one consumer group per reader, created on every facts shard
         (``XGROUP CREATE … MKSTREAM``), read with ``XREADGROUP``, acked with
         ``XACK``, taken over with ``XAUTOCLAIM``; on a cluster one command
         per shard, routed to its node.
Role:    events layer, ``events/redis``; behind ``sinks``' ``FactsConsumer``.

Laws: R4 (at-least-once delivery per group: a delivery stays pending until
acked; ``claim_facts`` hands on what one consumer left idle), R5. Deliveries
are merged into entry-id order, so one session's facts arrive in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from .._errors import StoreError
from .._store import FactDelivery, FactRecord
from .backend import Backend
from .keys import BLOCK_SLICE_MS, CLUSTER_POLL_S, fact_of, stream_pairs
from .wire import DRIVER_ERRORS, Arg


class Groups:
    """The facts consumer groups of one Redis store."""

    __slots__ = ("_backend",)

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        start = "0" if from_start else "$"
        keyed = [
            (keys[0], ("XGROUP", "CREATE", keys[0], group, start, "MKSTREAM"))
            for keys in self._backend.shards
        ]
        try:
            await self._backend.routes.prepare()
            replies = await self._backend.routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self._backend.error("create a facts group on", exc) from exc
        for reply in replies:
            if isinstance(reply, ResponseError) and str(reply).startswith("BUSYGROUP"):
                continue  # the group exists: it keeps its position
            if isinstance(reply, BaseException):
                raise self._backend.error("create a facts group on", reply) from reply

    async def read_facts_group(
        self,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = None,
        pending: bool = False,
    ) -> list[FactDelivery]:
        keys = [keys[0] for keys in self._backend.shards]
        since = "0" if pending else ">"
        head: list[Arg] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
        try:
            await self._backend.routes.prepare()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + (block_ms or 0) / 1000
            while True:
                if self._backend.routes.cluster:
                    replies = await self._backend.routes.call(
                        [(k, (*head, "STREAMS", k, since)) for k in keys]
                    )
                    found = [
                        (n, entries)
                        for n, r in enumerate(replies)
                        for _k, entries in stream_pairs(
                            self._group_entries(group, r, keys[n])
                        )
                    ]
                else:
                    wait: list[Arg] = []
                    if block_ms and not pending:
                        left = max(1, int((deadline - loop.time()) * 1000))
                        wait = ["BLOCK", min(left, BLOCK_SLICE_MS)]
                    reply = (
                        await self._backend.routes.call(
                            [
                                (
                                    keys[0],
                                    (*head, *wait, "STREAMS", *keys)
                                    + (since,) * len(keys),
                                )
                            ]
                        )
                    )[0]
                    by_key = self._group_entries(group, reply, keys[0])
                    index = {k.encode(): n for n, k in enumerate(keys)}
                    found = [(index[bytes(k)], e) for k, e in stream_pairs(by_key)]
                out = await self._deliveries(group, found)
                if out or pending or loop.time() >= deadline:
                    return out
                if self._backend.routes.cluster:
                    await asyncio.sleep(
                        min(CLUSTER_POLL_S, max(0.0, deadline - loop.time()))
                    )
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read a facts group of", exc) from exc

    async def ack_facts(self, group: str, deliveries: Sequence[FactDelivery]) -> int:
        by_shard: dict[int, list[Arg]] = {}
        for delivery in deliveries:
            by_shard.setdefault(delivery.shard, []).append(delivery.entry_id)
        if not by_shard:
            return 0
        keyed = [
            (
                self._backend.shards[n][0],
                ("XACK", self._backend.shards[n][0], group, *ids),
            )
            for n, ids in by_shard.items()
        ]
        try:
            await self._backend.routes.prepare()
            replies = await self._backend.routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self._backend.error("acknowledge facts in", exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self._backend.error("acknowledge facts in", reply) from reply
        return sum(int(r) for r in replies)

    async def claim_facts(
        self, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[FactDelivery]:
        # ``count`` caps each shard, as in ``read_facts_group``; shards are
        # claimed in parallel, each walking its pending list by cursor.
        cursors = {n: "0-0" for n in range(self._backend.options.shards)}
        taken = dict.fromkeys(cursors, 0)
        found: list[tuple[int, Any]] = []
        try:
            await self._backend.routes.prepare()
            while cursors:
                todo = list(cursors)
                keyed = [
                    (
                        self._backend.shards[n][0],
                        (
                            "XAUTOCLAIM", self._backend.shards[n][0], group, consumer,
                            min_idle_ms, cursors[n], "COUNT", count - taken[n],
                        ),
                    )
                    for n in todo
                ]  # fmt: skip
                replies = await self._backend.routes.call(keyed)
                for n, reply in zip(todo, replies, strict=True):
                    if isinstance(reply, BaseException):
                        raise self._backend.error("claim facts in", reply) from reply
                    # [next cursor, entries, ids of entries trimmed away];
                    # Redis drops the trimmed ones from the pending list itself.
                    after, entries = bytes(reply[0]).decode(), reply[1]
                    live = [e for e in entries if e is not None and e[1] is not None]
                    found.append((n, live))
                    taken[n] += len(live)
                    if after == "0-0" or taken[n] >= count:
                        del cursors[n]
                    else:
                        cursors[n] = after
        except DRIVER_ERRORS as exc:
            raise self._backend.error("claim facts in", exc) from exc
        return await self._deliveries(group, found)

    def _group_entries(self, group: str, reply: Any, key: str) -> Any:
        if isinstance(reply, BaseException):
            if str(reply).startswith("NOGROUP"):
                raise StoreError(
                    f"no consumer group {group!r} on the facts shard {key} of "
                    f"{self._backend.url} (create_facts_group first)"
                )
            raise self._backend.error("read a facts group of", reply) from reply
        return reply

    async def _deliveries(
        self, group: str, found: Sequence[tuple[int, Any]]
    ) -> list[FactDelivery]:
        """Typed deliveries in entry-id order; entries trimmed away are acked."""
        flat: list[tuple[tuple[int, int], int, Any]] = []
        gone: list[FactDelivery] = []
        empty = FactRecord(id="", session_id="", seq=0, data=b"")
        for shard, entries in found:
            for entry in entries or ():
                entry_id = bytes(entry[0]).decode()
                if entry[1] is None:
                    # Pending, but trimmed away (MAXLEN ~): nothing to deliver.
                    gone.append(
                        FactDelivery(fact=empty, shard=shard, entry_id=entry_id)
                    )
                    continue
                ms, _, sub = entry_id.partition("-")
                flat.append(((int(ms), int(sub or 0)), shard, entry))
        if gone:
            await self.ack_facts(group, gone)
        flat.sort(key=lambda item: (item[0], item[1]))
        return [
            FactDelivery(
                fact=fact_of(entry, bytes(entry[0]).decode()),
                shard=shard,
                entry_id=bytes(entry[0]).decode(),
            )
            for _order, shard, entry in flat
        ]
