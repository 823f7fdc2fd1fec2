"""A Redis append handed its records' events publishes the same facts (R4).

Pattern: differential tests on a real redis-server: the same batch, or the
         same governed turn, appended once with its decoded events (what a
         journal hands ``append_sealed``, issue 29 item 1) and once without
         (the store decodes the rows' bytes); the streams and the published
         facts must be byte-identical.
Role:    integration tests of ``RedisEventStore.append_sealed(events=)`` and
         of ``helmlog.events.lowlevel.append_with_events``.
Emits:   nothing.

Laws: R4 (a fact is its row's projection, the same bytes however projected),
R10 (the stored bytes and hashes do not depend on the events), G49 (no value
in a fact), issue 29 item 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    DecisionFiled,
    Event,
    MiddlewareDecision,
    StoredEvent,
    TurnEnded,
    TurnStarted,
    UnknownEvent,
)
from helmlog.events._facts import fact_records
from helmlog.events._index import DEFAULT_SHARDS
from helmlog.events.lowlevel import append_with_events, fact_for, seal_event
from helmlog.events.redis import RedisEventStore, shard_keys
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import FakeClock, counter_ids

pytestmark = pytest.mark.redis

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class ThreeArguments(RedisEventStore):
    """The real store, called as the port was before ``events``: three
    arguments, so ``append_with_events`` hands it no events."""

    async def append_sealed(  # type: ignore[override]
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        return await super().append_sealed(session_id, records, expected_seq)


def row(n: int) -> MiddlewareDecision:
    """A row with values (before/after) and text a JSON encoder escapes."""
    return MiddlewareDecision(
        middleware=f"link-{n}",
        moment="after-tool",
        at="tool",
        iteration=n,
        outcome="allow",
        changed=True,
        why='masked "card" — ünïcode \\ \n',
        tool_name="refund",
        tool_call_id=f"call-{n}",
        before={"card": "4111 1111 1111 1111", "n": [n, 1.5, None]},
        after={"card": "****", "n": [n, 1.5, None]},
    )


def journal_batch(
    session_id: str, events: list[Event], after: int, prev_hash: str
) -> tuple[list[StoredEvent], list[Event | UnknownEvent]]:
    """Records and their events, sealed one by one as a journal seals them."""
    records: list[StoredEvent] = []
    recorded: list[Event | UnknownEvent] = []
    for i, event in enumerate(events):
        record, decoded = seal_event(
            event, session_id, after + i + 1, prev_hash, 1_700_000_000_000 + i
        )
        records.append(record)
        recorded.append(decoded)
        prev_hash = record.hash
    return records, recorded


async def facts_published(url: str) -> list[tuple[bytes, bytes, bytes]]:
    """Every facts shard's entries (session id, seq, data), shard by shard."""
    client: Any = aioredis.Redis.from_url(url)
    try:
        out: list[tuple[bytes, bytes, bytes]] = []
        for n in range(DEFAULT_SHARDS):
            for _id, fields in await client.xrange(shard_keys(n)[0]):
                out.append((fields[b"session_id"], fields[b"seq"], fields[b"data"]))
        return out
    finally:
        await client.aclose()


async def flush(url: str) -> None:
    client: Any = aioredis.Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


async def appended(
    url: str,
    session_id: str,
    batches: list[tuple[list[StoredEvent], list[Event | UnknownEvent]]],
    *,
    with_events: bool,
) -> tuple[list[StoredEvent], list[tuple[bytes, bytes, bytes]]]:
    """Append ``batches`` on a clean database; the stream and the facts."""
    await flush(url)
    store = RedisEventStore.from_url(url)
    try:
        seq = 0
        for records, recorded in batches:
            seq = await store.append_sealed(
                session_id,
                records,
                seq,
                events=recorded if with_events else None,
            )
        await store.publish_facts(session_id)
        stream = await store.read(session_id)
    finally:
        await store.close()
    return stream, await facts_published(url)


async def test_r4_facts_projected_from_the_events_equal_the_facts_decoded_from_bytes(
    redis_url: str,
) -> None:
    """R4, R10, issue 29 item 1: a batch of rows with values, an older
    stream's row and its stored fact, and turn records, appended with the
    journal's decoded events, stores the same bytes and publishes the same
    facts as the same batch appended without them."""
    sid = "s-events"
    first = [TurnStarted(turn=1), DecisionFiled(row=row(1)), DecisionFiled(row=row(2))]
    records, recorded = journal_batch(sid, list(first), 0, "")
    second = [
        DecisionFiled(row=row(3)),
        fact_for(row(3)),  # an older writer's stored fact follows its row
        DecisionFiled(row=row(4)),
        TurnEnded(turn=1, final_content="done"),
    ]
    more, more_recorded = journal_batch(sid, second, len(first), records[-1].hash)
    batches = [(records, recorded), (more, more_recorded)]

    stream_with, facts_with = await appended(redis_url, sid, batches, with_events=True)
    stream_without, facts_without = await appended(
        redis_url, sid, batches, with_events=False
    )

    assert [(r.seq, r.data, r.hash) for r in stream_without] == [
        (r.seq, r.data, r.hash) for r in stream_with
    ]
    assert facts_without == facts_with
    # And both are what decoding the records gives (the projection's rule).
    decoded = [
        (sid.encode(), str(seq).encode(), data)
        for seq, data in fact_records(sid, [*records, *more])
    ]
    assert decoded == facts_with
    assert 4 == len(facts_with)
    assert all(b"4111" not in data for _sid, _seq, data in facts_with)  # G49


