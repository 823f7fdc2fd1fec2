"""A Redis store's bounded per-session maps (heads, vouching) under their bound.

Pattern: fill a map through ``put_bounded`` past its bound and read what it
         kept, in order.
Role:    unit tests of ``events/redis/backend.put_bounded``.
Emits:   nothing.

Laws: issue 29 item 1 (a full map evicts a share at once: one eviction a
put walked the dict's deleted entries, ~7 us a put at 65,536 sessions);
R19/R4 unchanged (a cached head is only a guess the append script checks,
and an unvouched session's close waits for ``publish_facts``: dropping an
entry costs a round trip, never a wrong record).
"""

from __future__ import annotations

from helmlog.events.redis.backend import EVICT_SHARE, put_bounded

LIMIT = 64


def _full() -> dict[str, int]:
    items: dict[str, int] = {}
    for i in range(LIMIT):
        put_bounded(items, f"s{i}", i, LIMIT)
    return items


def test_a_bounded_map_keeps_at_most_its_bound_and_its_newest_entries() -> None:
    """Issue 29: however many sessions pass, the map holds at most ``limit``,
    the most recently put last, in put order."""
    items = _full()
    for i in range(LIMIT, 5 * LIMIT):
        put_bounded(items, f"s{i}", i, LIMIT)
        assert len(items) <= LIMIT
    kept = list(items)
    assert kept == [f"s{i}" for i in range(5 * LIMIT - len(kept), 5 * LIMIT)]


def test_a_session_put_again_moves_last_and_outlives_older_ones() -> None:
    """Issue 29: a put moves its session to the end (least recently put goes
    first), and putting a session already held never evicts another."""
    items = _full()
    put_bounded(items, "s0", 100, LIMIT)
    assert (len(items), next(reversed(items)), items["s0"]) == (LIMIT, "s0", 100)
    put_bounded(items, "new", -1, LIMIT)
    assert "s0" in items and "s1" not in items and "new" in items


def test_a_full_map_drops_its_oldest_share_at_once() -> None:
    """Issue 29 item 1: the first put past the bound drops the oldest
    ``limit // EVICT_SHARE``; the puts after it drop nothing until the map
    is full again (one walk of the dict per share, not per put)."""
    items = _full()
    share = LIMIT // EVICT_SHARE
    put_bounded(items, "first", 0, LIMIT)
    assert len(items) == LIMIT - share + 1
    assert next(iter(items)) == f"s{share}"
    for i in range(share - 1):
        put_bounded(items, f"more{i}", i, LIMIT)
    assert len(items) == LIMIT and next(iter(items)) == f"s{share}"


def test_a_bound_smaller_than_the_share_still_evicts_one() -> None:
    """A map bounded below ``EVICT_SHARE`` drops one entry a put, as before."""
    items: dict[str, int] = {}
    for i in range(10):
        put_bounded(items, f"s{i}", i, 2)
    assert list(items) == ["s8", "s9"]
