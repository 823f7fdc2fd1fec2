"""Reading a Redis store: streams, head records, sessions, the facts shards.

Pattern: paged reads routed by key: a stream by ``XRANGE`` pages, its head
         record by ``GET``, the sessions by ``SCAN`` on every master, the
         facts shards merged into one id order behind one cursor.
Role:    events layer, ``events/redis``; the store's reader; the outbox and
         the registry read streams through it.

Laws: R2/R3 (paging by COUNT never lets a deleted entry hide what follows it
from verification), R19 (bytes no script wrote as a head are a
``StreamTamperedError``), R4 (``read_facts``: one cursor over every shard),
R5, R12. A blocking facts read blocks only on a standalone server: on a
cluster one node's BLOCK would hide the others' facts, so it polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from redis.exceptions import ResponseError

from .._chain import StoredEvent, StreamHead, decode_head
from .._errors import StreamTamperedError
from .._store import FactRecord
from .backend import Backend
from .keys import (
    BLOCK_SLICE_MS,
    CLUSTER_POLL_S,
    CURSOR_PREFIX,
    KEY_PREFIX,
    KEY_SUFFIX,
    fact_of,
    head_key,
    id_seq,
    records_into,
    stream_key,
)
from .wire import DRIVER_ERRORS

_READ_PAGE: Final = 2000


class Reader:
    """The reads of one Redis store."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        # Pages by COUNT, one round trip each: pipelining known id ranges
        # measured slower (bench/ledger.py), and COUNT never lets an entry a
        # tamperer deleted hide what follows it from verification (R3).
        key = stream_key(session_id)
        out: list[StoredEvent] = []
        start = f"0-{after_seq + 1}"
        try:
            await self._backend.routes.prepare()
            while True:
                page = await self._backend.routes.one(
                    key, "XRANGE", key, start, "+", "COUNT", _READ_PAGE
                )
                records_into(out, page, session_id)
                if len(page) < _READ_PAGE:
                    return out
                start = f"(0-{id_seq(page[-1][0])}"
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read", exc) from exc

    async def read_head(self, session_id: str) -> StreamHead | None:
        key = head_key(session_id)
        try:
            await self._backend.routes.prepare()
            raw = await self._backend.routes.one(key, "GET", key)
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read the head record of", exc) from exc
        if raw is None:
            return None
        head = decode_head(bytes(raw))
        if head is None:
            # Bytes no append script wrote: a head that cannot vouch for its stream.
            raise StreamTamperedError(session_id=session_id, seq=0, reason="head")
        return head

    async def sessions(self) -> list[str]:
        found: set[str] = set()
        try:
            await self._backend.routes.prepare()
            for wire in self._backend.routes.masters():
                cursor: bytes = b"0"
                while True:
                    reply = (
                        await wire.call(
                            [
                                (
                                    "SCAN", cursor,
                                    "MATCH", f"{KEY_PREFIX}*{KEY_SUFFIX}",
                                    "COUNT", 1000, "TYPE", "stream",
                                )
                            ]
                        )
                    )[0]  # fmt: skip
                    if isinstance(reply, ResponseError):
                        raise reply
                    cursor, keys = reply
                    for key in keys:
                        found.add(key.decode()[len(KEY_PREFIX) : -len(KEY_SUFFIX)])
                    if cursor == b"0":
                        break
        except DRIVER_ERRORS as exc:
            raise self._backend.error("list the sessions of", exc) from exc
        return sorted(found)

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        positions = self._parse_cursor(after_id)
        try:
            await self._backend.routes.prepare()
            if block_ms is None:
                return await self._range_facts(positions)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + block_ms / 1000
            while True:
                if self._backend.routes.cluster:
                    facts = await self._range_facts(positions)
                    if facts or loop.time() >= deadline:
                        return facts
                    await asyncio.sleep(
                        min(CLUSTER_POLL_S, max(0.0, deadline - loop.time()))
                    )
                    continue
                wait_ms = max(1, int((deadline - loop.time()) * 1000))
                keys = [keys[0] for keys in self._backend.shards]
                reply = await self._backend.routes.alone(
                    keys[0], "XREAD", "BLOCK", min(wait_ms, BLOCK_SLICE_MS),
                    "STREAMS", *keys, *positions,
                )  # fmt: skip
                if reply or loop.time() >= deadline:
                    # RESP3 replies with a map of streams, RESP2 with pairs.
                    pairs = (
                        list(reply.items())
                        if isinstance(reply, dict)
                        else [(k, entries) for k, entries in reply or ()]
                    )
                    index = {k.encode(): n for n, k in enumerate(keys)}
                    return self._merge(
                        positions, [(index[bytes(k)], e) for k, e in pairs]
                    )
        except DRIVER_ERRORS as exc:
            raise self._backend.error("read the facts of", exc) from exc

    def _parse_cursor(self, after_id: str | None) -> list[str]:
        n = self._backend.options.shards
        if not after_id or after_id in {"0", "0-0"}:
            return ["0-0"] * n
        if not after_id.startswith(CURSOR_PREFIX):
            # A plain stream id resumes every shard after it.
            return [after_id] * n
        positions = after_id[len(CURSOR_PREFIX) :].split(".")
        if len(positions) != n:
            raise ValueError(
                f"facts cursor {after_id!r} is from a store with {len(positions)} "
                f"shards; this one has {n}"
            )
        return [p or "0-0" for p in positions]

    def _merge(
        self, positions: list[str], entries: Sequence[tuple[int, Any]]
    ) -> list[FactRecord]:
        """Facts of several shards in id order, each ``id`` a cursor after it."""
        flat: list[tuple[tuple[int, int], int, Any]] = []
        for shard, shard_entries in entries:
            for entry in shard_entries:
                ms, _, sub = bytes(entry[0]).partition(b"-")
                flat.append(((int(ms), int(sub or 0)), shard, entry))
        flat.sort(key=lambda item: (item[0], item[1]))
        current = list(positions)
        out: list[FactRecord] = []
        for _order, shard, entry in flat:
            current[shard] = bytes(entry[0]).decode()
            out.append(fact_of(entry, CURSOR_PREFIX + ".".join(current)))
        return out

    async def _range_facts(self, positions: list[str]) -> list[FactRecord]:
        collected: list[tuple[int, Any]] = []
        starts = list(positions)
        todo = list(range(self._backend.options.shards))
        while todo:
            keyed = [
                (
                    self._backend.shards[n][0],
                    (
                        "XRANGE",
                        self._backend.shards[n][0],
                        f"({starts[n]}",
                        "+",
                        "COUNT",
                        _READ_PAGE,
                    ),
                )
                for n in todo
            ]
            replies = await self._backend.routes.call(keyed)
            more: list[int] = []
            for n, page in zip(todo, replies, strict=True):
                if isinstance(page, BaseException):
                    raise page
                collected.append((n, page))
                if len(page) == _READ_PAGE:
                    starts[n] = bytes(page[-1][0]).decode()
                    more.append(n)
            todo = more
        return self._merge(positions, collected)
