"""The memory store's synchronous append is its awaited one (R2, R10, issue 29 item 3).

``append_sealed_now`` is the store port's optional capability an in-process
store offers (the journal flushes through it without a coroutine): the same
checks, the same stream, heads, facts and index as ``append_sealed``, and
``None`` on a subclass that changes what an append does, so a store that
injects failures is still called as it wrote its ``append_sealed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from helmlog.events import (
    DecisionFiled,
    MemoryEventStore,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    SequenceConflictError,
    StoredEvent,
    TurnEnded,
    TurnStarted,
)
from helmlog.events.lowlevel import seal

SID = "s-now"


def _records(after_seq: int = 0, prev_hash: str = "") -> list[StoredEvent]:
    row = MiddlewareDecision(
        middleware="m",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=False,
        tool_name="t",
        tool_call_id="c1",
    )
    events = [
        TurnStarted(turn=1),
        MessageCommitted(message=Message(role="user", content="hi")),
        DecisionFiled(row=row),
        TurnEnded(turn=1, final_content="done"),
    ]
    _stamped, records = seal(SID, events, after_seq=after_seq, prev_hash=prev_hash)
    return records


async def _state(store: MemoryEventStore) -> tuple[object, ...]:
    return (
        await store.read(SID),
        await store.read_head(SID),
        await store.read_facts(),
        await store.open_turns(),
        await store.remembers(SID),
        await store.writes_heads(),
    )


async def test_r2_r10_append_now_keeps_what_append_sealed_keeps() -> None:
    """R2, R10: a batch appended synchronously leaves the same stream, head,
    facts, index and marks as the same batch awaited."""
    awaited, direct = MemoryEventStore(), MemoryEventStore()
    records = _records()
    assert direct.append_sealed_now is not None
    assert await awaited.append_sealed(SID, records, 0) == 4
    assert direct.append_sealed_now(SID, records, 0) == 4
    assert await _state(awaited) == await _state(direct)


async def test_r2_append_now_refuses_what_append_sealed_refuses() -> None:
    """R2: a stale expected seq is a conflict and a gap a ValueError, with
    nothing appended, by either path."""
    store = MemoryEventStore()
    append_now = store.append_sealed_now
    assert append_now is not None
    records = _records()
    with pytest.raises(SequenceConflictError):
        append_now(SID, records, 3)
    with pytest.raises(ValueError, match="does not follow"):
        append_now(SID, [records[0], records[2]], 0)
    assert await store.read(SID) == []
    assert append_now(SID, records, 0) == 4


async def test_r2_append_now_makes_hand_built_records_whole() -> None:
    """R2, R12: records without their type or session id are kept with them,
    as ``append_sealed`` keeps them."""
    store = MemoryEventStore()
    assert store.append_sealed_now is not None
    bare = [StoredEvent(seq=r.seq, data=r.data, hash=r.hash) for r in _records()]
    store.append_sealed_now(SID, bare, 0)
    kept = await store.read(SID)
    assert [r.type for r in kept] == [r.type for r in _records()]
    assert {r.session_id for r in kept} == {SID}
    assert await store.open_turns() == []  # the turn opened and ended


class _Refusing(MemoryEventStore):
    """A store whose append refuses: it offers no synchronous path around it."""

    async def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        **_: object,
    ) -> int:
        raise ConnectionError("down")


def test_r5_a_subclass_that_changes_append_offers_no_append_now() -> None:
    """R5: a subclass overriding ``append_sealed`` (a test store injecting an
    outage) is not bypassed: it offers no ``append_sealed_now``."""
    assert _Refusing().append_sealed_now is None
    assert MemoryEventStore().append_sealed_now is not None
