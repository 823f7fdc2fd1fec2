"""helmlog.events.memory — the in-process adapter of the store ports.

Pattern: a subpackage by concept: the store (``store.py``) and its facts log
         (``facts.py``).
Role:    events layer; ``helmlog.events.MemoryEventStore`` is this store.

Laws: R11 (the same contract suite as Redis, with no server).
"""

from .store import MemoryEventStore

__all__ = ["MemoryEventStore"]
