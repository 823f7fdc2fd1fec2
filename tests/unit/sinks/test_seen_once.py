"""R4 in bounded memory: a sink's seen-set skips repeats, forgets old seqs whole.

``SeenOnce`` (sinks/_once.py) is what every sink asks before acting. It must
skip a repeat of a recent event, let an older one that arrives late (a
reclaimed fact) through exactly once, keep its memory bounded however long the
sink lives, and, for what it has forgotten, err on delivering again, never on
skipping.
"""

from __future__ import annotations

from dataclasses import dataclass

from helmlog.sinks._once import SeenOnce


@dataclass(frozen=True)
class Row:
    session_id: str
    seq: int | None


def test_r4_a_repeat_within_the_window_is_skipped() -> None:
    """A redelivered recent event has the effect of one."""
    once = SeenOnce(window=8)
    assert [True, True, False, False] == [
        once.first(Row("s", 1)),
        once.first(Row("s", 2)),
        once.first(Row("s", 1)),
        once.first(Row("s", 2)),
    ]


def test_r4_a_late_older_event_passes_once() -> None:
    """A reclaimed fact older than one already handled is not dropped."""
    once = SeenOnce(window=8)
    assert [True, True, False] == [
        once.first(Row("s", 12)),
        once.first(Row("s", 10)),
        once.first(Row("s", 10)),
    ]


def test_r4_transient_events_always_pass() -> None:
    """An event without a seq (a token) has no place to be seen at."""
    once = SeenOnce()
    assert [True, True] == [once.first(Row("s", None)), once.first(Row("s", None))]


def test_r4_one_long_session_keeps_a_bounded_window() -> None:
    """A session of 100,000 events keeps at most twice the window of seqs."""
    once = SeenOnce(window=64)
    for seq in range(100_000):
        assert once.first(Row("s", seq))
    assert len(once) <= 2 * 64 + 1
    assert not once.first(Row("s", 99_999 - 10))  # the recent ones still count


def test_r4_many_sessions_keep_the_most_recently_touched() -> None:
    """Past ``sessions``, the least recently touched session is forgotten."""
    once = SeenOnce(sessions=3)
    for name in ("a", "b", "c"):
        once.first(Row(name, 1))
    once.first(Row("a", 2))  # "a" touched again: "b" is now the oldest
    once.first(Row("d", 1))
    assert [False, True, False] == [
        once.first(Row("a", 1)),
        once.first(Row("b", 1)),  # forgotten: delivered again, not skipped
        once.first(Row("d", 1)),
    ]


def test_r4_what_is_forgotten_is_delivered_again_never_skipped() -> None:
    """An event older than the window counts as new: written twice, not lost."""
    once = SeenOnce(window=4)
    for seq in range(100):
        once.first(Row("s", seq))
    assert once.first(Row("s", 0))


def test_r4_seen_and_done_mark_only_after_the_write() -> None:
    """``seen`` is false until ``done`` (a failed write stays deliverable)."""
    once = SeenOnce()
    row = Row("s", 3)
    before = once.seen(row)
    once.done(row)
    assert [False, True] == [before, once.seen(row)]
    once.mark("t", 9)
    assert once.seen(Row("t", 9))


def test_r4_an_append_checked_at_once_keeps_only_its_unseen_events() -> None:
    """``fresh`` is ``first`` over a whole append: one seen-set for both, so
    a repeat is skipped whichever way it comes, and the window still holds."""
    once = SeenOnce(window=8)
    assert once.first(Row("s", 2))
    rows = [Row("s", seq) for seq in (1, 2, 3)]
    assert [rows[0], rows[2]] == once.fresh("s", rows)
    assert [] == once.fresh("s", rows)
    assert not once.first(Row("s", 3))
    assert [Row("t", 1)] == once.fresh("t", [Row("t", 1)])
    once.fresh("s", [Row("s", seq) for seq in range(4, 40)])
    assert len(once) <= 2 * 8 + 1
