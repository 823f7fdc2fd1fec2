"""Lossless facts, through the runtime, on memory, Redis and Redis Cluster (R4).

Publication is an outbox: whoever next touches a session publishes the
facts its writer left unpublished. A run whose facts shard refused them
answers as usual (R5), and the session's next activation — another process,
once the shard healed — publishes each of its facts exactly once. An append
whose reply was lost is read back by the Redis store before the run hears of
it (R24): it landed, so the run goes on and its facts are published once. An
append reported unknown that landed after all is recognised by the session's
next activation (a log line naming the session and the seqs, and the
journal's ``reconciled``), and its facts reach the facts streams once.

Why the lost reply is injected in the store, after the real append: that is
what a dropped connection does — the script ran, the reply never came — so
the store's own lost-reply path runs, not a fake of it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from helmlog import (
    Agent,
    LedgerOutcomeUnknownError,
    ToolMiddleware,
    allow,
    tool,
)
from helmlog.events import (
    EventStore,
    MemoryEventStore,
    StoredEvent,
    open_event_store,
)
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events.redis import RedisEventStore, _fact_ops, shard_keys
from helmlog.events.redis.appender import Appender
from helmlog.events.redis.wire import ReplyLostError
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

pytestmark = pytest.mark.asyncio(loop_scope="session")

TURN_END = b"agent.turn_end"


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded order {order}"


def governed(store: EventStore) -> Agent:
    """One refund, walked by an allowing audit link: a turn with decisions."""
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": 7})]
            ),
            "Done.",
        ]
    )
    audit = ToolMiddleware(
        name="audit", on_tool_call=lambda c: allow(), on_tool_result=lambda r: allow()
    )
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(refund)
        .tool_middleware(audit)
        .build()
    )


def fact_seqs(session_id: str, records: Sequence[StoredEvent]) -> list[int]:
    """The seqs of the facts ``records`` project (what the facts streams owe)."""
    return [op[2] for op in _fact_ops(session_id, records)]


async def published(store: EventStore, session_id: str) -> list[int]:
    """The seqs of every fact of ``session_id`` on the facts streams, repeats kept."""
    return sorted(f.seq for f in await store.read_facts() if f.session_id == session_id)


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
def kind(request: pytest.FixtureRequest) -> str:
    """The store kind: memory, one Redis, a 3-master Redis Cluster."""
    value: str = request.param
    return value


@pytest.fixture
def url(kind: str, request: pytest.FixtureRequest) -> str:
    """A clean store of ``kind``."""
    if kind == "memory":
        return "memory://"
    fixture = "redis_cluster_url" if kind == "cluster" else "redis_url"
    found: str = request.getfixturevalue(fixture)
    return found


@pytest.fixture
async def raw(kind: str, url: str) -> AsyncIterator[Any]:
    """A plain client on the Redis kinds, to break and heal a facts shard."""
    if kind == "memory":
        pytest.skip("a memory store's publication cannot fail")
    client: Any = (
        RedisCluster.from_url(url)
        if kind == "cluster"
        else aioredis.Redis.from_url(url)
    )
    yield client
    await client.aclose()


class LostReplyMemory(MemoryEventStore):
    """Appends for real, then reports the turn's last append as unknown, as a
    store does whose reply was lost and whose read-back found no answer."""

    lost: tuple[int, int] | None = None

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        last = await super().append_sealed(session_id, records, expected_seq)
        if self.lost is None and any(TURN_END in r.data[:40] for r in records):
            self.lost = (records[0].seq, records[-1].seq)
            raise LedgerOutcomeUnknownError(
                session_id=session_id, store=self.url, cause="no answer"
            )
        return last


class LostReplyAppender(Appender):
    """The script runs; the reply of the turn's last append is lost."""

    lost: tuple[int, int] | None = None

    def settle(self, item: Any, reply: Any) -> None:
        data = [a for a in item.args if isinstance(a, bytes)]
        ends = any(TURN_END in d[:40] for d in data)
        if self.lost is None and ends and not isinstance(reply, Exception):
            self.lost = (item.expected + 1, int(reply[1]))
            reply = ReplyLostError("the connection dropped before the reply")
        super().settle(item, reply)


class LostReplyRedis(RedisEventStore):
    """A Redis store whose appender loses one reply (R24)."""

    _appender_type = LostReplyAppender

    @property
    def lost(self) -> tuple[int, int] | None:
        assert isinstance(self._appender, LostReplyAppender)
        return self._appender.lost


