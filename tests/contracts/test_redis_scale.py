"""The Redis store at cluster scale: pool, keys, shards, repair, redirects.

Pattern: tests of the laws only a remote store can break, on a real
         standalone server and a real 3-master Redis Cluster (both started by
         ``tests/fixtures_redis.py``); the shared contract runs in
         ``test_event_store.py`` and ``test_indexes.py``.
Role:    tests/contracts, Redis only.
Emits:   nothing.

Laws: R5 (a full pool waits; a wait past its timeout, and a store nobody
listens on, are retryable ``StoreError``s naming the cause and the URL without
its password), R7 (the open-turn mark is in before the append, so a failed
append leaves a stale mark, never a missing one; a lost index is rebuilt from
the streams), R11 (a session's keys share one slot; index shards spread over
slots; MOVED is followed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from helmlog.events import (
    PauseRequested,
    SequenceConflictError,
    StoreError,
    TurnStarted,
    open_event_store,
    verify_chain,
)
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events.lowlevel import seal
from helmlog.events.redis import (
    RedisEventStore,
    head_key,
    shard_keys,
    stream_key,
)
from helmlog.events.redis import reader as redis_reads
from helmlog.events.redis.keys import known_key
from helmlog.events.redis.options import split_url
from tests.contracts.test_event_store import (
    blocked_reads,
    decision,
    eventually,
    new_session,
    turn,
)
from tests.fixtures_redis import RedisClusterServers, free_port
from tests.polling import until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.redis]


@pytest.fixture(params=["redis", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    """A clean standalone server or a clean cluster."""
    name = "redis_cluster_url" if request.param == "cluster" else "redis_url"
    value: str = request.getfixturevalue(name)
    return value


@pytest.fixture
async def store(url: str) -> AsyncIterator[RedisEventStore]:
    s = RedisEventStore.from_url(url)
    yield s
    await s.close()


async def delete_everywhere(url: str, keys: list[str]) -> None:
    """Delete ``keys`` on whichever node holds them (one server, or each master)."""
    store = RedisEventStore.from_url(url)
    try:
        await store.sessions()  # learns the topology
        for key in keys:
            await store._routes.one(key, "DEL", key)
    finally:
        await store.close()


# -- R5: the pool -------------------------------------------------------------


async def test_r5_burst_on_a_small_pool_all_succeeds(url: str) -> None:
    """R5: 1,200 concurrent appends and reads on max_connections=8 all succeed."""
    store = RedisEventStore.from_url(url, max_connections=8)
    sids = [new_session() for _ in range(600)]
    try:

        async def one(sid: str) -> int:
            seq = await store.append(sid, turn(1), 0)
            records = await store.read(sid)
            assert seq == len(records)
            return seq

        results = await asyncio.gather(*(one(s) for s in sids))
        reads = await asyncio.gather(*(store.read(s) for s in sids))
        assert [5] * 600 == results
        assert [5] * 600 == [len(r) for r in reads]
        assert 8 == store._routes.seed.pool.max_connections  # type: ignore[attr-defined]
    finally:
        await store.close()


async def test_r5_pool_timeout_is_a_retryable_store_error_naming_the_pool(
    redis_url: str,
) -> None:
    """R5: a pool held busy past pool_timeout gives a typed, retryable StoreError."""
    store = RedisEventStore.from_url(f"{redis_url}?max_connections=1&pool_timeout=0.2")
    try:
        await store.append(new_session(), decision(1), 0)
        # A blocking facts read holds the only connection for its slice.
        before = await blocked_reads(redis_url)
        holder = asyncio.ensure_future(store.read_facts("$", block_ms=1_500))
        await until(
            "the read blocks",
            lambda: blocked_reads(redis_url),
            10,
            ok=lambda n: n > before,
        )
        with pytest.raises(StoreError) as info:
            await store.read(new_session())
        assert type(info.value) is StoreError
        assert info.value.retryable
        text = str(info.value)
        assert "the pool of 1 connections" in text
        assert "exhausted for 0.2 s" in text
        assert redis_url in text
        assert [] == await holder
    finally:
        await store.close()


async def test_r5_unreachable_store_names_its_url_without_password() -> None:
    """R5: nothing listening: every call is a StoreError naming the public URL."""
    port = free_port()
    store = open_event_store(f"redis://:s3cret@127.0.0.1:{port}/0?max_connections=4")
    try:
        for call in (
            lambda: store.append(new_session(), turn(1), 0),
            lambda: store.read(new_session()),
            store.sessions,
            store.open_turns,
            store.pending_asks,
            lambda: store.reindex(new_session()),
        ):
            with pytest.raises(StoreError) as info:
                await call()
            assert info.value.retryable
            assert f"redis://127.0.0.1:{port}/0" in str(info.value)
            assert "s3cret" not in str(info.value)
    finally:
        await store.close()


async def test_r11_url_options_are_stripped_and_checked() -> None:
    """R11: helmlog's URL options are parsed and never reach redis-py."""
    clean, options = split_url(
        "redis://h:1/2?max_connections=8&pool_timeout=1.5&shards=4"
        "&facts_maxlen=500&cluster=no&ssl_cert_reqs=none"
    )
    assert "redis://h:1/2?ssl_cert_reqs=none" == clean
    assert (8, 1.5, 4, 500, False) == (
        options.max_connections,
        options.pool_timeout,
        options.shards,
        options.facts_maxlen,
        options.cluster,
    )
    assert None is split_url("redis://h:1/0")[1].cluster
    for bad in ("max_connections=0", "shards=x", "pool_timeout=-1", "cluster=maybe"):
        with pytest.raises(ValueError, match="bad redis event store URL"):
            split_url(f"redis://h:1/0?{bad}")


