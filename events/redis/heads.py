"""The appender's head cache: the last ``(seq, hash)`` seen per session.

Pattern: a bounded LRU cache in front of the stream's last entry.
Role:    events layer, ``events/redis``; the appender seals against it, the
         read-back (R24) and every failed append forget an entry.

Laws: R2 (the cache is only a guess: the append script's seq and hash check
is the truth, and a conflict or an unknown outcome drops the entry).
"""

from __future__ import annotations

from typing import Final

from .backend import Backend, put_bounded
from .keys import records_into, stream_key
from .wire import DRIVER_ERRORS

_HEAD_CACHE_MAX: Final = 65_536


class Heads:
    """The head cache of one store, and reading a head from its stream."""

    __slots__ = ("_backend", "_heads")

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._heads: dict[str, tuple[int, str]] = {}

    def get(self, session_id: str) -> tuple[int, str] | None:
        return self._heads.get(session_id)

    def remember(self, session_id: str, head: tuple[int, str]) -> None:
        put_bounded(self._heads, session_id, head, _HEAD_CACHE_MAX)

    def forget(self, session_id: str) -> None:
        self._heads.pop(session_id, None)

    async def fetch(self, session_id: str) -> tuple[int, str]:
        """The stream's last ``(seq, hash)``, read now; ``(0, "")`` when empty."""
        key = stream_key(session_id)
        backend = self._backend
        try:
            await backend.routes.prepare()
            top = await backend.routes.one(key, "XREVRANGE", key, "+", "-", "COUNT", 1)
        except DRIVER_ERRORS as exc:
            raise backend.error("read the head of", exc) from exc
        if not top:
            self._heads.pop(session_id, None)
            return 0, ""
        record = records_into([], top, session_id)[0]
        head = (record.seq, record.hash)
        self.remember(session_id, head)
        return head
