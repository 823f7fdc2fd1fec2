"""helmlog.events.redis — the Redis adapter of the store ports.

Pattern: a subpackage by concept: the store (``store.py``) holds its parts —
         the wire and topology, the appender and its read-back, the reader,
         the outbox, the consumer groups, the indexes, the registry, the
         leases — each a module owning its state; keys and scripts apart.
Role:    events layer; ``helmlog.events.RedisEventStore`` is this package's
         store (imported on first use, so ``import helmlog`` skips redis-py).

Laws: R11 (the same contract suite passes on Redis and Redis Cluster).
"""

from .keys import fact_ops, head_key, shard_keys, stream_key
from .store import RedisEventStore

# The name tests and benches knew the fact projection by.
_fact_ops = fact_ops

__all__ = ["RedisEventStore", "fact_ops", "head_key", "shard_keys", "stream_key"]