# -- R11: keys and slots ------------------------------------------------------


async def test_r11_a_sessions_keys_share_one_slot_on_the_cluster(
    redis_cluster: RedisClusterServers, redis_cluster_url: str
) -> None:
    """R11: on a cluster, every key of a session is in its slot, on its node."""
    store = RedisEventStore.from_url(redis_cluster_url)
    sids = [new_session(), "tenant:7/run{x", "ünïcode sess"]
    try:
        for sid in sids:
            seq = await store.append(sid, turn(1), 0)
            await store.append(sid, decision(1), seq)
        assert store.cluster
        assert sorted(sids) == sorted(await store.sessions())
        found: dict[str, int] = {}
        for node in redis_cluster.nodes:
            client = aioredis.Redis(port=node.port)
            try:
                for key in await client.keys("helmlog:{*"):
                    found[key.decode()] = node.port
            finally:
                await client.aclose()
        for sid in sids:
            mine = [k for k in found if k.startswith(f"helmlog:{{{sid}}}:")]
            assert sorted([stream_key(sid), head_key(sid), known_key(sid)]) == sorted(
                mine
            )
            assert 1 == len({key_slot(k.encode()) for k in mine})
    finally:
        await store.close()


async def test_r11_index_shards_spread_over_slots_and_masters(
    redis_cluster_url: str,
) -> None:
    """R11: a shard's keys share one slot; the shards span several masters."""
    store = RedisEventStore.from_url(redis_cluster_url)
    try:
        await store.sessions()
        slots = []
        for n in range(DEFAULT_SHARDS):
            keys = shard_keys(n)
            assert 1 == len({key_slot(k.encode()) for k in keys})
            slots.append(key_slot(keys[0].encode()))
        assert DEFAULT_SHARDS == len(set(slots))
        nodes = {id(store._routes.wire(shard_keys(n)[0])) for n in range(16)}
        assert 3 == len(nodes)
        assert 16 == len({shard_of(f"s{i}", 16) for i in range(400)})
    finally:
        await store.close()


async def test_r11_moved_replies_refresh_the_slot_map(redis_cluster_url: str) -> None:
    """R11: a stale slot map (every slot on one node) is corrected by MOVED."""
    store = RedisEventStore.from_url(redis_cluster_url)
    try:
        sids = [new_session() for _ in range(30)]
        for sid in sids:
            await store.append(sid, [TurnStarted(turn=1)], 0)
        store._routes.slots = [store._routes.seed] * 16384
        for sid in sids:
            assert 3 == await store.append(sid, decision(1), 1)
            assert None is verify_chain(await store.read(sid))
        assert 3 == len(set(store._routes.slots))
        assert sorted(sids) == sorted(set(sids) & set(await store.open_turns()))
    finally:
        await store.close()


# -- R7: a crash between append and index ---------------------------------------


async def test_r7_lost_index_is_rebuilt_by_reindex_and_repair(url: str) -> None:
    """R7: index keys lost after the appends are rebuilt from the streams."""
    writer = RedisEventStore.from_url(url)
    paused, open_, done = new_session(), new_session(), new_session()
    pause = PauseRequested(kind="ask", tool_name="pay", tool_call_id="c1")
    try:
        await writer.append(paused, [TurnStarted(turn=1), pause], 0)
        await writer.append(open_, [TurnStarted(turn=1)], 0)
        await writer.append(done, turn(1) + decision(1), 0)
    finally:
        await writer.close()
    all_keys = [k for n in range(DEFAULT_SHARDS) for k in shard_keys(n)]
    await delete_everywhere(url, all_keys)

    store = RedisEventStore.from_url(url)
    try:
        assert [] == await store.open_turns()
        assert [] == await store.pending_asks()
        assert [] == await store.read_facts()
        await store.reindex(open_)
        assert [open_] == await store.open_turns()
        assert 3 == await store.repair_indexes()
        assert sorted([paused, open_]) == await store.open_turns()
        assert [(paused, 2, "pay")] == [
            (a.session_id, a.seq, a.tool_name) for a in await store.pending_asks()
        ]
        facts = await store.read_facts()
        assert [(done, 7)] == [(f.session_id, f.seq) for f in facts]
        assert 3 == await store.repair_indexes()
        assert 1 == len(await store.read_facts())
    finally:
        await store.close()


