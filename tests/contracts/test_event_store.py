"""The stream recorder on every adapter: what only a remote store can break.

Pattern: tests parametrized over memory, Redis and Redis Cluster, beside the
         shipped contract (``helmlog.events.testing``): the laws only a
         remote store can break, and the property test (it needs Hypothesis).
Role:    tests/contracts; both stores pass every test not marked Redis-only.

Laws: R2 (seq, atomic appends, conflicts), R3 (the chain, keyed chains), R4
(the facts stream), R5 (a failing store is a ``StoreError``, never a driver
error, and loses nothing it acknowledged), R10, R11 (URLs, hash-tagged keys).
Tampering works on copies of what ``read`` returned: no back door needed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    MemoryEventStore,
    Message,
    MessageCommitted,
    SequenceConflictError,
    StoreError,
    TurnEnded,
    TurnStarted,
    decode_event,
    fact_of,
    open_event_store,
    verify_chain,
)
from helmlog.events._chain import encode_head, head_of
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events.lowlevel import fact_for, hash_bytes, seal
from helmlog.events.redis import (
    RedisEventStore,
    head_key,
    shard_keys,
    stream_key,
)
from helmlog.events.redis.keys import FORMAT_KEY, registry_key
from helmlog.events.redis.scripts import APPEND_LUA
from helmlog.events.testing.support import (
    KEY,
    SECRET,
    decision,
    eventually,
    filed,
    new_session,
    row,
    stamped,
    turn,
)
from tests.fixtures_redis import RedisServer
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="session")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    batches=st.lists(
        st.lists(
            st.one_of(
                st.builds(TurnStarted, turn=st.integers(0, 2**31)),
                st.builds(
                    MessageCommitted,
                    message=st.builds(
                        Message,
                        role=st.sampled_from(["user", "assistant", "tool"]),
                        content=st.text(max_size=200),
                    ),
                ),
                st.builds(
                    DecisionFiled,
                    row=st.builds(
                        row,
                        st.integers(0, 10**6),
                        outcome=st.sampled_from(["allow", "deny"]),
                    ),
                ),
                st.integers(0, 10**6).map(lambda n: fact_for(row(n))),
                st.builds(
                    TurnEnded,
                    turn=st.integers(0, 100),
                    final_content=st.text(max_size=50),
                    timestamp=st.integers(0, 2**50),
                ),
            ),
            min_size=0,
            max_size=6,
        ),
        min_size=1,
        max_size=6,
    )
)
async def test_r2_r3_any_batches_read_back_equal_and_verify(
    store: EventStore, batches: list[list[Event]]
) -> None:
    """R2/R3: for any batches, read() returns what was appended, and it verifies."""
    sid = new_session()
    seq = 0
    appended: list[Event] = []
    for batch in batches:
        seq = await store.append(sid, batch, seq)
        appended.extend(batch)
    records = await store.read(sid)
    assert len(appended) == seq == len(records)
    assert stamped(appended, records, sid) == [r.decode() for r in records]
    assert None is verify_chain(records)
    assert [hash_bytes(r.data) for r in records] == [r.hash for r in records]


async def blocked_reads(redis_url: str) -> int:
    """How many clients of the server are blocked in a read (``CLIENT LIST``)."""
    probe = aioredis.from_url(redis_url)
    try:
        return sum("b" in c.get("flags", "") for c in await probe.client_list())
    finally:
        await probe.aclose()


@pytest.mark.redis
async def test_r4_blocking_read_wakes_on_a_new_fact(redis_url: str) -> None:
    """R4: read_facts(block_ms=...) returns as soon as a fact is published."""
    store = RedisEventStore.from_url(redis_url)
    try:
        sid = new_session()
        assert [] == await store.read_facts(block_ms=50)
        before = await blocked_reads(redis_url)
        waiting = asyncio.ensure_future(store.read_facts("0-0", block_ms=5_000))
        await until(
            "the read blocks",
            lambda: blocked_reads(redis_url),
            10,
            ok=lambda n: n > before,
        )
        assert not waiting.done()
        await store.append(sid, decision(1), 0)
        facts = await asyncio.wait_for(waiting, timeout=5)
        assert [(sid, 2)] == [(f.session_id, f.seq) for f in facts]
    finally:
        await store.close()


@pytest.mark.redis
async def test_r4_failed_publication_never_fails_the_append(
    redis_url: str, raw_redis: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """R4/R5: a facts stream that refuses writes leaves the append intact; republish."""
    sid = new_session()
    facts_key = shard_keys(shard_of(sid, DEFAULT_SHARDS))[0]
    await raw_redis.set(facts_key, "not a stream")
    store = RedisEventStore.from_url(redis_url)
    try:
        with caplog.at_level(logging.WARNING, logger="helmlog"):
            seq = await store.append(sid, decision(1) + decision(2), 0)
            assert 4 == seq
            await eventually(
                lambda: asyncio.sleep(0, caplog.records),
                lambda recs: any("not published" in r.getMessage() for r in recs),
            )
        assert 4 == len(await store.read(sid))
        await raw_redis.delete(facts_key)
        assert 2 == await store.publish_facts(sid)
        with pytest.deprecated_call():
            assert 0 == await store.republish_facts(sid)
        facts = await store.read_facts()
        assert [(sid, 2), (sid, 4)] == [(f.session_id, f.seq) for f in facts]
    finally:
        await store.close()


@pytest.mark.redis
async def test_r4_republished_facts_are_projections_with_the_rows_seq(
    redis_url: str, raw_redis: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """R4: facts republished from a stream of rows are the rows' projections,
    at the rows' seqs, with no value; published once."""
    sid = new_session()
    facts_key = shard_keys(shard_of(sid, DEFAULT_SHARDS))[0]
    await raw_redis.set(facts_key, "not a stream")
    store = RedisEventStore.from_url(redis_url)
    try:
        with caplog.at_level(logging.WARNING, logger="helmlog"):
            seq = await store.append(sid, turn(1)[:1] + filed(1) + filed(2), 0)
            assert 3 == seq
            await eventually(
                lambda: asyncio.sleep(0, caplog.records),
                lambda recs: any("not published" in r.getMessage() for r in recs),
            )
        await raw_redis.delete(facts_key)
        assert 2 == await store.publish_facts(sid)
        assert 0 == await store.publish_facts(sid)
        facts = await store.read_facts()
        assert [(sid, 2), (sid, 3)] == [(f.session_id, f.seq) for f in facts]
        rows = [r.decode() for r in (await store.read(sid))[1:]]
        assert [fact_of(r) for r in rows if isinstance(r, DecisionFiled)] == [
            decode_event(f.data) for f in facts
        ]
        assert [] == [f for f in facts if SECRET.encode() in f.data]
    finally:
        await store.close()