async def test_r4_a_fact_whose_publication_failed_is_published_by_the_next_activation(
    url: str, raw: Any
) -> None:
    """R4/R5: a run whose facts shard refused answers as usual; once it heals,
    the session's next activation (another process) publishes each fact once."""
    sid = "outbox-refused"
    facts_key = shard_keys(shard_of(sid, DEFAULT_SHARDS))[0]
    await raw.set(facts_key, "not a stream")
    writer = open_event_store(url)
    try:
        assert "Done." == await governed(writer).run("refund order 7", session_id=sid)
    finally:
        await writer.close()
    await raw.delete(facts_key)
    store = open_event_store(url)
    try:
        expected = fact_seqs(sid, await store.read(sid))
        assert [] == await published(store, sid)
        assert sid in await store.open_turns()  # the close waited for its facts
        assert await governed(store).recover(sid) is None  # an activation
        assert expected == await published(store, sid)
        assert sid not in await store.open_turns()
    finally:
        await store.close()
    again = open_event_store(url)
    try:
        assert await governed(again).recover(sid) is None
        assert expected == await published(again, sid)
    finally:
        await again.close()


async def test_r4_an_append_reported_unknown_that_landed_is_reconciled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R4/R24: the next activation recognises an append reported unknown that
    landed (a log line with the session and seqs; ``reconciled``), and its
    facts are published exactly once."""
    store = LostReplyMemory()
    sid = "outbox-landed"
    agent = governed(store)
    with (
        caplog.at_level(logging.WARNING, logger="helmlog"),
        pytest.raises(LedgerOutcomeUnknownError) as info,
    ):
        await agent.run("refund order 7", session_id=sid)
    lost = store.lost
    assert lost is not None
    assert "ERR_LEDGER_OUTCOME_UNKNOWN" == info.value.code
    landed = [r for r in caplog.records if "reported unknown" in r.getMessage()]
    assert [(sid, *lost)] == [
        (r.__dict__["session_id"], r.__dict__["first_seq"], r.__dict__["last_seq"])
        for r in landed
    ]
    assert (lost,) == agent._sessions[sid].journal.reconciled
    records = await store.read(sid)
    assert TURN_END in records[lost[1] - 1].data
    expected = fact_seqs(sid, records)
    assert {*expected} >= set(fact_seqs(sid, records[lost[0] - 1 : lost[1]]))
    assert expected == await published(store, sid)


async def test_r24_a_lost_reply_is_read_back_and_the_run_goes_on(
    kind: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R24/R4: the Redis store reads a lost reply back before the run hears
    of it; the append landed, so the run answers, nothing is reconciled, and
    each fact is published exactly once."""
    if kind == "memory":
        pytest.skip("a memory store's reply cannot be lost")
    store = LostReplyRedis.from_url(url)
    sid = "outbox-read-back"
    agent = governed(store)
    try:
        with caplog.at_level(logging.WARNING, logger="helmlog"):
            assert "Done." == await agent.run("refund order 7", session_id=sid)
        lost = store.lost
        assert lost is not None
        read_back = [
            (r.__dict__["first_seq"], r.__dict__["last_seq"], r.__dict__["landed"])
            for r in caplog.records
            if "whose reply was lost" in r.getMessage()
        ]
        assert [(*lost, True)] == read_back
        assert () == agent._sessions[sid].journal.reconciled
        records = await store.read(sid)
        assert TURN_END in records[lost[1] - 1].data
        expected = fact_seqs(sid, records)
    finally:
        await store.close()
    reader = open_event_store(url)
    try:
        assert expected == await published(reader, sid)
        assert 0 == await reader.publish_facts(sid)
        assert sid not in await reader.open_turns()
    finally:
        await reader.close()


async def test_r4_the_hosts_sweep_publishes_the_open_turns_missed_facts(
    url: str, raw: Any
) -> None:
    """R4: the facts sweep over a host's open turns publishes what a refusing
    shard dropped, once; a session the host is operating on is left alone."""
    from helmlog.actors import host_for
    from helmlog.actors._failover import publish_open_facts

    sid = "outbox-swept"
    facts_key = shard_keys(shard_of(sid, DEFAULT_SHARDS))[0]
    await raw.set(facts_key, "not a stream")
    writer = open_event_store(url)
    try:
        assert "Done." == await governed(writer).run("refund order 7", session_id=sid)
    finally:
        await writer.close()
    await raw.delete(facts_key)
    store = open_event_store(url)
    mine, other = host_for(sid, 2), 1 - host_for(sid, 2)
    try:
        expected = fact_seqs(sid, await store.read(sid))
        assert 0 == await publish_open_facts(store, index=other, n_hosts=2)
        busy = await publish_open_facts(
            store, index=mine, n_hosts=2, busy=lambda s: s == sid
        )
        assert (0, []) == (busy, await published(store, sid))
        assert len(expected) == await publish_open_facts(store, index=mine, n_hosts=2)
        assert 0 == await publish_open_facts(store, index=mine, n_hosts=2)
        assert expected == await published(store, sid)
        assert sid not in await store.open_turns()
    finally:
        await store.close()
