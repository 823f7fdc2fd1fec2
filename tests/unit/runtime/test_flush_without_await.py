"""A journal flushes through a store's synchronous append, recording the same bytes.

On the memory store the journal appends through ``append_sealed_now`` (the
store port's optional capability: no coroutine per flush, issue 29 item 3).
The record must not depend on it: the same governed turn, on the same clock
and ids, leaves the same stored bytes and chain hashes on a store that only
awaits (R10), and a store whose ``append_sealed`` refuses is still the one
asked, so its refusal is the run's (R5). ``Journal.flush_now`` flushes with
no coroutine at all there, and hands back what must be awaited elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    LedgerAppendError,
    MemoryEventStore,
    Message,
    MessageCommitted,
    SequenceConflictError,
    StoredEvent,
    TurnStarted,
)
from helmlog.runtime.lowlevel import Journal, Listeners
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import FakeClock, Recorder, counter_ids


@tool(inline=True)
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


class AwaitedOnly(MemoryEventStore):
    """The memory store reached only through ``append_sealed`` (awaited)."""

    async def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        **events: Any,
    ) -> int:
        return await super().append_sealed(session_id, records, expected_seq)


class Down(MemoryEventStore):
    """A store whose every append fails."""

    async def append_sealed(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        **events: Any,
    ) -> int:
        raise ConnectionError("the store is down")


def _agent(store: MemoryEventStore) -> Agent:
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="lookup", args={"order": 7})]
            ),
            "Done.",
        ]
    )
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_call=lambda call: allow(),
        on_tool_result=lambda res: allow({**res.result, "checked": True}, "stamped"),
    )
    return (
        Agent.create(
            provider=model,
            model="m",
            store=store,
            clock=FakeClock(),
            ids=counter_ids(),
            traces=lambda: "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        )
        .tool(lookup)
        .tool_middleware(stamp)
        .build()
    )


async def test_r10_a_flush_without_await_records_the_same_bytes() -> None:
    """R10, issue 29 item 3: a turn flushed through ``append_sealed_now``
    stores the same records (bytes, hashes, seqs) as through ``append_sealed``."""
    direct, awaited = MemoryEventStore(), AwaitedOnly()
    assert direct.append_sealed_now is not None
    assert awaited.append_sealed_now is None
    assert await _agent(direct).run("Look order 7 up.") == "Done."
    assert await _agent(awaited).run("Look order 7 up.") == "Done."
    sid = "session-1"
    mine, theirs = await direct.read(sid), await awaited.read(sid)
    assert len(mine) > 10
    assert [(r.seq, r.data, r.hash, r.type) for r in mine] == [
        (r.seq, r.data, r.hash, r.type) for r in theirs
    ]
    assert await direct.read_facts() == await awaited.read_facts()


async def test_r5_a_store_that_overrides_its_append_is_the_one_asked() -> None:
    """R5: a memory store subclass whose append fails is not bypassed by the
    synchronous path: the run fails with a ledger append error."""
    with pytest.raises(LedgerAppendError):
        await _agent(Down()).run("Look order 7 up.")


def _journal(store: MemoryEventStore, *watchers: Any) -> Journal:
    listeners = Listeners()
    for watcher in watchers:
        listeners.attach(watcher)
    return Journal(store, "s-flush", listeners, FakeClock())


async def test_r5_flush_now_appends_then_delivers_without_a_coroutine() -> None:
    """R5, issue 29 item 3: on the memory store ``flush_now`` appends the
    batch and delivers it before returning, and leaves nothing to await."""
    store = MemoryEventStore()
    seen = Recorder()
    journal = _journal(store, seen)
    journal.add(TurnStarted(turn=1))
    journal.add(MessageCommitted(message=Message(role="user", content="hi")))
    assert journal.flush_now() is None
    assert [r.seq for r in await store.read("s-flush")] == [1, 2]
    assert journal.flushed_seq == 2 and journal.pending_count == 0
    assert seen.types == ["agent.turn_start", "message.committed"]
    assert journal.flush_now() is None  # nothing buffered: nothing to do


async def test_r20_flush_now_hands_back_the_conflict_and_fences() -> None:
    """R20: a batch another writer beat is not appended; the coroutine
    ``flush_now`` hands back raises the conflict, and the journal is fenced."""
    store = MemoryEventStore()
    first, second = _journal(store), _journal(store)
    first.add(TurnStarted(turn=1))
    assert first.flush_now() is None
    second.add(TurnStarted(turn=1))
    pending = second.flush_now()
    assert pending is not None
    with pytest.raises(SequenceConflictError):
        await pending
    assert second.broken and second.fenced
    assert [r.seq for r in await store.read("s-flush")] == [1]


async def test_r24_flush_now_on_a_store_that_waits_is_flush() -> None:
    """R24: on a store without ``append_sealed_now`` (its append awaited),
    ``flush_now`` hands back ``flush`` itself: awaited, it appends; a failed
    append is the same ``LedgerAppendError`` as ``flush``'s."""
    awaited = AwaitedOnly()
    journal = _journal(awaited)
    journal.add(TurnStarted(turn=1))
    pending = journal.flush_now()
    assert pending is not None and journal.pending_count == 1
    await pending
    assert [r.seq for r in await awaited.read("s-flush")] == [1]
    down = _journal(Down())
    down.add(TurnStarted(turn=1))
    pending = down.flush_now()
    assert pending is not None
    with pytest.raises(LedgerAppendError):
        await pending
    assert down.broken
