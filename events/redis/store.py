"""The Redis adapter of the store ports: one stream per session (R11).

Pattern: a facade that HOLDS its parts, each owning its state: the
         connection (``Backend``: routes over ``Wire``s, options, shard keys),
         the head cache, the reader, the facts outbox, the registry (R25/R26),
         the appender (group commit, with its read-back of lost replies, R24),
         the consumer groups, the indexes and the leases. Each port method
         delegates to one part; the store owns only the parts' lifetime.
Role:    events layer; the durable store behind hosts and the CLI. Passes
         ``tests/contracts`` on a standalone server and a 3-master cluster.

Laws: R11 (keys in ``keys.py``, options in ``options.py``), R5 (every driver
error is a retryable ``StoreError``; a round trip has a read deadline, so a
stopped server fails an append instead of hanging it).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Coroutine, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from .._chain import StoredEvent, StreamHead
from .._envelope import Event, UnknownEvent
from .._index import PendingAsk
from .._signed_heads import HeadSigner
from .._store import FactDelivery, FactRecord
from .appender import Appender
from .backend import Backend
from .groups import Groups
from .headlog import RedisHeadLog
from .heads import Heads
from .indexes import Indexes
from .leases import RedisLeases
from .options import (
    CONNECT_TIMEOUT_S,
    DEFAULT_SOCKET_TIMEOUT_S,
    StoreOptions,
    public_url,
    split_url,
)
from .outbox import Outbox
from .reader import Reader
from .registry import Registry
from .topology import Routes
from .wire import Wire

log = logging.getLogger("helmlog.events")


class RedisEventStore:
    """Session streams in Redis or Redis Cluster; keys in ``keys.py``.

    Args:
        client: a ``redis.asyncio.Redis`` on one node (of a cluster, any);
            the store borrows its pool and closes it in ``close()``.
        chain_key: HMAC key for the hash chain (R3); ``None`` for SHA-256.
        url: the URL errors name; derived from the client when omitted.
        options: shards, facts cap, cluster mode; defaults when omitted.
    """

    # The appender's class: a test may give one that loses replies (R24).
    _appender_type: type[Appender] = Appender

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        chain_key: bytes | None = None,
        url: str | None = None,
        options: StoreOptions | None = None,
        signer: HeadSigner | None = None,
    ) -> None:
        self.url = public_url(url) if url else _url_of(client)
        # The signing key and trusted keys of signed heads (issue 30).
        self.signer = signer
        self.options = options or StoreOptions()
        self._client = client
        self._routes = Routes(
            Wire(client.connection_pool, self.url), self.options, self.url
        )
        self._backend = Backend(self._routes, self.options, self.url, chain_key)
        self._reader = Reader(self._backend)
        self._outbox = Outbox(self._backend, self._reader, self._flushing)
        self._registry = Registry(self._backend, self._reader)
        self._appender = self._appender_type(
            self._backend, Heads(self._backend), self._outbox, self._registry
        )
        self._groups = Groups(self._backend)
        self._indexes = Indexes(self._backend, self._reader, self._outbox)
        self._leases = RedisLeases(self._routes, self.url)  # R27
        self._headlog = RedisHeadLog(self._backend, self._reader)
        self._appender.headlog = self._headlog
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        chain_key: bytes | None = None,
        *,
        max_connections: int | None = None,
        pool_timeout: float | None = None,
        signer: HeadSigner | None = None,
    ) -> RedisEventStore:
        """A store on ``redis://`` or ``rediss://``; connects on first use.

        ``max_connections``/``pool_timeout`` override the URL's parameters; a
        ``?socket_timeout=`` in the URL overrides the default read deadline.
        """
        clean, options = split_url(url)
        if max_connections is not None:
            options = _with(options, max_connections=max_connections)
        if pool_timeout is not None:
            options = _with(options, pool_timeout=pool_timeout)
        pool = aioredis.BlockingConnectionPool.from_url(
            clean,
            max_connections=options.max_connections,
            timeout=options.pool_timeout,
            decode_responses=False,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            # The URL's own socket_timeout wins over this (redis-py merges
            # the URL's options over these arguments).
            socket_timeout=DEFAULT_SOCKET_TIMEOUT_S,
            # A ledger fails closed: a few quick retries, then StoreError.
            retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.2), retries=2),
        )
        # from_pool: the client owns the pool and closes it with itself.
        client = aioredis.Redis.from_pool(pool)
        return cls(client, chain_key=chain_key, url=url, options=options, signer=signer)

    @property
    def chain_key(self) -> bytes | None:
        """The HMAC key of the hash chain (R3); ``None`` for SHA-256."""
        return self._backend.chain_key

    @chain_key.setter
    def chain_key(self, key: bytes | None) -> None:
        self._backend.chain_key = key

    @property
    def cluster(self) -> bool:
        """Whether the store runs on a Redis Cluster (known after first use)."""
        return self._routes.cluster

    def _flushing(self) -> bool:
        return self._appender.flushing()

    # -- the stream recorder --------------------------------------------------

    async def head(self, session_id: str) -> tuple[int, str]:
        return await self._appender.head(session_id)

    async def head_for_append(
        self, session_id: str, expected_seq: int
    ) -> tuple[int, str]:
        return await self._appender.head_for_append(session_id, expected_seq)

    async def append(
        self, session_id: str, events: Sequence[Event], expected_seq: int
    ) -> int:
        # The appender sends the log of heads' share of the append (issue 30).
        return await self._appender.append(session_id, events, expected_seq)

    def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        *,
        events: Sequence[Event | UnknownEvent] | None = None,
    ) -> Coroutine[Any, Any, int]:
        # The appender's coroutine itself, awaited by the caller: no frame of
        # this facade lives through the round trip (issue 29). ``events``
        # project the facts without decoding the records again.
        return self._appender.append_sealed(session_id, records, expected_seq, events)

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        # An append of the session on its way is read as it ends, not as the
        # stream was before it (``Appender.settled``).
        if self._appender.carrying(session_id) is not None:
            await self._appender.settled(session_id)
        return await self._reader.read(session_id, after_seq)

    async def read_head(self, session_id: str) -> StreamHead | None:
        if self._appender.carrying(session_id) is not None:
            await self._appender.settled(session_id)
        return await self._reader.read_head(session_id)

    async def sessions(self) -> list[str]:
        return await self._reader.sessions()

    async def remembers(self, session_id: str) -> bool:
        return await self._registry.remembers(session_id)

    async def writes_heads(self) -> bool:
        return await self._registry.writes_heads()

    async def upgrade_head(self, session_id: str) -> StreamHead | None:
        return await self._registry.upgrade_head(session_id)

    # -- the facts log ----------------------------------------------------------

    async def publish_facts(self, session_id: str) -> int:
        return await self._outbox.publish_facts(session_id)

    async def republish_facts(self, session_id: str) -> int:
        """Deprecated: ``publish_facts`` (the outbox's port method) is its name."""
        warnings.warn(
            "RedisEventStore.republish_facts is deprecated; use publish_facts",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.publish_facts(session_id)

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        return await self._reader.read_facts(after_id, block_ms=block_ms)

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        await self._groups.create_facts_group(group, from_start=from_start)

    async def read_facts_group(
        self,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = None,
        pending: bool = False,
    ) -> list[FactDelivery]:
        return await self._groups.read_facts_group(
            group, consumer, count=count, block_ms=block_ms, pending=pending
        )

    async def ack_facts(self, group: str, deliveries: Sequence[FactDelivery]) -> int:
        return await self._groups.ack_facts(group, deliveries)

    async def claim_facts(
        self, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[FactDelivery]:
        return await self._groups.claim_facts(
            group, consumer, min_idle_ms=min_idle_ms, count=count
        )

    # -- the session index ------------------------------------------------------

    async def open_turns(self) -> list[str]:
        return await self._indexes.open_turns()

    async def pending_asks(self) -> list[PendingAsk]:
        return await self._indexes.pending_asks()

    async def reindex(self, session_id: str) -> None:
        await self._indexes.reindex(session_id)
        await self._headlog.repair(session_id)

    async def repair_indexes(self) -> int:
        repaired = await self._indexes.repair_indexes()
        await self._headlog.repair()
        return repaired

    # -- the log of signed heads (issue 30) -------------------------------------

    async def log_leaves(self, size: int | None = None) -> list[bytes]:
        return await self._headlog.leaves(size)

    async def log_index(self, leaf: bytes) -> int | None:
        return await self._headlog.index(leaf)

    async def repair_log(self, session_id: str | None = None) -> int:
        return await self._headlog.repair(session_id)

    # -- leases (R27) and lifetime ----------------------------------------------

    async def claim_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        return await self._leases.claim(name, owner, ttl_s)

    async def release_lease(self, name: str, owner: str) -> bool:
        return await self._leases.release(name, owner)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._headlog.drain()
            await self._appender.drain()
        finally:
            await self._routes.close()
            await self._client.aclose()


def _with(options: StoreOptions, **changes: Any) -> StoreOptions:
    values = {name: getattr(options, name) for name in StoreOptions.__slots__}
    values.update(changes)
    return StoreOptions(**values)


def _url_of(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    db = kwargs.get("db", 0)
    return f"redis://{host}:{port}/{db}"
