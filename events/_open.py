"""Open the event store a URL names: the one door to every adapter.

Pattern: a factory over the adapters of the store ports.
Role:    events layer; ``Agent.create(store=…)``, the CLI and the cluster open
         stores by URL through it.

Laws: R11 (``None``/``memory://`` is a ``MemoryEventStore``;
``redis://``/``rediss://`` a ``RedisEventStore``; anything else ``ValueError``);
issue 30 (the signer from the environment).
A module of its own so the ports (``_store.py``) never name their adapters;
``events/redis`` is imported on first use, so redis-py loads only if needed.
"""

from __future__ import annotations

from ._signed_heads import HeadSigner
from ._store import EventStore
from .memory import MemoryEventStore


def open_event_store(
    url: str | None = None,
    *,
    chain_key: bytes | None = None,
    max_connections: int | None = None,
    signer: HeadSigner | None = None,
) -> EventStore:
    """The store a URL names: ``None``/``memory://`` or ``redis://``/``rediss://``.

    ``max_connections`` sizes a Redis store's blocking pool per node (it wins
    over the URL's ``?max_connections=``); the memory store ignores it.
    ``signer`` signs and checks session heads (issue 30); by default it is
    read from ``$HELMLOG_SIGNING_KEY``/``$HELMLOG_PUBLIC_KEYS`` (unset: none).
    """
    if signer is None:
        signer = HeadSigner.from_env()
    if url is None or url == "memory://":
        return MemoryEventStore(chain_key=chain_key, signer=signer)
    if url.startswith(("redis://", "rediss://")):
        from .redis import RedisEventStore

        return RedisEventStore.from_url(
            url, chain_key=chain_key, max_connections=max_connections, signer=signer
        )
    raise ValueError(
        f"unknown event store URL {url!r}: use memory:// or redis://host:port/db"
    )