async def test_issue29_events_that_are_not_the_records_are_a_value_error(
    redis_url: str,
) -> None:
    """Issue 29 item 1: events of another length or seqs are refused with a
    clear ``ValueError`` before anything is sent; the stream stays empty."""
    sid = "s-mismatch"
    records, recorded = journal_batch(
        sid, [TurnStarted(turn=1), DecisionFiled(row=row(1))], 0, ""
    )
    store = RedisEventStore.from_url(redis_url)
    try:
        with pytest.raises(ValueError, match="not theirs"):
            await store.append_sealed(sid, records, 0, events=recorded[:1])
        with pytest.raises(ValueError, match="not theirs"):
            await store.append_sealed(sid, records, 0, events=recorded[::-1])
        assert [] == await store.read(sid)
    finally:
        await store.close()


@tool(inline=True)
def refund(order: int) -> dict[str, Any]:
    """Refund an order."""
    return {"order": order, "card": "4111 1111 1111 1111"}


def _reply(request: ProviderRequest) -> Reply:
    if request.messages[-1].role == "user":
        call = ToolCallRequest(id="c1", name="refund", args={"order": 7})
        return Reply(tool_calls=[call])
    return Reply(content="Refunded.")


async def governed_turns(store: RedisEventStore) -> list[StoredEvent]:
    """Two governed turns with a masking rule, on a fixed clock and ids."""
    mask = ToolMiddleware(
        name="mask",
        on_tool_result=lambda res: allow({**res.result, "card": "****"}, "masked"),
    )
    passes = ToolMiddleware(name="pass", on_tool_call=lambda call: allow())
    agent = (
        Agent.create(
            provider=scripted(respond=_reply),
            model="m",
            store=store,
            clock=FakeClock(),
            ids=counter_ids(),
            traces=lambda: TRACEPARENT,
        )
        .tool(refund)
        .tool_middleware(passes, mask)
        .build()
    )
    assert "Refunded." == await agent.run("refund 7", session_id="s-turn")
    assert "Refunded." == await agent.run("again", session_id="s-turn")
    await agent.idle()
    await store.publish_facts("s-turn")
    return await store.read("s-turn")


async def test_r4_a_journals_turns_publish_the_same_facts_with_or_without_events(
    redis_url: str,
) -> None:
    """R4, R10, issue 29 item 1: the same governed turns recorded through the
    journal on a store that takes the journal's events and on one called
    with three arguments store the same bytes and publish the same facts."""
    results = []
    for kind in (RedisEventStore, ThreeArguments):
        await flush(redis_url)
        store = kind.from_url(redis_url)
        try:
            stream = await governed_turns(store)
        finally:
            await store.close()
        facts = await facts_published(redis_url)
        results.append(([(r.seq, r.data, r.hash) for r in stream], facts))
    (stream_with, facts_with), (stream_without, facts_without) = results
    assert stream_without == stream_with
    assert facts_without == facts_with
    assert facts_with  # the rules' rows each published a fact
    assert all(b"4111" not in data for _sid, _seq, data in facts_with)  # G49


def test_issue29_append_with_events_calls_each_store_as_it_takes_them() -> None:
    """Issue 29 item 1: the helper hands ``events`` to a store whose
    ``append_sealed`` takes them and calls a three-argument one without."""
    seen: list[tuple[Any, ...]] = []

    class Takes:
        def append_sealed(
            self,
            session_id: str,
            records: Sequence[StoredEvent],
            expected_seq: int,
            *,
            events: Any = None,
        ) -> Any:
            seen.append(("takes", expected_seq, events))
            return None

    class Older:
        def append_sealed(
            self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
        ) -> Any:
            seen.append(("older", expected_seq))
            return None

    marker: list[Event | UnknownEvent] = [TurnStarted(turn=1)]
    append_with_events(Takes(), "s", [], 3, marker)  # type: ignore[arg-type]
    append_with_events(Older(), "s", [], 4, marker)  # type: ignore[arg-type]
    assert [("takes", 3, marker), ("older", 4)] == seen
