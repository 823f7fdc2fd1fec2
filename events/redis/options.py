"""A Redis store's URL: helmlog's own options, and the URL errors may name.

Pattern: a value object (``StoreOptions``) parsed from the URL's query
         (``split_url``); helmlog's parameters are stripped before the URL
         reaches redis-py, which parses the rest (``socket_timeout`` too).
Role:    events layer, ``events/redis``; read by the store, its wire and its
         cluster topology. ``public_url`` drops credentials from what logs say.

Laws: R5 (``pool_timeout``: a full pool waits, then fails closed), R24
(``resolve_timeout``: how long a lost reply is read back).

Why a default socket timeout (``DEFAULT_SOCKET_TIMEOUT_S``): with none, a
partitioned or stopped Redis hangs an append forever instead of failing
closed; ``?socket_timeout=`` in the URL overrides it.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._index import DEFAULT_SHARDS

DEFAULT_MAX_CONNECTIONS: Final = 64
DEFAULT_POOL_TIMEOUT_S: Final = 20.0
DEFAULT_FACTS_MAXLEN: Final = 1_000_000
# R24: how long an append whose reply was lost waits for the store to answer
# a read-back before its outcome is reported unknown.
DEFAULT_RESOLVE_TIMEOUT_S: Final = 5.0
# The read deadline of every round trip unless the URL says ?socket_timeout=
# (redis-py's own parameter): a stopped server fails an append, never hangs it.
DEFAULT_SOCKET_TIMEOUT_S: Final = 10.0
# How a helmlog store connects: quick to give up on a dead address.
CONNECT_TIMEOUT_S: Final = 2.0
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
    """helmlog's own options of a Redis URL.

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
        socket_timeout   (redis-py's own, kept in the URL) the read deadline
                         of a round trip, default 10 s here: a stopped
                         server fails an append, never hangs it
    """

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