@pytest.mark.redis
async def test_r4_close_publishes_queued_facts(redis_url: str) -> None:
    """R4: facts still queued when the store closes are published, not dropped."""
    sid = new_session()
    store = RedisEventStore.from_url(redis_url)
    await store.append(sid, decision(1), 0)
    await store.close()
    reader = RedisEventStore.from_url(redis_url)
    try:
        assert [(sid, 2)] == [(f.session_id, f.seq) for f in await reader.read_facts()]
    finally:
        await reader.close()


@pytest.mark.redis
async def test_r5_stopped_server_is_a_store_error_and_loses_nothing(
    private_redis: RedisServer,
) -> None:
    """R5: Redis down: StoreError on every call, never redis.*; nothing is lost."""
    store = RedisEventStore.from_url(private_redis.url)
    sid = new_session()
    try:
        seq = await store.append(sid, turn(1) + decision(1), 0)
        recorded = await store.read(sid)
        private_redis.stop()

        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: store.append(sid, decision(2), seq),
            lambda: store.read(sid),
            store.sessions,
            store.read_facts,
            lambda: store.head(new_session()),
        ]
        for call in calls:
            with pytest.raises(StoreError) as info:
                await call()
            assert not isinstance(info.value, redis.RedisError)
            assert type(info.value) is StoreError
            assert info.value.retryable
            assert private_redis.url in str(info.value)

        private_redis.start()
        assert recorded == await store.read(sid)
        # The restarted server lost its script cache; the store reloads it.
        assert seq + 2 == await store.append(sid, decision(2), seq)
        assert None is verify_chain(await store.read(sid))
    finally:
        await store.close()


@pytest.mark.redis
async def test_r5_driver_errors_become_store_errors(
    redis_url: str, raw_redis: aioredis.Redis
) -> None:
    """R5: a server-side error (a key of the wrong type) is a StoreError too."""
    sid = new_session()
    await raw_redis.set(f"helmlog:{{{sid}}}:events", "not a stream")
    store = RedisEventStore.from_url(redis_url)
    try:
        for call in (
            lambda: store.append(sid, turn(1), 0),
            lambda: store.read(sid),
        ):
            with pytest.raises(StoreError) as info:
                await call()
            assert type(info.value) is StoreError
            assert isinstance(info.value.__cause__, redis.RedisError)
    finally:
        await store.close()


