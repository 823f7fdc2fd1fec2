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
         its values (``_fact_ops``) — to the sharded facts streams
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
    helmlog:facts:{<n>}             stream (MAXLEN ~ facts_maxlen); fields
                                    session_id, seq, data
    helmlog:facts-at:{<n>}          hash: session id -> facts cursor (every
                                    fact up to this seq is published)
    helmlog:open:{<n>}              hash: session id -> seq of its open turn
    helmlog:asks:{<n>}              hash: session id -> "<seq>:<PendingAsk json>"

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

Why facts and index entries travel in the round trip *after* their append:
their keys live in other cluster slots than the session, so they cannot join
the session's atomic script, and only a successful append may publish. A
batch's shard operations ride at the head of the next pipeline the flusher
sends (one script call per shard); the flusher sends them at once when no
append follows. The one exception is the open-turn mark, which must exist
before the turn does: it goes *before* the append (same pipeline on one
server; a round trip earlier on a cluster), so a crash in between leaves a
stale mark, never a missing one. Every index rule is seq-guarded, so late or
repeated operations are harmless (``events/_index.py``).

Why a group read blocks only on a standalone server: one XREADGROUP there
covers every shard, but a cluster's shards live on several nodes, and a
command blocking on one node would hide the others' facts; so a cluster
read polls each shard without BLOCK, like ``read_facts``.

Why the transport is its own module (``events/_redis_wire.py``) and the
scripts too (``events/_redis_scripts.py``): this module is the port's
semantics — group commit, index ops, facts cursors — and reads best without
RESP packing and slot routing in the way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any, Final

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    ResponseError,
)

from ._chain import (
    StoredEvent,
    StreamHead,
    decode_head,
    encode_head,
    head_of,
    type_of,
)
from ._codec import decode_envelope, event_type
from ._errors import SequenceConflictError, StoreError, StreamTamperedError
from ._facts import fact_records
from ._index import (
    RELEVANT_TYPES,
    PendingAsk,
    decode_ask,
    delta_of,
    encode_ask,
    shard_of,
)
from ._redis_scripts import APPEND_SHA, SHARD_SHA
from ._redis_wire import (
    DRIVER_ERRORS,
    Arg,
    Command,
    Routes,
    StoreOptions,
    Wire,
    public_url,
    split_url,
)
from ._store import FactDelivery, FactRecord, StoreBase

log = logging.getLogger("helmlog.events")

_READ_PAGE: Final = 2000
_OPS_BACKLOG_MAX: Final = 100_000
_MARKS_MAX: Final = 4_096
_HEAD_CACHE_MAX: Final = 65_536
# How long publish_facts waits for this store's own queued facts of a session.
_SETTLE_WAIT_S: Final = 1.0
# The operations that publish facts or move a facts cursor.
_OUTBOX_CODES: Final = frozenset({"F", "B", "K"})
# Invariant: a blocking read waits at most this long per command, so the
# client's socket timeout (5 s by default) never cuts a healthy BLOCK short.
_BLOCK_SLICE_MS: Final = 1_000
# A cluster cannot XREAD keys of several slots in one command; it polls.
_CLUSTER_POLL_S: Final = 0.05


_FIELDS: Final = (b"seq", b"data", b"hash")
_KEY_PREFIX: Final = "helmlog:{"
_KEY_SUFFIX: Final = "}:events"
_HEAD_SUFFIX: Final = "}:head"
_CURSOR_PREFIX: Final = "f1:"

# One shard operation: code, session id, a, b, value (see SHARD_LUA; F is
# a fact's plain XADD, B notes locally that a batch (b, a] is out, never sent).
Op = tuple[str, str, int, int, bytes]


def stream_key(session_id: str) -> str:
    """The stream of one session; ``{session_id}`` is its cluster hash tag.

    An id holding a brace moves where Redis Cluster reads the tag, but every
    key of the session starts the same way, so they still share one slot.
    """
    return f"{_KEY_PREFIX}{session_id}{_KEY_SUFFIX}"


def head_key(session_id: str) -> str:
    """The head record of one session (R19), in its stream's slot."""
    return f"{_KEY_PREFIX}{session_id}{_HEAD_SUFFIX}"


def shard_keys(n: int) -> tuple[str, str, str, str]:
    """The keys of index shard ``n``: facts, open turns, asks, facts-at.

    They share the hash tag ``{<n>}``, so one script updates a shard.
    """
    tag = f"{{{n}}}"
    return (
        f"helmlog:facts:{tag}",
        f"helmlog:open:{tag}",
        f"helmlog:asks:{tag}",
        f"helmlog:facts-at:{tag}",
    )


class _Append:
    """One queued append: its script arguments and the caller's future."""

    __slots__ = (
        "acked",
        "after",
        "args",
        "expected",
        "future",
        "last_hash",
        "premark",
        "session_id",
    )

    def __init__(
        self,
        session_id: str,
        expected: int,
        args: list[Arg],
        last_hash: str,
        after: list[Op],
        premark: Op | None,
        future: asyncio.Future[int],
    ) -> None:
        self.session_id = session_id
        self.expected = expected
        self.args = args
        self.last_hash = last_hash
        self.after = after
        self.premark = premark
        self.future = future
        # Landed; resolved once its index entries are sent (``_release``).
        self.acked = False


