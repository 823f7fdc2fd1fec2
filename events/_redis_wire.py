"""Round trips to Redis: one node's wire, and the routes of a Redis Cluster.

Pattern: a thin transport on redis-py's blocking pools — commands packed by
         hiredis in one write, replies parsed raw — and a router that sends
         each command to the node owning its key's slot, one pipeline per node.
Role:    events layer; the transport of ``RedisEventStore`` and nothing else.
         Also holds the store's URL options (``split_url``, ``StoreOptions``).
Emits:   nothing.

Laws: R5 (a full pool waits; a wait past ``pool_timeout`` is a
``PoolExhaustedError`` the store turns into a retryable ``StoreError`` naming
the pool), R11 (the store runs unchanged on Redis Cluster: MOVED reloads the
slot map and resends, ASK resends once to the named node after ``ASKING``),
R24 (a round trip whose commands were written and whose replies did not all
come is a ``ReplyLostError``: what ran is unknown; one that failed before a
byte was written — a refused connection, an exhausted pool — is not).

Why pack our own commands instead of redis-py's command methods: the ledger
sits on every governed action, and redis-py's generic packing and reply
callbacks cost more than the round trip itself (``bench/ledger.py``). The
wire borrows redis-py's pools, connections, timeouts, TLS and errors.

Why a slot map of our own rather than ``RedisCluster``: the store pipelines
one round trip per node for a whole group commit (appends of many sessions,
then their index ops); redis-py's cluster pipeline does not take raw packed
commands, and its per-command dispatch is what the bench measures against.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import hiredis
import redis.asyncio as aioredis
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    MaxConnectionsError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from ._index import DEFAULT_SHARDS
from ._redis_scripts import SCRIPTS

log = logging.getLogger("helmlog.events")

DEFAULT_MAX_CONNECTIONS: Final = 64
DEFAULT_POOL_TIMEOUT_S: Final = 20.0
DEFAULT_FACTS_MAXLEN: Final = 1_000_000
# R24: how long an append whose reply was lost waits for the store to answer
# a read-back before its outcome is reported unknown.
DEFAULT_RESOLVE_TIMEOUT_S: Final = 5.0
_REDIRECTS_MAX: Final = 5
# Driver errors that mean "the store failed"; OSError covers sockets and
# TimeoutError, which redis-py does not always wrap.
DRIVER_ERRORS: Final = (RedisError, OSError)
_OPTIONS: Final = frozenset(
    {
        "max_connections",
        "pool_timeout",
        "shards",
        "facts_maxlen",
        "cluster",
        "resolve_timeout",
    }
)

Arg = bytes | str | int
Command = Sequence[Arg]


def public_url(url: str) -> str:
    """``url`` without credentials: no user, password or password parameter."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    query = urlencode(
        [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() not in {"password", "username"}
        ]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class StoreOptions:
    """helmlog's own options of a Redis URL (see the module docstring)."""

    __slots__ = (
        "cluster",
        "facts_maxlen",
        "max_connections",
        "pool_timeout",
        "resolve_timeout",
        "shards",
    )

    def __init__(
        self,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT_S,
        shards: int = DEFAULT_SHARDS,
        facts_maxlen: int = DEFAULT_FACTS_MAXLEN,
        cluster: bool | None = None,
        resolve_timeout: float = DEFAULT_RESOLVE_TIMEOUT_S,
    ) -> None:
        for name, value in (
            ("max_connections", max_connections),
            ("shards", shards),
            ("facts_maxlen", facts_maxlen),
        ):
            if value < 1:
                raise ValueError(f"redis event store: {name} must be >= 1, got {value}")
        if pool_timeout <= 0:
            raise ValueError(
                f"redis event store: pool_timeout must be > 0 s, got {pool_timeout}"
            )
        if not resolve_timeout >= 0:  # also refuses NaN
            raise ValueError(
                "redis event store: resolve_timeout must be >= 0 s, "
                f"got {resolve_timeout}"
            )
        self.max_connections = max_connections
        self.resolve_timeout = resolve_timeout
        self.pool_timeout = pool_timeout
        self.shards = shards
        self.facts_maxlen = facts_maxlen
        self.cluster = cluster


