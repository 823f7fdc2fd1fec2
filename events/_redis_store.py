"""The Redis adapter of the event-store port: one stream per session.

Pattern: a port adapter (``EventStore``) over ``redis.asyncio`` blocking
         connection pools; appends go through one Lua script, so the sequence
         check and the write are one atomic step, and concurrent appends are
         group-committed (queued, then sent as one pipeline per node per
         round trip). On a Redis Cluster the store routes each command to the
         node owning its key's slot (a slot map of its own, refreshed on
         MOVED) and sends one pipeline per node.
Role:    events layer; the durable store behind hosts and the CLI's
         ``verify``, ``replay``, ``tail``, ``asks`` and ``recover``. Passes
         ``tests/contracts`` on a standalone server and on a 3-master cluster.
Emits:   decision facts — each row's projection, with the row's seq, never
         its values (``fact_ops``) — to the sharded facts streams
         ``helmlog:facts:{<n>}`` (R4), and the open-turn and pending-ask
         index entries (R7, R18).

Laws: R2 (the script appends a batch only when the stream's last seq equals
``expected_seq``; stream ids are ``0-<seq>``, so Redis itself refuses a gap
or a duplicate), R3 (each entry keeps its hash beside its data), R4 (facts
are published after the session append succeeded, best-effort, never failing
it; publication is an outbox: a per-session cursor moves only past published
facts, ``publish_facts`` publishes what lies after it, and a turn's close is
sent only after every earlier fact of its session),
R19 (the append script also sets the session's head record, computed
here where the chain key is, and ``read_head`` reads it back), R5 (every
driver error becomes a retryable ``StoreError`` naming the store;
a full pool waits, and a wait past ``pool_timeout`` is a ``StoreError``
naming the pool), R7/R18 (the indexes of ``events/_index.py``), R4 also
(consumer groups on every facts shard: XGROUP CREATE … MKSTREAM,
XREADGROUP, XACK, XAUTOCLAIM; on a cluster one command per shard, routed to
its node), R11 (every
key of a session carries its ``{session_id}`` hash tag; every key spanning
sessions is sharded into N keys tagged ``{<n>}``), R12 (records read carry
their ``type``, from the codec, and the session id their key names).

Keys (docs/design.md, "Keys and indexes on Redis and Redis Cluster")::

    helmlog:{<session_id>}:events   stream; id 0-<seq>; fields seq, data, hash
    helmlog:{<session_id>}:head     string: the head record (R19), JSON
                                    {seq, hash, mac}, set by the append script
    helmlog:{<session_id>}:known    string "1": the session was created here
                                    (R25), set by its first append's script
    helmlog:sessions:{<n>}          set: every session created here (R25),
                                    added after a session's first append
    helmlog:format                  string "heads": this store writes head
                                    records (R26), set before an instance's
                                    first append
    helmlog:facts:{<n>}             stream (MAXLEN ~ facts_maxlen); fields
                                    session_id, seq, data
    helmlog:facts-at:{<n>}          hash: session id -> facts cursor (every
                                    fact up to this seq is published)
    helmlog:open:{<n>}              hash: session id -> seq of its open turn
    helmlog:asks:{<n>}              hash: session id -> "<seq>:<PendingAsk json>"
    helmlog:lease:{<name>}          string: a lease's owner, expiring (PX) (R27)

    n = sha256(session_id)[:8] (big-endian) mod shards   (``shard_of``)

URL options (stripped before the URL reaches redis-py)::

    max_connections  connections per node, default 64 (waits when all busy)
    pool_timeout     seconds a call waits for a connection, default 20
    shards           index and facts shards, default 16; the same for every
                     process of one deployment
    facts_maxlen     approximate cap of each facts shard, default 1,000,000:
                     16 shards keep ~16 M facts, ~515 bytes each in Redis
                     (~8 GB), i.e. ~4.4 h at 1,000 facts/s or ~44 h at 100
    cluster          auto (default: ask the server), yes or no
    resolve_timeout  seconds an append whose reply was lost is read back
                     before it is reported unknown, default 5 (R24)

Why the script also checks the stream's last hash against the batch's
``prev_hash``: the seq check alone cannot tell a stream that was deleted and
rewritten from the one the caller sealed against; checking the hash makes a
stale head a ``SequenceConflictError``, never a fork. The same check makes a
resent batch idempotent: when the stream already ends with exactly this batch
(its last hash matches, and hashes chain), the script reports success, so a
resend after a lost reply (or a MOVED) cannot turn our own append into a
conflict. A batch's last entry keeps its append's token (field ``w``), and
only a resend with the same token is taken for one: two writers can seal
byte-identical batches (one decision in the same millisecond), and the
second must get ``SequenceConflictError``, never a shared success (R20).

Why facts are an outbox (R4): the facts shards live in other slots than the
session, so a fact cannot join its append's atomic step; a host can die, a
shard refuse, or a reply be lost between the two. So each session has a
cursor (``facts-at``) that only ever covers a range whose every fact is on
the facts stream — a batch's range is noted once all its facts were
accepted, and the shard script moves the cursor over ``(b, a]`` only when
it already covers ``b`` — and ``publish_facts`` reads the stream after the
cursor, publishes, and moves it in one script that skips the move when a
fact is refused. The open-turn index is the outbox's index: this store
sends a turn's close only for a session it vouches for (every earlier fact
published or queued ahead here; else it first runs ``publish_facts``), and
a close riding with facts goes through the same script after them and is
skipped if one is refused; so a session with an unpublished fact keeps its
open mark, and the hosts' sweep of the open turns finds it.

Why the transport is its own module (``events/_redis_wire.py``) and the
scripts too (``events/_redis_scripts.py``): the store is the port's
semantics — group commit, index ops, facts cursors — and reads best without
RESP packing and slot routing in the way.

Why the store is split by job: this module composes it and owns its
lifetime (``from_url``, ``close``); the parts are classes over one set of
books (``_redis_base.py``): the keys and reply parsing
(``_redis_keys.py``), the reads (``_redis_reads.py``), the facts consumer
groups (``_redis_groups.py``), the facts outbox and indexes
(``_redis_outbox.py``), the group-committed appends
(``_redis_append.py``) and what the store remembers of its sessions and its
format (``_redis_registry.py``), each readable alone. Each import points one
way.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from ._lease import RedisLeases
from ._redis_groups import RedisGroups
from ._redis_keys import fact_ops, head_key, shard_keys, stream_key
from ._redis_registry import RedisRegistry
from ._redis_wire import Routes, StoreOptions, Wire, public_url, split_url

__all__ = ["RedisEventStore", "head_key", "shard_keys", "stream_key"]

log = logging.getLogger("helmlog.events")

# The name tests and benches knew the fact projection by.
_fact_ops = fact_ops


class RedisEventStore(RedisRegistry, RedisGroups):
    """Session streams in Redis or Redis Cluster (R11); keys in the module doc.

    Args:
        client: a ``redis.asyncio.Redis`` on one node (of a cluster, any);
            the store borrows its pool and closes it in ``close()``.
        chain_key: HMAC key for the hash chain (R3); ``None`` for SHA-256.
        url: the URL errors name; derived from the client when omitted.
        options: shards, facts cap, cluster mode; defaults when omitted.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        chain_key: bytes | None = None,
        url: str | None = None,
        options: StoreOptions | None = None,
    ) -> None:
        self.chain_key = chain_key
        self.url = public_url(url) if url else _url_of(client)
        self.options = options or StoreOptions()
        self._client = client
        self._routes = Routes(
            Wire(client.connection_pool, self.url), self.options, self.url
        )
        self._shards = [shard_keys(n) for n in range(self.options.shards)]
        self._leases = RedisLeases(self._routes, self.url)  # R27
        # Append tokens: this store's random id and a counter. The append
        # script takes a batch the stream already ends with for a resend of
        # its own (a reply lost on a dropped connection) only when the last
        # entry holds the same token: two writers can seal byte-identical
        # batches (one decision in the same millisecond), and must conflict.
        self._writer = os.urandom(8).hex()
        self._tokens = 0
        self._heads = {}
        self._queue = []
        self._ops = []
        # Cursor moves (start, end] of published facts, sent when the flusher
        # idles; the facts-at cursor of a session only ever covers a range
        # whose every fact is on the facts stream (R4).
        self._marks = {}
        # Per session, the seq up to which this store knows every fact is
        # published or queued ahead of anything it sends next: a turn's close
        # is sent only for a session it vouches for (R4, the outbox).
        self._vouched = {}
        # The shard operations of the round trip under way.
        self._inflight = []
        # Appends that landed and wait for their index entries to be sent.
        self._acks = []
        self._flusher = None
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        chain_key: bytes | None = None,
        *,
        max_connections: int | None = None,
        pool_timeout: float | None = None,
    ) -> RedisEventStore:
        """A store on ``redis://`` or ``rediss://``; connects on first use.

        ``max_connections``/``pool_timeout`` override the URL's parameters.
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
            socket_connect_timeout=2.0,
            # A ledger fails closed: a few quick retries, then StoreError.
            retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.2), retries=2),
        )
        # from_pool: the client owns the pool and closes it with itself.
        client = aioredis.Redis.from_pool(pool)
        return cls(client, chain_key=chain_key, url=url, options=options)

    async def claim_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        return await self._leases.claim(name, owner, ttl_s)

    async def release_lease(self, name: str, owner: str) -> bool:
        return await self._leases.release(name, owner)

    @property
    def cluster(self) -> bool:
        """Whether the store runs on a Redis Cluster (known after first use)."""
        return self._routes.cluster

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # R24: appends whose reply was lost are read back first (bounded).
            await self._resolved()
            if self._flusher is not None:
                await self._flusher
            for _round in range(2):
                if not (self._ops or self._marks):
                    break
                # One last try for operations a failed flush left behind;
                # the second round sends the cursor moves the first noted.
                if not await self._send([], self._take_ops() + self._take_marks()):
                    break
            if self._ops:
                log.warning(
                    "redis event store %s closed with %d unsent index/fact "
                    "operations; reindex(session_id) restores them from the streams",
                    self.url,
                    len(self._ops),
                )
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
