"""Turns cancelled while their Redis append is in flight (issue 29 item 5).

Pattern: many sessions on one real ``RedisEventStore`` take a second turn at
         once; each turn is cancelled a different number of loop steps in, so
         the cancellations land before, during and after the appends' round
         trips (as a server's teardown cancels every turn it holds); and one
         append held on its way by the server while its writer reads back.
Role:    integration tests of the journal's and the Redis appender's
         cancellation paths, on a real redis-server.
Emits:   nothing.

Laws: G91/G66 (a run that ends by raising records one ``error.fatal``), R24
(an append whose outcome its writer does not know is read back, never
appended after), R19 (every stream still verifies), issue 29 item 5 (a typed
error or record, never a ``ValueError``; at most one log line per turn).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Sequence

import pytest
import redis.asyncio as aioredis

from helmlog import Agent, tool
from helmlog.events import StoredEvent, verify_chain
from helmlog.events.redis import RedisEventStore
from helmlog.events.testing.support import filed
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted

pytestmark = pytest.mark.redis

SESSIONS = 60


@tool(inline=True)
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


def _reply(request: ProviderRequest) -> Reply:
    if request.messages[-1].role == "user":
        call = ToolCallRequest(id="c1", name="lookup", args={"order": 7})
        return Reply(tool_calls=[call])
    return Reply(content="Done.")


def _causes(exc: BaseException | None) -> list[BaseException]:
    """An error and every error it was raised from or during."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


class Watched(RedisEventStore):
    """The real store, noting each session's appends as they are handed to it."""

    started: dict[str, list[asyncio.Event]]

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        for event in self.started.get(session_id, []):
            if not event.is_set():
                event.set()
                break
        return await super().append_sealed(session_id, records, expected_seq)


async def _cancel_mid_append(
    task: asyncio.Task[str], started: asyncio.Event, steps: int
) -> None:
    """Cancel ``task`` ``steps`` loop steps after its append was handed over:
    queued, sent, or answered (the spread a teardown lands on)."""
    await started.wait()
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()


async def test_turns_cancelled_mid_append_record_error_fatal_never_a_value_error(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29 item 5, G91, R24: turns cancelled while their appends are
    queued or on the wire leave each stream verified and ending in
    ``error.fatal``, log no ``ValueError`` and at most one line per turn."""
    store = Watched.from_url(redis_url)
    store.started = {}
    agent = (
        Agent.create(provider=scripted(respond=_reply), model="m", store=store)
        .tool(lookup)
        .build()
    )
    try:
        for s in range(SESSIONS):
            assert "Done." == await agent.run("first", session_id=f"c{s}")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="helmlog"):
            turns, cancels = [], []
            for s in range(SESSIONS):
                # A turn appends three times: tool.dispatched, its result,
                # the turn's end. Session s is cancelled at append s % 3.
                marks = [asyncio.Event() for _ in range(3)]
                store.started[f"c{s}"] = marks
                task = asyncio.create_task(agent.run("second", session_id=f"c{s}"))
                turns.append(task)
                cancels.append(_cancel_mid_append(task, marks[s % 3], s // 3 % 5))
            await asyncio.gather(*cancels)
            outcomes = await asyncio.gather(*turns, return_exceptions=True)
            await agent.idle()
        ends: dict[str, str] = {}
        for s in range(SESSIONS):
            records = await store.read(f"c{s}")
            assert verify_chain(records, session_id=f"c{s}") is None
            ends[f"c{s}"] = records[-1].type
    finally:
        await store.close()

    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
    value_errors = [
        r
        for r in caplog.records
        if r.exc_info and any(isinstance(e, ValueError) for e in _causes(r.exc_info[1]))
    ]
    assert [] == value_errors
    per_session = Counter(
        re.findall(r"session '?(c\d+)", r.getMessage())[0] for r in caplog.records
    )
    assert all(n <= 1 for n in per_session.values()), per_session
    # Every turn was cancelled mid-append, so every run ended by raising and
    # its failure is the stream's last record (G91), whatever the append did.
    assert {f"c{s}": "error.fatal" for s in range(SESSIONS)} == ends
    # Some cancellations caught appends on the wire: those batches landed and
    # were reported once each (what the ValueError stood in for before).
    assert [r for r in caplog.records if "landed" in r.getMessage()]


async def test_a_read_sees_the_outcome_of_a_cancelled_append_already_on_its_way(
    redis_url: str,
) -> None:
    """R24, issue 29 item 5: a writer cancelled once the flusher took its
    append does not know whether it landed and reads the stream back; that
    read waits for the round trip carrying the append and sees it, never the
    stream as it was before (what the writer recorded next on that view
    conflicted with the append once it landed). The server holds writes
    (``CLIENT PAUSE ... WRITE``) while it serves reads, so the append is on
    its way for as long as the pause lasts."""
    store = RedisEventStore.from_url(redis_url)
    admin = aioredis.Redis.from_url(redis_url)
    try:
        await store.append("s", filed(1), 0)
        await admin.execute_command("CLIENT", "PAUSE", 1000, "WRITE")
        writer = asyncio.create_task(store.append("s", filed(2), 1))
        await asyncio.sleep(0.2)  # taken and written by the flusher, held
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer
        assert [1, 2] == [record.seq for record in await store.read("s")]
        assert 2 == (await store.read_head("s") or pytest.fail("no head")).seq
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()
        await store.close()