class RedisEventStore(StoreBase):
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
        # Append tokens: this store's random id and a counter. The append
        # script takes a batch the stream already ends with for a resend of
        # its own (a reply lost on a dropped connection) only when the last
        # entry holds the same token: two writers can seal byte-identical
        # batches (one decision in the same millisecond), and must conflict.
        self._writer = os.urandom(8).hex()
        self._tokens = 0
        self._heads: dict[str, tuple[int, str]] = {}
        self._queue: list[_Append] = []
        self._ops: list[tuple[int, Op]] = []
        # Cursor moves (start, end] of published facts, sent when the flusher
        # idles; the facts-at cursor of a session only ever covers a range
        # whose every fact is on the facts stream (R4).
        self._marks: dict[tuple[int, str], tuple[int, int]] = {}
        # Per session, the seq up to which this store knows every fact is
        # published or queued ahead of anything it sends next: a turn's close
        # is sent only for a session it vouches for (R4, the outbox).
        self._vouched: dict[str, int] = {}
        # The shard operations of the round trip under way.
        self._inflight: list[tuple[int, Op]] = []
        # Appends that landed and wait for their index entries to be sent.
        self._acks: list[tuple[asyncio.Future[int], int]] = []
        self._flusher: asyncio.Task[None] | None = None
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

    @property
    def cluster(self) -> bool:
        """Whether the store runs on a Redis Cluster (known after first use)."""
        return self._routes.cluster

    # -- the port ----------------------------------------------------------

    async def head(self, session_id: str) -> tuple[int, str]:
        """The last head this store saw, else the stream's.

        Another writer may have moved the stream since; an append against a
        stale head is a ``SequenceConflictError``, which drops the cache.
        """
        cached = self._heads.get(session_id)
        if cached is not None:
            return cached
        return await self._fetch_head(session_id)

    async def head_for_append(
        self, session_id: str, expected_seq: int
    ) -> tuple[int, str]:
        cached = self._heads.get(session_id)
        # A cached head is only a guess; the script's check is the truth, and a
        # cache that disagrees with the caller is refreshed, never believed.
        if cached is not None and cached[0] == expected_seq:
            return cached
        return await self._fetch_head(session_id)

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if not records:
            # Nothing to append; still a seq check, answered by the stream.
            last_seq, _hash = await self._fetch_head(session_id)
            if last_seq != expected_seq:
                raise SequenceConflictError(
                    session_id=session_id, expected=expected_seq, actual=last_seq
                )
            return last_seq
        try:
            prev_hash = decode_envelope(records[0].data)[2]
        except ValueError as exc:  # msgspec.DecodeError is a ValueError
            raise ValueError(
                f"record seq {records[0].seq} is not a stored event: {exc}"
            ) from exc
        return await self._append(session_id, records, expected_seq, prev_hash)

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        # Pages by COUNT, one round trip each: pipelining known id ranges
        # measured slower (bench/ledger.py), and COUNT never lets an entry a
        # tamperer deleted hide what follows it from verification (R3).
        key = stream_key(session_id)
        out: list[StoredEvent] = []
        start = f"0-{after_seq + 1}"
        try:
            await self._routes.prepare()
            while True:
                page = await self._routes.one(
                    key, "XRANGE", key, start, "+", "COUNT", _READ_PAGE
                )
                _records_into(out, page, session_id)
                if len(page) < _READ_PAGE:
                    return out
                start = f"(0-{_id_seq(page[-1][0])}"
        except DRIVER_ERRORS as exc:
            raise self._error("read", exc) from exc

    async def read_head(self, session_id: str) -> StreamHead | None:
        key = head_key(session_id)
        try:
            await self._routes.prepare()
            raw = await self._routes.one(key, "GET", key)
        except DRIVER_ERRORS as exc:
            raise self._error("read the head record of", exc) from exc
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
            await self._routes.prepare()
            for wire in self._routes.masters():
                cursor: bytes = b"0"
                while True:
                    reply = (
                        await wire.call(
                            [
                                (
                                    "SCAN", cursor,
                                    "MATCH", f"{_KEY_PREFIX}*{_KEY_SUFFIX}",
                                    "COUNT", 1000, "TYPE", "stream",
                                )
                            ]
                        )
                    )[0]  # fmt: skip
                    if isinstance(reply, ResponseError):
                        raise reply
                    cursor, keys = reply
                    for key in keys:
                        found.add(key.decode()[len(_KEY_PREFIX) : -len(_KEY_SUFFIX)])
                    if cursor == b"0":
                        break
        except DRIVER_ERRORS as exc:
            raise self._error("list the sessions of", exc) from exc
        return sorted(found)

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        positions = self._parse_cursor(after_id)
        try:
            await self._routes.prepare()
            if block_ms is None:
                return await self._range_facts(positions)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + block_ms / 1000
            while True:
                if self._routes.cluster:
                    facts = await self._range_facts(positions)
                    if facts or loop.time() >= deadline:
                        return facts
                    await asyncio.sleep(
                        min(_CLUSTER_POLL_S, max(0.0, deadline - loop.time()))
                    )
                    continue
                wait_ms = max(1, int((deadline - loop.time()) * 1000))
                keys = [keys[0] for keys in self._shards]
                reply = await self._routes.one(
                    keys[0], "XREAD", "BLOCK", min(wait_ms, _BLOCK_SLICE_MS),
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
            raise self._error("read the facts of", exc) from exc

    # -- consumer groups on the facts shards (R4) ---------------------------

    async def create_facts_group(self, group: str, *, from_start: bool = True) -> None:
        start = "0" if from_start else "$"
        keyed = [
            (keys[0], ("XGROUP", "CREATE", keys[0], group, start, "MKSTREAM"))
            for keys in self._shards
        ]
        try:
            await self._routes.prepare()
            replies = await self._routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self._error("create a facts group on", exc) from exc
        for reply in replies:
            if isinstance(reply, ResponseError) and str(reply).startswith("BUSYGROUP"):
                continue  # the group exists: it keeps its position
            if isinstance(reply, BaseException):
                raise self._error("create a facts group on", reply) from reply

    async def read_facts_group(
        self,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        block_ms: int | None = None,
        pending: bool = False,
    ) -> list[FactDelivery]:
        keys = [keys[0] for keys in self._shards]
        since = "0" if pending else ">"
        head: list[Arg] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
        try:
            await self._routes.prepare()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + (block_ms or 0) / 1000
            while True:
                if self._routes.cluster:
                    replies = await self._routes.call(
                        [(k, (*head, "STREAMS", k, since)) for k in keys]
                    )
                    found = [
                        (n, entries)
                        for n, r in enumerate(replies)
                        for _k, entries in _stream_pairs(
                            self._group_entries(group, r, keys[n])
                        )
                    ]
                else:
                    wait: list[Arg] = []
                    if block_ms and not pending:
                        left = max(1, int((deadline - loop.time()) * 1000))
                        wait = ["BLOCK", min(left, _BLOCK_SLICE_MS)]
                    reply = (
                        await self._routes.call(
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
                    found = [(index[bytes(k)], e) for k, e in _stream_pairs(by_key)]
                out = await self._deliveries(group, found)
                if out or pending or loop.time() >= deadline:
                    return out
                if self._routes.cluster:
                    await asyncio.sleep(
                        min(_CLUSTER_POLL_S, max(0.0, deadline - loop.time()))
                    )
        except DRIVER_ERRORS as exc:
            raise self._error("read a facts group of", exc) from exc

    async def ack_facts(self, group: str, deliveries: Sequence[FactDelivery]) -> int:
        by_shard: dict[int, list[Arg]] = {}
        for delivery in deliveries:
            by_shard.setdefault(delivery.shard, []).append(delivery.entry_id)
        if not by_shard:
            return 0
        keyed = [
            (self._shards[n][0], ("XACK", self._shards[n][0], group, *ids))
            for n, ids in by_shard.items()
        ]
        try:
            await self._routes.prepare()
            replies = await self._routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self._error("acknowledge facts in", exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self._error("acknowledge facts in", reply) from reply
        return sum(int(r) for r in replies)

    async def claim_facts(
        self, group: str, consumer: str, *, min_idle_ms: int, count: int = 100
    ) -> list[FactDelivery]:
        # ``count`` caps each shard, as in ``read_facts_group``; shards are
        # claimed in parallel, each walking its pending list by cursor.
        cursors = {n: "0-0" for n in range(self.options.shards)}
        taken = dict.fromkeys(cursors, 0)
        found: list[tuple[int, Any]] = []
        try:
            await self._routes.prepare()
            while cursors:
                todo = list(cursors)
                keyed = [
                    (
                        self._shards[n][0],
                        (
                            "XAUTOCLAIM", self._shards[n][0], group, consumer,
                            min_idle_ms, cursors[n], "COUNT", count - taken[n],
                        ),
                    )
                    for n in todo
                ]  # fmt: skip
                replies = await self._routes.call(keyed)
                for n, reply in zip(todo, replies, strict=True):
                    if isinstance(reply, BaseException):
                        raise self._error("claim facts in", reply) from reply
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
            raise self._error("claim facts in", exc) from exc
        return await self._deliveries(group, found)

    def _group_entries(self, group: str, reply: Any, key: str) -> Any:
        if isinstance(reply, BaseException):
            if str(reply).startswith("NOGROUP"):
                raise StoreError(
                    f"no consumer group {group!r} on the facts shard {key} of "
                    f"{self.url} (create_facts_group first)"
                )
            raise self._error("read a facts group of", reply) from reply
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
                fact=_fact(entry, bytes(entry[0]).decode()),
                shard=shard,
                entry_id=bytes(entry[0]).decode(),
            )
            for _order, shard, entry in flat
        ]

    async def open_turns(self) -> list[str]:
        replies = await self._shard_reads("HKEYS", 1, "list the open turns of")
        return sorted({bytes(k).decode() for keys in replies for k in keys})

    async def pending_asks(self) -> list[PendingAsk]:
        replies = await self._shard_reads("HVALS", 2, "list the pending asks of")
        asks = [decode_ask(bytes(v)) for values in replies for v in values]
        return sorted(asks, key=lambda a: (a.session_id, a.seq))

    async def reindex(self, session_id: str) -> None:
        await self._reindex(session_id)

    async def repair_indexes(self) -> int:
        sessions = set(await self.sessions())
        sessions |= set(await self.open_turns())
        sessions |= {a.session_id for a in await self.pending_asks()}
        # A cursor whose stream is gone is dropped by its reindex (R11).
        cursors = await self._shard_reads("HKEYS", 3, "list the facts cursors of")
        sessions |= {bytes(k).decode() for keys in cursors for k in keys}
        gate = asyncio.Semaphore(16)

        async def one(session_id: str) -> None:
            async with gate:
                await self._reindex(session_id)

        await asyncio.gather(*(one(s) for s in sessions))
        return len(sessions)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
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

    # -- the facts outbox (R4) -----------------------------------------------

    async def publish_facts(self, session_id: str) -> int:
        """Publish the session's facts after its cursor; return how many.

        Reads only the stream after the cursor (``helmlog:facts-at:{<n>}``),
        publishes its facts and then moves the cursor, in one shard script
        that skips the move (and the close below) when a fact is refused; so
        the cursor never passes a fact that is not on the facts stream.
        Running it twice, or beside appends, is harmless: the script
        publishes only facts after the cursor as it stands. A turn's close in
        what it read is sent too (seq-guarded), since this store may have
        held it back (R4: a close lands only after its session's facts).
        """
        return (await self._publish(session_id, index=False))[1]

    async def republish_facts(self, session_id: str) -> int:
        """Deprecated: ``publish_facts`` (the outbox's port method) is its name."""
        warnings.warn(
            "RedisEventStore.republish_facts is deprecated; use publish_facts",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.publish_facts(session_id)

    # -- internals ---------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"could not {what} the redis event store {self.url}: "
            f"{type(exc).__name__}: {exc}"
        )

    async def _shard_reads(self, command: str, slot: int, what: str) -> list[Any]:
        try:
            await self._routes.prepare()
            keyed = [(keys[slot], (command, keys[slot])) for keys in self._shards]
            replies = await self._routes.call(keyed)
        except DRIVER_ERRORS as exc:
            raise self._error(what, exc) from exc
        for reply in replies:
            if isinstance(reply, BaseException):
                raise self._error(what, reply) from reply
        return replies

    async def _reindex(self, session_id: str) -> tuple[int, int]:
        return await self._publish(session_id, index=True)

    async def _publish(self, session_id: str, *, index: bool) -> tuple[int, int]:
        """Publish after the cursor (and with ``index`` repair the index entries).

        Returns ``(operations sent, facts published)``.
        """
        what = "reindex" if index else "publish the facts of"
        n = self._shard(session_id)
        keys = self._shards[n]
        await self._settled(session_id)
        # This process's own unsent cursor note goes first, so what it
        # published already is not read (or published) again.
        held = self._marks.pop((n, session_id), None)
        ops: list[Op] = []
        try:
            await self._routes.prepare()
            at = await self._routes.one(keys[3], "HGET", keys[3], session_id)
            cursor = int(at) if at else 0
            if held is not None:
                ops.append(("K", session_id, held[1], held[0], b""))
                if held[0] <= cursor < held[1]:
                    cursor = held[1]
            records = await self.read(session_id, 0 if index else cursor)
            fresh = [r for r in records if r.seq > cursor]
            ops.extend(_scripted(op) for op in _fact_ops(session_id, fresh))
            last = records[-1].seq if records else 0
            if index:
                ops.append(_index_op(session_id, records, last))
            else:
                delta = delta_of(session_id, fresh)
                if delta is not None and delta.close_at:
                    ops.append(("C", session_id, delta.close_at, 0, b""))
            if last > cursor:
                ops.append(("K", session_id, last, cursor, b""))
            if not ops:
                self._vouch_at_least(session_id, cursor)
                return 0, 0
            reply = await self._routes.one(keys[0], *self._shard_command(keys, ops))
        except (*DRIVER_ERRORS, StoreError) as exc:
            if held is not None:
                self._mark(n, session_id, *held)
            if isinstance(exc, StoreError):
                raise
            raise self._error(f"{what} a session of", exc) from exc
        failed, first, count, _refused = reply
        if failed:
            self._vouched.pop(session_id, None)
            raise StoreError(
                f"could not {what} session {session_id!r} in the redis event store "
                f"{self.url}: {int(failed)} operations failed: {bytes(first).decode()}"
            )
        self._vouch_at_least(session_id, max(cursor, last))
        return len(ops), int(count)

    async def _settled(self, session_id: str) -> None:
        """Wait (briefly) until no fact or cursor move of the session is queued
        or under way here, so publishing does not race this store's own."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _SETTLE_WAIT_S
        while (
            self._flusher is not None
            and not self._flusher.done()
            and self._owes(session_id)
            and loop.time() < deadline
        ):
            await asyncio.sleep(0.001)

    def _owes(self, session_id: str) -> bool:
        return any(
            op[1] == session_id and op[0] in _OUTBOX_CODES
            for _n, op in (*self._inflight, *self._ops)
        )

    def _vouch_at_least(self, session_id: str, seq: int) -> None:
        if self._vouched.get(session_id, -1) < seq:
            self._vouch(session_id, seq)

    def _shard_command(self, keys: Sequence[str], ops: Sequence[Op]) -> list[Arg]:
        args: list[Arg] = [
            "EVALSHA", SHARD_SHA, 4, *keys, self.options.facts_maxlen
        ]  # fmt: skip
        for op in ops:
            args.extend(op)
        return args

    def _parse_cursor(self, after_id: str | None) -> list[str]:
        n = self.options.shards
        if not after_id or after_id in {"0", "0-0"}:
            return ["0-0"] * n
        if not after_id.startswith(_CURSOR_PREFIX):
            # A plain stream id resumes every shard after it.
            return [after_id] * n
        positions = after_id[len(_CURSOR_PREFIX) :].split(".")
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
            out.append(_fact(entry, _CURSOR_PREFIX + ".".join(current)))
        return out

    async def _range_facts(self, positions: list[str]) -> list[FactRecord]:
        collected: list[tuple[int, Any]] = []
        starts = list(positions)
        todo = list(range(self.options.shards))
        while todo:
            keyed = [
                (
                    self._shards[n][0],
                    (
                        "XRANGE",
                        self._shards[n][0],
                        f"({starts[n]}",
                        "+",
                        "COUNT",
                        _READ_PAGE,
                    ),
                )
                for n in todo
            ]
            replies = await self._routes.call(keyed)
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

    async def _fetch_head(self, session_id: str) -> tuple[int, str]:
        key = stream_key(session_id)
        try:
            await self._routes.prepare()
            top = await self._routes.one(key, "XREVRANGE", key, "+", "-", "COUNT", 1)
        except DRIVER_ERRORS as exc:
            raise self._error("read the head of", exc) from exc
        if not top:
            self._heads.pop(session_id, None)
            return 0, ""
        record = _records_into([], top, session_id)[0]
        head = (record.seq, record.hash)
        self._remember(session_id, head)
        return head

    def _remember(self, session_id: str, head: tuple[int, str]) -> None:
        heads = self._heads
        heads.pop(session_id, None)
        if len(heads) >= _HEAD_CACHE_MAX:
            del heads[next(iter(heads))]
        heads[session_id] = head

    async def _append(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        prev_hash: str,
    ) -> int:
        if self._closed:
            raise StoreError(f"the redis event store {self.url} is closed")
        self._tokens += 1
        last = records[-1]
        head = encode_head(head_of(session_id, last.seq, last.hash, self.chain_key))
        args: list[Arg] = [
            "EVALSHA", APPEND_SHA, 2, stream_key(session_id), head_key(session_id),
            expected_seq, prev_hash, f"{self._writer}:{self._tokens}", head,
        ]  # fmt: skip
        relevant = False
        seq = expected_seq
        for record in records:
            seq += 1
            if record.seq != seq:
                raise ValueError(f"record seq {record.seq} does not follow {seq - 1}")
            args.append(record.data)
            args.append(record.hash)
            if type_of(record) in RELEVANT_TYPES:
                relevant = True
        after = _fact_ops(session_id, records)
        premark: Op | None = None
        delta = delta_of(session_id, records) if relevant else None
        if delta is not None:
            if delta.open_at:
                premark = ("O", session_id, delta.open_at, 0, b"")
            if delta.resolved_at:
                after.append(("R", session_id, delta.resolved_at, 0, b""))
            if delta.ask is not None:
                after.append(("A", session_id, delta.ask.seq, 0, encode_ask(delta.ask)))
            if delta.close_at:
                after.append(("C", session_id, delta.close_at, 0, b""))
                if not self._vouches(session_id, expected_seq):
                    # R4: a close may land only once every earlier fact of the
                    # session is published; this store cannot vouch for what
                    # others wrote, so it publishes them first (best-effort:
                    # if that fails the close waits for the sweep).
                    await self._publish_before_close(session_id)
        last_hash = records[-1].hash if records else prev_hash
        loop = asyncio.get_running_loop()
        item = _Append(
            session_id,
            expected_seq,
            args,
            last_hash,
            after,
            premark,
            loop.create_future(),
        )
        self._queue.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await item.future

    async def _publish_before_close(self, session_id: str) -> None:
        try:
            await self.publish_facts(session_id)
        except StoreError as exc:
            log.warning(
                "redis event store %s: the facts of session %s could not be "
                "published before its turn's close (%s); the turn stays in the "
                "open-turns index until a sweep publishes them",
                self.url,
                session_id,
                exc,
            )

    def _vouches(self, session_id: str, expected_seq: int) -> bool:
        """Whether every fact up to ``expected_seq`` is published or queued here."""
        return expected_seq == 0 or self._vouched.get(session_id) == expected_seq

    def _vouch(self, session_id: str, seq: int) -> None:
        vouched = self._vouched
        vouched.pop(session_id, None)
        if len(vouched) >= _HEAD_CACHE_MAX:
            del vouched[next(iter(vouched))]
        vouched[session_id] = seq

    def _mark(self, n: int, session_id: str, start: int, end: int) -> None:
        """Note that the facts of ``(start, end]`` are published (a cursor move)."""
        key = (n, session_id)
        held = self._marks.get(key)
        if held is not None and held[0] <= start <= held[1]:
            self._marks[key] = (held[0], max(held[1], end))
        else:
            # A gap: the cursor was moved past ``held`` meanwhile (a publish
            # that re-vouched the session), so the newer range supersedes it.
            self._marks[key] = (start, end)

    def _take_ops(self) -> list[tuple[int, Op]]:
        ops, self._ops = self._ops, []
        return ops

    def _take_marks(self) -> list[tuple[int, Op]]:
        marks, self._marks = self._marks, {}
        return [
            (n, ("K", sid, end, start, b"")) for (n, sid), (start, end) in marks.items()
        ]

    async def _flush(self) -> None:
        """Send queued appends (and the shard operations of earlier ones)."""
        try:
            await self._routes.prepare()
            while self._queue or self._ops or self._acks or self._marks:
                batch, self._queue = self._queue, []
                ops = self._take_ops()
                if not batch or len(self._marks) >= _MARKS_MAX:
                    # Marks only save publish_facts from re-reading: under load
                    # they wait and coalesce, one script call per shard when idle.
                    ops.extend(self._take_marks())
                sent = await self._send(batch, ops)
                if not sent and not self._queue:
                    return  # the store is down: operations wait for the next append
                # Let the callers just woken queue their next append, so it
                # shares the next round trip with the operations of this one.
                await asyncio.sleep(0)
        except DRIVER_ERRORS as exc:
            error = self._error("append to", exc)
            for item in self._queue:
                if not item.future.done():
                    item.future.set_exception(error)
            self._queue = []
        finally:
            # Invariant: no caller waits on a queued append this flusher
            # will never send, whatever stopped it.
            orphans, self._queue = self._queue, []
            self._fail(orphans, f"the append queue of {self.url} stopped")
            acks, self._acks = self._acks, []
            self._release(acks)

    async def _send(self, batch: list[_Append], ops: list[tuple[int, Op]]) -> bool:
        """One round trip (two on a cluster when a turn starts); settles all."""
        acks, self._acks = self._acks, []
        try:
            self._inflight = ops
            premarks = [
                (self._shard(i.session_id), i.premark) for i in batch if i.premark
            ]
            staged = ops + [(n, op) for n, op in premarks if op is not None]
            shard_cmds, owners = self._shard_commands(staged)
            appends = [(stream_key(i.session_id), i.args) for i in batch]
            if not shard_cmds and not appends:
                # Only cursor notes of fact-free batches: nothing to send.
                self._check_shards(staged, owners, [])
                return True
            try:
                if self._routes.cluster and premarks:
                    # The marks must be in before the appends, on other nodes.
                    shard_replies = await self._routes.call(shard_cmds)
                    refused = self._marks_refused(staged, owners, shard_replies, batch)
                    go = [i for i in batch if i.session_id not in refused]
                    append_replies = await self._routes.call(
                        [(stream_key(i.session_id), i.args) for i in go]
                    )
                    for item in batch:
                        if item.session_id in refused:
                            self._settle(item, refused[item.session_id])
                    batch = go
                else:
                    replies = await self._routes.call([*shard_cmds, *appends])
                    shard_replies = replies[: len(shard_cmds)]
                    append_replies = replies[len(shard_cmds) :]
            except (*DRIVER_ERRORS, StoreError) as exc:
                self._requeue(staged, exc)
                error = (
                    exc
                    if isinstance(exc, StoreError)
                    else self._error("append to", exc)
                )
                for item in batch:
                    self._heads.pop(item.session_id, None)
                    # The append may have landed: its facts were never queued.
                    self._vouched.pop(item.session_id, None)
                    if not item.future.done():
                        item.future.set_exception(error)
                return False
            self._check_shards(staged, owners, shard_replies)
            for item, reply in zip(batch, append_replies, strict=True):
                self._settle(item, reply)
            return True
        finally:
            self._inflight = []
            # The appends behind ``acks`` landed; their index entries were
            # sent or requeued, and reindex repairs either way.
            self._release(acks)
            # Cancelled mid-send: the outcome is unknown, and nobody may wait
            # on it forever. A retry is safe: the script is idempotent.
            self._fail(batch, f"an append to {self.url} was interrupted")

    def _shard(self, session_id: str) -> int:
        return shard_of(session_id, self.options.shards)

    def _shard_commands(
        self, staged: list[tuple[int, Op]]
    ) -> tuple[list[tuple[str, Command]], list[list[int]]]:
        """The commands for ``staged`` and, for each, the indexes it carries.

        A fact is a plain ``XADD`` (the hot path: a script call costs more
        than the write), unless a close of its session rides along: then its
        facts go through the shard script, ahead of the close, so the close
        is skipped when a fact is refused (R4: a session with an unpublished
        fact keeps its open mark). ``B`` (a batch's facts are out) is a local
        note, never sent; index operations and cursor moves go through the
        shard script, in queue order.
        """
        commands: list[tuple[str, Command]] = []
        owners: list[list[int]] = []
        scripted: dict[int, list[int]] = {}
        closing = {op[1] for _n, op in staged if op[0] == "C"}
        maxlen = self.options.facts_maxlen
        for i, (n, (code, sid, a, _b, value)) in enumerate(staged):
            if code == "B":
                continue
            if code == "F" and sid not in closing:
                key = self._shards[n][0]
                commands.append(
                    (
                        key,
                        (
                            "XADD", key, "MAXLEN", "~", maxlen, "*",
                            "session_id", sid, "seq", a, "data", value,
                        ),
                    )
                )  # fmt: skip
                owners.append([i])
            else:
                scripted.setdefault(n, []).append(i)
        for n, carried in scripted.items():
            keys = self._shards[n]
            ops = [_scripted(staged[i][1]) for i in carried]
            commands.append((keys[0], self._shard_command(keys, ops)))
            owners.append(carried)
        return commands, owners

    def _marks_refused(
        self,
        staged: list[tuple[int, Op]],
        owners: list[list[int]],
        replies: list[Any],
        batch: list[_Append],
    ) -> dict[str, Exception]:
        """Sessions whose open mark did not land: their appends must wait."""
        refused: dict[str, Exception] = {}
        for carried, reply in zip(owners, replies, strict=True):
            if isinstance(reply, Exception):
                for i in carried:
                    op = staged[i][1]
                    if op[0] == "O":
                        refused[op[1]] = reply
        return {
            i.session_id: refused[i.session_id]
            for i in batch
            if i.premark and i.session_id in refused
        }

    def _check_shards(
        self, staged: list[tuple[int, Op]], owners: list[list[int]], replies: list[Any]
    ) -> None:
        """Settle the shard operations: cursor notes, refusals, requeues."""
        lost: set[int] = set()
        refusals: list[str] = []
        unpublished: set[str] = set()
        for carried, reply in zip(owners, replies, strict=True):
            if isinstance(reply, ResponseError):
                # The server refused (a key of the wrong type): resending
                # would fail again; publish_facts publishes from the stream.
                refusals.append(str(reply))
                unpublished.update(
                    staged[i][1][1] for i in carried if staged[i][1][0] in ("F", "P")
                )
            elif isinstance(reply, Exception):
                lost.update(carried)  # a node failed: send again next flush
            elif isinstance(reply, list) and len(reply) == 4 and reply[0]:
                refusals.append(bytes(reply[1]).decode(errors="replace"))
                unpublished.update(bytes(s).decode() for s in reply[3])
        for sid in unpublished:
            self._vouched.pop(sid, None)
        lost_sessions = {staged[i][1][1] for i in lost}
        for i, (n, (code, sid, a, b, _v)) in enumerate(staged):
            if code != "B" or sid in unpublished:
                continue
            if sid in lost_sessions:
                lost.add(i)  # noted once the facts before it are out
            else:
                self._mark(n, sid, b, a)
        if refusals:
            log.warning(
                "redis event store %s: %d facts or index entries not published "
                "(%s); publish_facts(session_id) or the hosts' sweep publishes "
                "them from the streams",
                self.url,
                len(refusals),
                refusals[0],
            )
        if lost:
            self._requeue(
                [staged[i] for i in sorted(lost)],
                RedisConnectionError("a shard node failed"),
            )

    def _shard_of_key(self, key: str) -> int:
        return int(key[key.index("{") + 1 : key.index("}")])

    def _settle(self, item: _Append, reply: Any) -> None:
        future = item.future
        sid = item.session_id
        if isinstance(reply, Exception):
            self._heads.pop(sid, None)
            # Unknown outcome: the append may have landed, its facts unqueued.
            self._vouched.pop(sid, None)
            if not future.done():
                future.set_exception(
                    reply
                    if isinstance(reply, StoreError)
                    else self._error("append to", reply)
                )
            return
        ok, seq = reply
        if not ok:
            self._heads.pop(sid, None)
            if not future.done():
                future.set_exception(
                    SequenceConflictError(
                        session_id=sid, expected=item.expected, actual=seq
                    )
                )
            return
        self._remember(sid, (seq, item.last_hash))
        after = item.after
        if self._vouches(sid, item.expected):
            self._vouch(sid, seq)
            after = [*after, ("B", sid, seq, item.expected, b"")]
        else:
            # R4: earlier facts of this session may be unpublished; its close
            # waits, and the open mark stays for publish_facts to settle.
            after = [op for op in after if op[0] != "C"]
        n = self._shard(sid)
        self._ops.extend((n, op) for op in after)
        if any(op[0] in ("A", "R", "C") for op in after):
            # Read your writes: the caller sees its ask or closed turn in
            # the index once we return (facts alone may lag, R4).
            self._acks.append((future, seq))
            item.acked = True
            return
        if not future.done():
            future.set_result(seq)

    def _release(self, acks: list[tuple[asyncio.Future[int], int]]) -> None:
        """Resolve appends whose index round trip is over (sent, or requeued)."""
        for future, seq in acks:
            if not future.done():
                future.set_result(seq)

    def _fail(self, items: list[_Append], why: str) -> None:
        for item in items:
            if not item.future.done() and not item.acked:
                self._heads.pop(item.session_id, None)
                self._vouched.pop(item.session_id, None)
                item.future.set_exception(StoreError(why))

    def _requeue(self, ops: list[tuple[int, Op]], exc: BaseException) -> None:
        if not ops:
            return
        room = max(0, _OPS_BACKLOG_MAX - len(self._ops))
        kept = ops[:room]
        for _n, op in ops[room:]:
            self._vouched.pop(op[1], None)  # dropped: publish_facts must vouch
        self._ops[:0] = kept
        log.warning(
            "redis event store %s: sending %d fact/index operations failed "
            "(%s: %s); %d kept for the next flush, %d left to publish_facts",
            self.url,
            len(ops),
            type(exc).__name__,
            exc,
            len(kept),
            len(ops) - len(kept),
        )


def _with(options: StoreOptions, **changes: Any) -> StoreOptions:
    values = {name: getattr(options, name) for name in StoreOptions.__slots__}
    values.update(changes)
    return StoreOptions(**values)


def _fact_ops(session_id: str, records: Sequence[StoredEvent]) -> list[Op]:
    """The fact operations ``records`` publish, in seq order (R4).

    Every place that turns stored records into facts goes through here: the
    append path, ``publish_facts`` and ``reindex``. Each fact is its row's
    projection (``fact_records``: the published ``data`` is the encoded fact,
    never the row, so it holds no value), with the row's seq; a stored fact of
    an older stream is published as stored.
    """
    return [
        ("F", session_id, seq, 0, data)
        for seq, data in fact_records(session_id, records)
    ]


def _scripted(op: Op) -> Op:
    """A fact's ``F`` as the shard script's ``P`` (published after the cursor)."""
    return ("P", *op[1:]) if op[0] == "F" else op


def _index_op(session_id: str, records: Sequence[StoredEvent], last: int) -> Op:
    """The ``X`` operation that sets a session's index entries from its stream."""
    delta = delta_of(session_id, records)
    mark = 0
    entry = b""
    if delta is not None:
        if delta.ask is not None:
            entry = encode_ask(delta.ask)
        if delta.open_at and (not delta.close_at or delta.ask is not None):
            mark = delta.open_at
    return ("X", session_id, last, mark, entry)


def _id_seq(entry_id: Any) -> int:
    """The seq of a session stream entry id ``0-<seq>``."""
    return int(bytes(entry_id).rsplit(b"-", 1)[-1])


def _records_into(
    out: list[StoredEvent], entries: Any, session_id: str
) -> list[StoredEvent]:
    """Append the records of raw ``XRANGE`` entries of ``session_id`` to ``out``.

    Each carries its type (the codec's ``event_type``) and the session id.
    """
    push = out.append
    for _id, fields in entries:
        # Invariant: the script writes seq, data, hash in this order (and a
        # batch's last entry then its append token, w).
        if len(fields) >= 6 and (fields[0], fields[2], fields[4]) == _FIELDS:
            data = fields[3]
            push(
                StoredEvent(
                    seq=int(fields[1]),
                    data=data,
                    hash=fields[5].decode(),
                    type=event_type(data),
                    session_id=session_id,
                )
            )
        else:
            # A damaged entry still yields a record, so verification names
            # its seq (the stream id is the seq) instead of crashing.
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            id_seq = int(bytes(_id).rsplit(b"-", 1)[-1])
            try:
                seq = int(named.get(b"seq", id_seq))
            except ValueError:
                seq = id_seq
            data = bytes(named.get(b"data", b""))
            push(
                StoredEvent(
                    seq=seq,
                    data=data,
                    hash=bytes(named.get(b"hash", b"")).decode(errors="replace"),
                    type=event_type(data),
                    session_id=session_id,
                )
            )
    return out


def _fact(entry: Any, cursor: str) -> FactRecord:
    _entry_id, fields = entry
    named = dict(zip(fields[::2], fields[1::2], strict=True))
    return FactRecord(
        id=cursor,
        session_id=named[b"session_id"].decode(),
        seq=int(named[b"seq"]),
        data=named[b"data"],
    )


def _stream_pairs(reply: Any) -> list[tuple[Any, Any]]:
    """``[(key, entries)]`` of an XREAD(GROUP) reply: a RESP3 map or RESP2 pairs."""
    if reply is None:
        return []
    if isinstance(reply, dict):
        return list(reply.items())
    return [(k, entries) for k, entries in reply]


def _url_of(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    db = kwargs.get("db", 0)
    return f"redis://{host}:{port}/{db}"
