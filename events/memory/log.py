"""An append-only sequence the cyclic collector never walks item by item.

Pattern: a ``Sequence`` kept as a list of full chunks of ``CHUNK`` items,
         each a tuple, and a short tuple tail; an append builds a new tail,
         and a tail that fills becomes a chunk.
Role:    events layer, ``events/memory``; the memory store's facts log (every
         fact published, and those owed) is kept in one, so a process's whole
         history of facts stays in memory without weighing on collections.
Why tuples: CPython stops tracking a tuple whose items are all untracked
(``StoredEvent`` and ``FactRecord`` are, ``gc=False``) the first time a
collection meets it. A list is walked item by item by every full
collection, forever, each item a cache miss in a large heap: a facts log of
a million records took 34 ms of each full walk, as chunks 3 ms (issue 29
item 2). The log's list of chunks is one visit per chunk (a tuple of chunks
would be none, but would copy itself at every chunk: quadratic). Why not
the streams: an append here costs method calls a plain list does not, and a
session's stream is appended on every step of the hot path (~2.5% of a
governed turn on ``bench/turns.py``), where the facts log is appended once
per batch of rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Final, TypeVar, overload

T = TypeVar("T")

CHUNK: Final = 32


class AppendLog(Sequence[T]):
    """Items in the order they were added; none is ever changed or removed."""

    __slots__ = ("_chunks", "_tail")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._chunks: list[tuple[T, ...]] = []
        self._tail: tuple[T, ...] = ()
        self.extend(items)

    def extend(self, items: Iterable[T]) -> None:
        """Add ``items`` at the end, in order."""
        tail = self._tail + tuple(items)
        size = len(tail)
        if size < CHUNK:
            self._tail = tail
            return
        # Each chunk sliced once from the whole, so a long batch (a facts
        # log projected after a while) is linear, not re-sliced per chunk.
        full = size - size % CHUNK
        self._chunks.extend(tail[at : at + CHUNK] for at in range(0, full, CHUNK))
        self._tail = tail[full:]

    def append(self, item: T) -> None:
        """Add ``item`` at the end."""
        self.extend((item,))

    def last(self) -> T | None:
        """The last item, or ``None`` while empty."""
        tail = self._tail
        if tail:
            return tail[-1]
        return self._chunks[-1][-1] if self._chunks else None

    def since(self, start: int) -> list[T]:
        """The items from index ``start`` on (``self[start:]`` without the
        slice's bookkeeping)."""
        if start >= len(self):
            return []
        start = max(start, 0)
        first, skip = divmod(start, CHUNK)
        chunks = self._chunks
        if first >= len(chunks):
            return list(self._tail[skip:])
        out = list(chunks[first][skip:])
        for chunk in chunks[first + 1 :]:
            out.extend(chunk)
        out.extend(self._tail)
        return out

    def __len__(self) -> int:
        return len(self._chunks) * CHUNK + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._tail or self._chunks)

    def __iter__(self) -> Iterator[T]:
        return chain(chain.from_iterable(self._chunks), self._tail)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            size = len(self)
            start, stop, step = index.indices(size)
            if step == 1 and stop == size:
                return self.since(start)
            return self.since(0)[index]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("AppendLog index out of range")
        chunk, at = divmod(index, CHUNK)
        if chunk < len(self._chunks):
            return self._chunks[chunk][at]
        return self._tail[at]

    def __repr__(self) -> str:
        return f"AppendLog({self.since(0)!r})"