def split_url(url: str) -> tuple[str, StoreOptions]:
    """``(the URL redis-py gets, helmlog's options)``: our parameters removed."""
    parts = urlsplit(url)
    kept: list[tuple[str, str]] = []
    given: dict[str, str] = {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k in _OPTIONS:
            given[k] = v
        else:
            kept.append((k, v))
    try:
        cluster = given.get("cluster", "auto").lower()
        if cluster not in {"auto", "yes", "no", "true", "false", "1", "0"}:
            raise ValueError(f"cluster must be auto, yes or no, got {cluster!r}")
        options = StoreOptions(
            max_connections=int(given.get("max_connections", DEFAULT_MAX_CONNECTIONS)),
            pool_timeout=float(given.get("pool_timeout", DEFAULT_POOL_TIMEOUT_S)),
            shards=int(given.get("shards", DEFAULT_SHARDS)),
            facts_maxlen=int(given.get("facts_maxlen", DEFAULT_FACTS_MAXLEN)),
            cluster=None if cluster == "auto" else cluster in {"yes", "true", "1"},
            resolve_timeout=float(
                given.get("resolve_timeout", DEFAULT_RESOLVE_TIMEOUT_S)
            ),
        )
    except ValueError as exc:
        raise ValueError(
            f"bad redis event store URL {public_url(url)!r}: {exc}"
        ) from None
    clean = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment)
    )
    return clean, options


def _pack(commands: Sequence[Command]) -> bytes:
    """RESP-encode commands (arguments are bytes, str or int) into one write."""
    pack = hiredis.pack_command
    # hiredis's stub types the argument as a 1-tuple; it takes any length.
    return b"".join([pack(tuple(command)) for command in commands])  # type: ignore[arg-type]


class PoolExhaustedError(RedisConnectionError):
    """No connection of a full pool came free in time (becomes a StoreError)."""


class ReplyLostError(RedisConnectionError):
    """Commands were written and their replies did not come (R24).

    Whether they ran is unknown: the server may have run them and died, or
    closed the socket, before its reply arrived. A failure before anything
    was written (a refused connection, an exhausted pool) is never this.
    """


def _lost(name: str, exc: BaseException) -> ReplyLostError:
    lost = ReplyLostError(
        f"the reply from {name} was lost after the commands were sent "
        f"({type(exc).__name__}: {exc})"
    )
    lost.__cause__ = exc
    return lost


def _closed_by_peer(conn: Any) -> bool:
    """Whether the server closed a pooled connection we have not written to.

    Read from the connection's stream reader (redis-py keeps it as
    ``_reader``): end of stream, or a reset, already seen by the event loop.
    """
    reader = getattr(conn, "_reader", None)
    return reader is not None and (reader.at_eof() or reader.exception() is not None)


def _marked(replies: list[Any], name: str, only: Sequence[int] | None = None) -> None:
    """Error replies of commands an earlier try sent, as ``ReplyLostError``.

    A resend's error reply (``LOADING`` while a restarted server reads its
    AOF, ``NOSCRIPT``) says only that the resend did not run; the first
    send's fate is still unknown. A success reply is the truth either way:
    the scripts are idempotent, so a resend reports an append already in
    the stream as landed.
    """
    for i in range(len(replies)) if only is None else only:
        if isinstance(replies[i], ResponseError):
            replies[i] = _lost(name, replies[i])