async def test_r7_open_mark_is_present_after_a_failed_append(
    store: RedisEventStore,
) -> None:
    """R7: a lost append leaves its open mark (set first); reindex drops it."""
    sid = new_session()
    seq = await store.append(sid, turn(1) + turn(2), 0)
    assert sid not in await store.open_turns()
    records = await store.read(sid)
    # A writer with a stale head: its batch reaches the script and loses.
    _, stale = seal(
        sid, [TurnStarted(turn=3)], after_seq=seq - 2, prev_hash=records[-3].hash
    )
    with pytest.raises(SequenceConflictError):
        await store.append_sealed(sid, stale, seq - 2)
    assert [sid] == [s for s in await store.open_turns() if s == sid]
    await store.reindex(sid)
    assert sid not in await store.open_turns()


async def test_r4_facts_cursor_resumes_every_shard(store: RedisEventStore) -> None:
    """R4: any fact's id resumes the read right after it, across all shards."""
    sids = [new_session() for _ in range(24)]
    for sid in sids:
        await store.append(sid, decision(1) + decision(2), 0)
    facts = await eventually(store.read_facts, lambda f: len(f) >= 48)
    assert 48 == len(facts)
    assert 48 == len({(f.session_id, f.seq) for f in facts})
    for cut in (0, 7, 30, 47):
        after = await store.read_facts(facts[cut].id)
        assert facts[cut + 1 :] == after
    assert facts == await store.read_facts("0")
    blocked = await store.read_facts(facts[-1].id, block_ms=100)
    assert [] == blocked
    late = new_session()
    waiting = asyncio.ensure_future(store.read_facts(facts[-1].id, block_ms=5_000))
    await store.append(late, decision(9), 0)
    assert [(late, 2)] == [(f.session_id, f.seq) for f in await waiting]


async def test_r3_paged_reads_read_everything_even_past_a_deleted_entry(
    store: RedisEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R2/R3: a read of many pages is whole; a deleted entry hides nothing after it."""
    monkeypatch.setattr(redis_reads, "_READ_PAGE", 10)
    sid = new_session()
    seq = 0
    for n in range(21):
        seq = await store.append(sid, turn(n), seq)
    assert 105 == seq
    records = await store.read(sid)
    assert list(range(1, 106)) == [r.seq for r in records]
    assert records[37:] == await store.read(sid, after_seq=37)
    assert None is verify_chain(records)
    await store._routes.one(stream_key(sid), "XDEL", stream_key(sid), "0-50")
    damaged = await store.read(sid)
    assert [r for r in records if r.seq != 50] == damaged
    assert 50 == verify_chain(damaged)  # the position, not the seq after it


async def test_r11_a_slot_moved_live_is_followed_by_ask_then_moved(
    redis_cluster: RedisClusterServers, redis_cluster_url: str
) -> None:
    """R11: during a live slot migration appends follow ASK, and after it MOVED;
    a session whose two keys (stream and head, R19) are not on one node yet
    gets a retryable StoreError (TRYAGAIN) and nothing is appended."""
    store = RedisEventStore.from_url(redis_cluster_url)
    tag = new_session()
    old, new = f"{tag}}}old", f"{tag}}}new"  # both hash on the tag alone
    key_old = stream_key(old)
    slot = key_slot(key_old.encode())
    assert slot == key_slot(stream_key(new).encode())
    clients = {n.port: aioredis.Redis(port=n.port) for n in redis_cluster.nodes}
    try:
        await store.append(old, turn(1), 0)
        source = store._routes.wire(key_old).pool.connection_kwargs["port"]
        target = next(p for p in clients if p != source)
        ids = {
            p: (await c.execute_command("CLUSTER", "MYID")).decode()
            for p, c in clients.items()
        }
        await clients[target].execute_command(
            "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source]
        )
        await clients[source].execute_command(
            "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target]
        )
        # Keys the source still holds are served there.
        assert 10 == await store.append(old, turn(2), 5)
        # A new session's keys are on neither node: the importing node answers
        # a command naming both with TRYAGAIN until the slot settles.
        with pytest.raises(StoreError) as caught:
            await store.append(new, turn(1), 0)
        assert (True, True) == (
            caught.value.retryable,
            "TryAgainError" in str(caught.value),
        )
        await clients[source].execute_command(
            "MIGRATE", "127.0.0.1", target, "", 0, 5000,
            "KEYS", key_old, head_key(old), known_key(old),
        )  # fmt: skip
        # Keys moved already are asked for on the target.
        assert 15 == await store.append(old, turn(3), 10)
        assert 3 == await clients[target].execute_command(
            "CLUSTER", "COUNTKEYSINSLOT", slot
        )
        for c in clients.values():
            await c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])
        assert [] == await store.read(new)
        assert 5 == await store.append(new, turn(1), 0)  # the retry, once settled
        # The store still maps the slot to the source: MOVED, then the target.
        assert 20 == await store.append(old, turn(4), 15)
        assert target == store._routes.wire(key_old).pool.connection_kwargs["port"]
        for sid, n in ((old, 20), (new, 5)):
            records = await store.read(sid)
            assert n == len(records)
            assert None is verify_chain(records)
    finally:
        await store.close()
        for c in clients.values():
            await c.aclose()