@pytest.mark.redis
async def test_r2_stale_head_is_a_conflict_never_a_fork(redis_url: str) -> None:
    """R2/R3: a writer with a stale cached head gets a conflict, never a fork."""
    a = RedisEventStore.from_url(redis_url)
    b = RedisEventStore.from_url(redis_url)
    sid = new_session()
    try:
        assert 2 == await a.append(sid, decision(1), 0)
        assert 4 == await b.append(sid, decision(2), 2)
        with pytest.raises(SequenceConflictError) as info:
            await a.append(sid, decision(3), 2)
        assert (2, 4) == (info.value.expected, info.value.actual)
        assert 6 == await a.append(sid, decision(3), 4)

        # The stream is deleted and rewritten to the same length under ``a``.
        assert 6 == await a.append(sid, [], 6)
        client = aioredis.Redis.from_url(redis_url)
        await client.delete(f"helmlog:{{{sid}}}:events")
        await client.aclose()
        assert (
            await b.append(sid, turn(9)[:3] + decision(9) + [TurnStarted(turn=9)], 0)
            == 6
        )
        with pytest.raises(SequenceConflictError):
            await a.append(sid, decision(4), 6)
        records = await a.read(sid)
        assert 6 == len(records)
        assert None is verify_chain(records)
        assert 8 == await a.append(sid, decision(4), 6)
        assert None is verify_chain(await a.read(sid))
    finally:
        await a.close()
        await b.close()


@pytest.mark.redis
async def test_r2_a_resend_is_idempotent_but_another_writers_identical_batch_conflicts(
    redis_url: str,
) -> None:
    """R2/R20: the append script takes a batch the stream already ends with as a
    success only when it carries the same append token (the store's own resend
    after a lost reply); another writer's byte-identical batch is a conflict."""
    store = RedisEventStore.from_url(redis_url)
    client = aioredis.Redis.from_url(redis_url)
    sid = new_session()
    try:
        _, records = seal(sid, decision(1), after_seq=0, prev_hash="")
        script = client.register_script(APPEND_LUA)
        head = encode_head(head_of(sid, records[-1].seq, records[-1].hash))
        args: list[Any] = [0, "", "writer-a:1", head]
        for r in records:
            args += [r.data, r.hash]
        keys = [stream_key(sid), head_key(sid)]
        assert [1, 2] == await script(keys=keys, args=args)
        assert [1, 2] == await script(keys=keys, args=args)  # the same append, resent
        assert head_of(sid, 2, records[-1].hash) == await store.read_head(sid)
        args[2] = "writer-b:1"
        assert [0, 2] == await script(keys=keys, args=args)  # another writer's bytes
        assert records == await store.read(sid)
        with pytest.raises(SequenceConflictError):
            await store.append_sealed(sid, records, 0)
    finally:
        await client.aclose()
        await store.close()


@pytest.mark.redis
async def test_r2_the_scripts_fast_check_takes_nothing_the_full_check_refuses(
    redis_url: str,
) -> None:
    """R2/R19: the append script answers its seq check from the head record only
    when the stream's length agrees; a deleted top entry, a head record that
    names another seq or hash, or a missing head record each take the full
    check on the stream itself, which refuses a stale writer as before. (A
    head record rewritten to match a forged prev_hash is tampering that
    ``verify`` names, R19; no honest writer sends one.)"""
    store = RedisEventStore.from_url(redis_url)
    client = aioredis.Redis.from_url(redis_url)
    script = client.register_script(APPEND_LUA)

    async def send(sid: str, after: int, prev: str, n: int) -> Any:
        _, records = seal(sid, decision(n), after_seq=after, prev_hash=prev)
        head = encode_head(head_of(sid, records[-1].seq, records[-1].hash))
        args: list[Any] = [after, prev, f"w:{n}", head]
        for r in records:
            args += [r.data, r.hash]
        return await script(keys=[stream_key(sid), head_key(sid)], args=args)

    try:
        tails: dict[str, str] = {}
        for case in ("top-deleted", "head-seq", "head-hash", "head-gone", "fine"):
            sid = new_session()
            assert 4 == await store.append(sid, decision(1) + decision(2), 0)
            tails[case] = (await store.read(sid))[-1].hash
            if case == "top-deleted":
                await client.xdel(stream_key(sid), "0-4")
                # The head still says 4; the stream now ends at 3.
                assert [0, 3] == await send(sid, 4, tails[case], 3)
            elif case == "head-seq":
                await client.set(head_key(sid), encode_head(head_of(sid, 2, "x")))
                assert [0, 4] == await send(sid, 2, "x", 3)
            elif case == "head-hash":
                # A head record rewritten by hand: the stream decides.
                await client.set(head_key(sid), encode_head(head_of(sid, 4, "x")))
                assert [0, 4] == await send(sid, 3, tails[case], 3)
                assert [1, 6] == await send(sid, 4, tails[case], 3)  # full check
            elif case == "head-gone":
                await client.delete(head_key(sid))
                assert [0, 4] == await send(sid, 3, tails[case], 3)
                assert [1, 6] == await send(sid, 4, tails[case], 3)
            else:
                assert [0, 4] == await send(sid, 2, tails[case], 3)  # stale
                assert [1, 6] == await send(sid, 4, tails[case], 3)  # fast
            assert None is verify_chain(
                [r for r in await store.read(sid) if case != "top-deleted"]
            )
    finally:
        await client.aclose()
        await store.close()


