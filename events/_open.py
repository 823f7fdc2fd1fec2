"""Open the event store a URL names: the one door to every adapter.

Pattern: a factory over the adapters of the ``EventStore`` port.
Role:    events layer; ``Agent.create(store=…)``, the CLI and the cluster open
         stores by URL through it.
Emits:   nothing.

Laws: R11 (``None``/``memory://`` is a ``MemoryEventStore``;
``redis://``/``rediss://`` a ``RedisEventStore``; anything else ``ValueError``).

Why a module of its own: the port (``events/_store.py``) must not know its
adapters (``events/_memory_store.py``, ``events/_redis_store.py``), and they
build on the port; a factory inside the port
module made the two import each other. The Redis adapter is imported on first
use, so a process that never touches Redis never loads redis-py.
"""

from __future__ import annotations

from ._memory_store import MemoryEventStore
from ._store import EventStore


def open_event_store(
    url: str | None = None,
    *,
    chain_key: bytes | None = None,
    max_connections: int | None = None,
) -> EventStore:
    """The store a URL names: ``None``/``memory://`` or ``redis://``/``rediss://``.

    ``max_connections`` sizes a Redis store's blocking pool per node (it wins
    over the URL's ``?max_connections=``); the memory store ignores it.
    """
    if url is None or url == "memory://":
        return MemoryEventStore(chain_key=chain_key)
    if url.startswith(("redis://", "rediss://")):
        from ._redis_store import RedisEventStore

        return RedisEventStore.from_url(
            url, chain_key=chain_key, max_connections=max_connections
        )
    raise ValueError(
        f"unknown event store URL {url!r}: use memory:// or redis://host:port/db"
    )
