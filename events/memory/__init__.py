"""helmlog.events.memory — the in-process adapter of the store ports.

Pattern: a subpackage by concept: the store (``store.py``), its facts log
         (``facts.py``), and the append-only sequence the facts log keeps
         its records in, out of the collector's view (``log.py``).
Role:    events layer; ``helmlog.events.MemoryEventStore`` is this store.

Laws: R11 (the same contract suite as Redis, with no server).
"""

from .store import MemoryEventStore

__all__ = ["MemoryEventStore"]
