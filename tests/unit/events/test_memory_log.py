"""``AppendLog``: the memory store's facts log, out of the collector's view.

Pattern: the same appends made to an ``AppendLog`` and to a plain list, read
         back every way the store reads them; then the collector asked what
         it still tracks (``gc.is_tracked``) once it has met the chunks.
Role:    unit tests of ``events/memory/log.py`` (the memory store's facts
         log; the store contract suite covers the store over it).
Emits:   nothing.

Laws: issue 29 item 2 (a resident history is not walked record by record by
every full collection); R4/R11 (the facts log reads back exactly what was
published, in order, from any place).
"""

from __future__ import annotations

import gc
import random

import pytest

from helmlog.events import StoredEvent
from helmlog.events.memory.log import CHUNK, AppendLog


def _record(seq: int) -> StoredEvent:
    return StoredEvent(seq=seq, data=b"{}", hash=f"h{seq}", type="t", session_id="s")


def test_an_append_log_reads_back_as_the_list_of_its_appends() -> None:
    """R4: every length of append, across chunk edges, reads back in order by
    index, negative index, ``since``, slices, iteration and ``last``."""
    rng = random.Random(29)
    log: AppendLog[int] = AppendLog()
    mirror: list[int] = []
    assert (None, [], 0, False) == (log.last(), log.since(0), len(log), bool(log))
    for _ in range(60):
        batch = list(range(len(mirror), len(mirror) + rng.choice((0, 1, 3, 31, 70))))
        if len(batch) == 1:
            log.append(batch[0])
        else:
            log.extend(batch)
        mirror.extend(batch)
        assert len(mirror) == len(log)
        assert (mirror[-1] if mirror else None) == log.last()
        assert mirror == list(log)
        for start in {0, 1, CHUNK - 1, CHUNK, len(mirror) // 2, len(mirror) + 5}:
            assert mirror[start:] == log.since(start) == log[start:]
    assert mirror[-1] == log[-1]
    assert mirror[-CHUNK - 1] == log[-CHUNK - 1]
    assert mirror[CHUNK + 2 : 3 * CHUNK : 5] == log[CHUNK + 2 : 3 * CHUNK : 5]
    assert mirror[::-1] == log[::-1]
    assert mirror == AppendLog(mirror).since(0)


@pytest.mark.parametrize("index", [10_000, -10_000])
def test_an_index_past_either_end_is_an_index_error(index: int) -> None:
    """A sequence's contract: past the end is ``IndexError``, never a guess."""
    with pytest.raises(IndexError, match="AppendLog index out of range"):
        AppendLog(range(40))[index]


def test_full_chunks_of_untracked_records_leave_the_collectors_view() -> None:
    """Issue 29 item 2: once a collection has met them, a log's full chunks
    are untracked, so only its few containers remain to walk."""
    log = AppendLog(_record(seq) for seq in range(1, 5 * CHUNK + 4))
    gc.collect()
    chunks = log._chunks
    assert (5, [False] * 5) == (len(chunks), [gc.is_tracked(c) for c in chunks])
    assert not gc.is_tracked(log._tail)
