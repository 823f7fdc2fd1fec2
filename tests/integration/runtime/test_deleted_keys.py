"""Deleting a session's keys neither re-runs a tool nor hides a cut tail (R25, R26).

Pattern: run a governed refund session on a real store, then delete its keys
         behind the store's back the way issue 23 measured it (items 3 and
         4): the stream and head record after an approved pause, or the head
         record beside a cut tail; then resume, recover, continue and verify
         from a fresh agent, and count what ran and what was appended.
Role:    integration tests on memory, a real Redis and a real 3-master Redis
         Cluster (the keys: a session's stream, head record and marker, the
         sessions registry, the format mark).
Emits:   nothing.

Laws: R25 (a store remembers its sessions: a checkpoint of a deleted session
is refused ``"session-deleted"``, never imported, with or without a chain
key), R26 (no downgrade: on a store that writes head records a stream
without its head is refused by verify, activation, resume and recovery;
``helmlog upgrade-heads`` is the explicit upgrade of an older stream), R9,
R19.

Why a fresh agent for each attack: a host's cache is what it verified; the
measured attacks hit a session activated from its stream (a restart,
another host), which is where the store's memory must stand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from typer.testing import CliRunner

from helmlog import (
    AskPause,
    CheckpointError,
    StreamTamperedError,
    check_in_approved,
)
from helmlog.cli import app
from helmlog.events import (
    MemoryEventStore,
    fold,
    read_verified,
    upgrade_heads,
    verify_chain,
)
from helmlog.events._index import DEFAULT_SHARDS, shard_of
from helmlog.events.redis.keys import known_key, registry_key
from tests.integration.runtime.site import KEY, Desk, Site, proposal
from tests.replay.streams import FIXTURES, chain_key_of, imported_agent, load_records

pytestmark = pytest.mark.asyncio(loop_scope="session")

runner = CliRunner()


# -- item 3: a checkpoint used twice after the session's keys are deleted --------


@pytest.mark.parametrize("key", [None, KEY], ids=["no-key", "chain-key"])
async def test_r25_a_checkpoint_of_a_deleted_session_is_refused_and_the_tool_ran_once(
    site: Site, key: bytes | None
) -> None:
    """R25/R9: approve a pause (the refund runs), DEL the session's stream and
    head record, resume the same checkpoint from a fresh agent: refused as
    "session-deleted" before anything is appended; the refund ran once.
    ``helmlog verify`` says the session was deleted."""
    desk = Desk(site.store(key))
    cp = (await desk.pause()).checkpoint
    assert "Refunded." == await desk.agent.resume(cp, check_in_approved(by="dana"))
    conversation = desk.agent.checkpoint()
    assert [{"order": 7, "amount": 900}] == desk.ran
    sid = cp.session_id
    await site.delete(sid)
    assert ([], None) == (await site.raw.read(sid), await site.raw.read_head(sid))
    if site.memory is None:
        result = await asyncio.to_thread(
            runner.invoke, app, ["verify", sid, "--store", site.url]
        )
        assert 1 == result.exit_code, result.output
        line = f"broken: session {sid} — deleted: its stream and head record are gone"
        assert line in result.stdout

    fresh = Desk(site.store(key), ["Refunded."])
    with pytest.raises(CheckpointError) as caught:
        await fresh.agent.resume(cp.to_json(), check_in_approved(by="dana"))
    assert ("ERR_CHECKPOINT", "session-deleted") == (
        caught.value.code,
        caught.value.reason,
    )
    assert "session deleted" in str(caught.value)
    # A conversation checkpoint of it seeds nothing either (R25, R14).
    with pytest.raises(CheckpointError) as again:
        await fresh.agent.run("Refund order 8", continue_from=conversation)
    assert "session-deleted" == again.value.reason
    assert (1, [], 0) == (len(desk.ran), fresh.ran, len(fresh.model.requests))
    assert [] == await site.raw.read(sid)


async def test_r25_the_registry_remembers_a_session_whose_every_key_is_deleted(
    redis_url: str,
) -> None:
    """R25: deleting every key of the session's hash tag (stream, head and
    marker) leaves the store-wide registry, which still refuses the import."""
    site = await Site(redis_url, None).open()
    try:
        desk = Desk(site.store(KEY))
        cp = (await desk.pause()).checkpoint
        assert "Refunded." == await desk.agent.resume(cp, check_in_approved(by="dana"))
        sid = cp.session_id
        await site.delete(sid)
        await site.routes().one(known_key(sid), "DEL", known_key(sid))
        registry = registry_key(shard_of(sid, DEFAULT_SHARDS))
        assert await site.routes().one(registry, "SISMEMBER", registry, sid)
        fresh = Desk(site.store(KEY), ["Refunded."])
        with pytest.raises(CheckpointError) as caught:
            await fresh.agent.resume(cp, check_in_approved(by="dana"))
        assert "session-deleted" == caught.value.reason
        assert (1, []) == (len(desk.ran), fresh.ran)
    finally:
        await site.close()


async def test_r25_a_store_that_never_held_the_session_still_imports_it(
    site: Site,
) -> None:
    """R25/R9: a pause checkpoint from another store (the in-memory default of
    a process that is gone) is imported where its session never was."""
    desk = Desk(MemoryEventStore(chain_key=KEY))
    cp = (await desk.pause()).checkpoint
    store = site.store(KEY)
    assert not await store.remembers(cp.session_id)
    fresh = Desk(store, ["Refunded."])
    assert "Refunded." == await fresh.agent.resume(cp, check_in_approved(by="dana"))
    assert [{"order": 7, "amount": 900}] == fresh.ran
    assert await store.remembers(cp.session_id)


# -- item 4: a cut tail with its head record deleted --------------------------------


async def cut_session(site: Site) -> tuple[Desk, str, int]:
    """Two answered refunds; then the last 20 entries cut and the head deleted.

    Returns the desk, the session and the last seq that remains.
    """
    desk = Desk(site.store(KEY), [proposal(1), "Refunded.", proposal(2), "Refunded."])
    first = await desk.pause()
    assert "Refunded." == await desk.agent.resume(
        first.checkpoint, check_in_approved(by="dana")
    )
    second = await desk.agent.follow_up("Refund order 8")
    assert isinstance(second, AskPause)
    assert "Refunded." == await desk.agent.resume(
        second.checkpoint, check_in_approved(by="dana")
    )
    sid = first.checkpoint.session_id
    records = await site.raw.read(sid)
    kept = records[:-20]
    await site.rewrite(sid, kept)
    await site.delete(sid, stream=False)
    # The chain of what is left is intact: only the head could tell.
    assert None is verify_chain(kept, KEY)
    return desk, sid, kept[-1].seq


async def test_r26_a_cut_tail_with_its_head_deleted_is_refused_everywhere(
    site: Site,
) -> None:
    """R26/R19/R18: with the tail cut and the head record deleted, ``helmlog
    verify`` exits 1 naming the missing head, and recovery, resume and
    continuation refuse with StreamTamperedError "no-head": nothing runs."""
    desk, sid, cut = await cut_session(site)
    if site.memory is None:
        result = await asyncio.to_thread(
            runner.invoke,
            app,
            ["verify", sid, "--store", site.url],
            env={"HELMLOG_CHAIN_KEY": KEY.decode()},
        )
        assert 1 == result.exit_code, result.output
        assert f"its head record is missing ({cut} events, no head)" in result.stdout
    fresh = Desk(site.store(KEY))
    cp = desk.agent.checkpoint()
    assert cp is not None
    attempts = [
        lambda: fresh.agent.recover(sid),
        lambda: fresh.agent.resume(cp, check_in_approved(by="dana")),
        lambda: fresh.agent.run("Refund order 9", continue_from=cp),
        lambda: read_verified(site.store(KEY), sid),
    ]
    for attempt in attempts:
        with pytest.raises(StreamTamperedError) as caught:
            await attempt()
        assert (sid, 0, "no-head") == (
            caught.value.session_id,
            caught.value.seq,
            caught.value.reason,
        )
    assert ([], 0) == (fresh.ran, len(fresh.model.requests))
    assert cut == len(await site.raw.read(sid))


async def test_r26_an_old_stream_on_a_marked_store_is_upgraded_only_explicitly(
    site: Site,
) -> None:
    """R26/R10: a stream written before head records, on a store this version
    has written, is refused until ``helmlog upgrade-heads`` verifies it and
    gives it its head; then it verifies and resumes."""
    name = "v2_keyed_imported_pause"
    key = chain_key_of(name)
    store = site.store(key)
    # This version writes the store first: it is marked as writing heads.
    await Desk(store).pause()
    assert await store.writes_heads()
    records = load_records(FIXTURES / f"{name}.jsonl")
    old = fold(r.decode() for r in records).checkpoint
    assert old is not None
    sid = old.session_id
    await site.rewrite(sid, records)
    with pytest.raises(StreamTamperedError) as caught:
        await read_verified(store, sid)
    assert "no-head" == caught.value.reason

    assert key is not None
    if site.memory is None:
        env = {"HELMLOG_CHAIN_KEY": key.decode()}
        result = await asyncio.to_thread(
            runner.invoke, app, ["verify", sid, "--store", site.url], env=env
        )
        assert 1 == result.exit_code, result.output
        upgraded = await asyncio.to_thread(
            runner.invoke, app, ["upgrade-heads", sid, "--store", site.url], env=env
        )
        assert 0 == upgraded.exit_code, upgraded.output
        line = f"upgraded: session {sid} — head at seq {records[-1].seq}"
        assert line in upgraded.stdout
        result = await asyncio.to_thread(
            runner.invoke, app, ["verify", sid, "--store", site.url], env=env
        )
        assert 0 == result.exit_code, result.output
    else:
        outcome = await upgrade_heads(store, [sid])
        assert [(sid, True)] == [(s, ok) for s, ok, _line in outcome]
    assert records == await read_verified(store, sid)
    ran: list[dict[str, Any]] = []
    agent = imported_agent(store, ["Refunded."], ran)
    assert "Refunded." == await agent.resume(
        old.to_json(), check_in_approved(by="dana@ops")
    )
    assert [{"order": 8, "amount": 500}] == ran


async def test_r26_upgrade_heads_refuses_a_broken_old_stream(site: Site) -> None:
    """R26: ``upgrade-heads`` gives no head to a stream that fails its chain,
    and says so (exit 1)."""
    name = "v2_imported_pause"
    records = load_records(FIXTURES / f"{name}.jsonl")
    sid = fold(r.decode() for r in records).session_id
    store = site.store(chain_key_of(name))
    await site.rewrite(sid, records[:2] + records[3:])
    if site.memory is None:
        result = await asyncio.to_thread(
            runner.invoke, app, ["upgrade-heads", sid, "--store", site.url]
        )
        assert 1 == result.exit_code, result.output
        assert f"broken: session {sid} — the chain breaks at seq 3" in result.stdout
    else:
        outcome = await upgrade_heads(store, [sid])
        assert [(sid, False)] == [(s, ok) for s, ok, _line in outcome]
    assert None is await store.read_head(sid)