async def test_r11_open_event_store_urls() -> None:
    """R11: URLs pick the adapter without connecting; others are a ValueError."""
    stores = [
        open_event_store(None),
        open_event_store("memory://"),
        open_event_store("redis://127.0.0.1:1/0"),
        open_event_store("rediss://alice:s3cret@cache.example:6380/2?password=x&db=2"),
    ]
    try:
        kinds = [type(s) for s in stores]
        assert [
            MemoryEventStore,
            MemoryEventStore,
            RedisEventStore,
            RedisEventStore,
        ] == kinds
        assert "redis://127.0.0.1:1/0" == stores[2].url
        assert "rediss://cache.example:6380/2?db=2" == stores[3].url
        assert "s3cret" not in stores[3].url
        keyed = open_event_store("redis://127.0.0.1:1/0", chain_key=KEY)
        stores.append(keyed)
        assert KEY == keyed.chain_key
        assert all(isinstance(s, EventStore) for s in stores)
    finally:
        for s in stores:
            await s.close()
    for bad in ("postgres://x", "", "redis:/nohost", "memory"):
        with pytest.raises(ValueError):
            open_event_store(bad)


@pytest.mark.redis
async def test_r11_session_keys_share_a_hash_tag(
    redis_url: str, raw_redis: aioredis.Redis
) -> None:
    """R11: every per-session key carries {session_id}; facts live apart."""
    store = RedisEventStore.from_url(redis_url)
    sessions = [new_session(), "tenant:7/run{x", "ünïcode sess"]
    try:
        for sid in sessions:
            seq = await store.append(sid, turn(1), 0)
            seq = await store.append(sid, decision(1), seq)
            await store.read(sid)
            await store.head(sid)
        await eventually(store.read_facts, lambda f: len(f) >= 3)
        assert sorted(sessions) == sorted(await store.sessions())
    finally:
        await store.close()
    raw_keys: list[bytes] = await raw_redis.keys("*")  # type: ignore[assignment]
    keys = sorted(k.decode() for k in raw_keys)
    shard_key_names = {k for n in range(DEFAULT_SHARDS) for k in shard_keys(n)}
    # R25/R26: the sessions registry's shards and the format mark span sessions.
    shard_key_names |= {registry_key(n) for n in range(DEFAULT_SHARDS)}
    shard_key_names.add(FORMAT_KEY)
    per_session = [k for k in keys if k not in shard_key_names]
    facts_keys = {shard_keys(shard_of(sid, DEFAULT_SHARDS))[0] for sid in sessions}
    assert facts_keys <= set(keys)
    assert per_session
    for key in per_session:
        owners = [sid for sid in sessions if key.startswith(f"helmlog:{{{sid}}}:")]
        assert 1 == len(owners), key
    assert {f"helmlog:{{{sid}}}:events" for sid in sessions} <= set(per_session)
    assert b"stream" == await raw_redis.type(f"helmlog:{{{sessions[0]}}}:events")
    entries: Any = await raw_redis.xrange(f"helmlog:{{{sessions[0]}}}:events")
    assert [f"0-{n}".encode() for n in range(1, 8)] == [e[0] for e in entries]
    assert {b"seq", b"data", b"hash"} == set(entries[0][1])


@pytest.mark.redis
@pytest.mark.parametrize("protocol", [2, 3])
async def test_r11_store_works_on_either_wire_protocol(
    redis_url: str, protocol: int
) -> None:
    """R11: any client (RESP2 or RESP3, decoding or not) gives the same store."""
    client = aioredis.Redis.from_url(
        redis_url, protocol=protocol, decode_responses=protocol == 2
    )
    store = RedisEventStore(client, url=redis_url)
    sid = new_session()
    try:
        assert redis_url == store.url
        seq = await store.append(sid, turn(1) + decision(1), 0)
        assert (seq, (await store.read(sid))[-1].hash) == await store.head(sid)
        assert [sid] == await store.sessions()
        facts = await eventually(
            lambda: store.read_facts(block_ms=100), lambda f: len(f) >= 1
        )
        assert [(sid, 7)] == [(f.session_id, f.seq) for f in facts]
        assert None is verify_chain(await store.read(sid))
        with pytest.raises(SequenceConflictError):
            await store.append(sid, turn(2), 1)
    finally:
        await store.close()