class Wire:
    """Round trips on one node's redis-py pool: our packing, hiredis replies.

    Replies come back as the server sent them (no redis-py callbacks); an
    error reply takes its command's place as a ``ResponseError``.
    """

    def __init__(self, pool: aioredis.ConnectionPool, name: str) -> None:
        self.pool = pool
        self.name = name

    async def _acquire(self) -> Any:
        try:
            return await self.pool.get_connection()  # type: ignore[no-untyped-call]
        except MaxConnectionsError as exc:
            raise self._exhausted(None) from exc
        except RedisConnectionError as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise self._exhausted(getattr(self.pool, "timeout", None)) from exc
            raise

    def _exhausted(self, waited: float | None) -> PoolExhaustedError:
        size = getattr(self.pool, "max_connections", "?")
        after = f" for {waited:g} s" if waited is not None else ""
        return PoolExhaustedError(
            f"the pool of {size} connections to {self.name} was exhausted{after} "
            "(raise ?max_connections= or ?pool_timeout=)"
        )

    async def call(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one write; their replies, in order.

        Raises:
            ReplyLostError: the commands were sent (by this try or the one
                before it) and their replies did not come (R24).
        """
        replies, lost = await self._call(commands)
        if lost:
            _marked(replies, self.name)
        return replies

    async def _call(self, commands: Sequence[Command]) -> tuple[list[Any], bool]:
        """``call``'s replies, unmarked, and whether a first try was sent and
        its reply lost (then an error reply speaks only for the resend)."""
        packed = _pack(commands)
        lost: BaseException | None = None
        for attempt in (1, 2):
            try:
                conn = await self._acquire()
            except DRIVER_ERRORS as exc:
                # Nothing of this try was written; the one before may have been.
                if lost is not None:
                    raise _lost(self.name, lost) from exc
                raise
            sent = False
            try:
                if conn.is_connected and _closed_by_peer(conn):
                    # The server closed it before we wrote (a restart):
                    # nothing written to it could run; connect afresh.
                    await conn.disconnect()
                if not conn.is_connected:
                    await conn.connect()
                # R24: from the first byte written, what runs is unknown
                # until every reply has come.
                sent = True
                await conn.send_packed_command(packed, check_health=False)
                replies: list[Any] = []
                # One deadline (the socket timeout) for the whole round trip,
                # not one per reply: redis-py's per-read timeout costs more
                # than parsing a reply (bench/ledger.py).
                async with asyncio.timeout(conn.socket_timeout):
                    for _ in commands:
                        try:
                            # Stored bytes stay bytes, whatever the client
                            # decodes; math.inf: no per-read timeout.
                            replies.append(
                                await conn.read_response(
                                    disable_decoding=True, timeout=math.inf
                                )
                            )
                        except ResponseError as exc:
                            replies.append(exc)
                return replies, lost is not None
            except RedisConnectionError as exc:
                await conn.disconnect()
                if sent:
                    lost = exc
                # A pooled socket the server closed (a restart) fails once.
                # Sending again is safe: reads are reads, the scripts are
                # idempotent, and facts are at-least-once (R4).
                if attempt == 2:
                    if lost is not None:
                        raise _lost(self.name, exc) from exc
                    raise
            except DRIVER_ERRORS as exc:
                # A timeout: the server may still be running the commands.
                await conn.disconnect()
                if sent or lost is not None:
                    raise _lost(self.name, exc) from exc
                raise
            except BaseException:
                # Replies may be left unread: the socket must not be reused.
                await conn.disconnect()
                raise
            finally:
                await self.pool.release(conn)
        raise AssertionError("unreachable")

    async def call_loaded(self, commands: Sequence[Command]) -> list[Any]:
        """``call``, loading the scripts and resending what met NOSCRIPT."""
        replies, lost = await self._call(commands)
        missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if missing:
            # The server lost its script cache (a restart, a new node):
            # NOSCRIPT means the script did not run, so resending is safe.
            try:
                await self.call([("SCRIPT", "LOAD", s) for s in SCRIPTS])
                again, lost_again = await self._call([commands[i] for i in missing])
            except DRIVER_ERRORS as exc:
                if lost and not isinstance(exc, ReplyLostError):
                    raise _lost(self.name, exc) from exc
                raise
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
            if lost_again and not lost:
                _marked(replies, self.name, missing)
        if lost:
            _marked(replies, self.name)
        return replies


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
        reply = (await self.call([(key, command)]))[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def close(self) -> None:
        for pool in self._owned:
            await pool.disconnect()
