"""Nothing acts on a stream it did not verify; a cut tail is detected (R19).

Pattern: run a governed refund session on a real store, then attack the
         stored stream behind the store's back the way the issue measured it
         (edit a pending pause's arguments, recompute its hash, cut the tail,
         delete the stream) and show that activation refuses with
         ``StreamTamperedError`` naming the first bad seq while nothing runs:
         no append, no model call, no tool call.
Role:    integration tests on memory, a real Redis and a real 3-master Redis
         Cluster (the keys: a session's stream and its head record).
Emits:   nothing.

Laws: R19 (verification on activation and resume, incremental catch-up, the
head record), R3 (hashes under the chain key), R9 (a pause MAC is never
derivable from what the stream stores; old streams that stored one still
resume), R18 (``helmlog verify`` says "truncated" or "deleted", exit 1).

Why a fresh agent for each attack: a host's cache is what it verified; the
measured attacks hit a session activated from its stream (a restart, another
host), which is where verification must stand.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from helmlog import (
    AskPause,
    StreamTamperedError,
    check_in_approved,
)
from helmlog.cli import app
from helmlog.events import (
    StoredEvent,
    fold,
    read_verified,
    verify_chain,
)
from tests.integration.runtime.site import KEY, Desk, Site, proposal
from tests.replay.streams import FIXTURES, chain_key_of, imported_agent, load_records

# Invariant: tests and async fixtures share one loop, so a store opened in a
# fixture is used and closed on the loop it connected on.
pytestmark = pytest.mark.asyncio(loop_scope="session")

runner = CliRunner()


def pause_seq(records: list[StoredEvent]) -> int:
    return next(r.seq for r in records if r.decode().type == "pause.request")


def edited(record: StoredEvent, *, rehash: bytes | str | None = "keep") -> StoredEvent:
    """The pause with its amount raised 900 → 99999; its hash kept, or
    recomputed (``None``: plain SHA-256; bytes: HMAC under another key)."""
    data = record.data.replace(b'"amount":900', b'"amount":99999')
    assert data != record.data
    if rehash == "keep":
        digest = record.hash
    elif rehash is None:
        digest = hashlib.sha256(data).hexdigest()
    else:
        assert isinstance(rehash, bytes)
        digest = hmac.new(rehash, data, hashlib.sha256).hexdigest()
    return msgspec.structs.replace(record, data=data, hash=digest)


# -- the measured attacks ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "rehash", "reason"),
    [
        (None, "keep", "hash"),
        (KEY, "keep", "hash"),
        (KEY, None, "hash"),
        (KEY, b"another-key", "hash"),
        (None, None, "head"),
    ],
    ids=[
        "no-key-hash-kept",
        "key-hash-kept",
        "key-plain-sha256",
        "key-other-hmac",
        "no-key-plain-sha256",
    ],
)
async def test_r19_an_edited_pending_pause_is_refused_and_nothing_runs(
    site: Site, key: bytes | None, rehash: bytes | str | None, reason: str
) -> None:
    """R19/R3: a pause's arguments edited in the store (900 → 99999) are refused
    on resume with StreamTamperedError at the pause's seq; the tool never runs.
    Under a chain key a hash recomputed without it is refused; without one, a
    recomputed hash still disagrees with the head record."""
    desk = Desk(site.store(key))
    cp = (await desk.pause()).checkpoint
    records = await site.records(cp.session_id)
    at = pause_seq(records)
    records[at - 1] = edited(records[at - 1], rehash=rehash)
    await site.rewrite(cp.session_id, records)

    fresh = Desk(site.store(key))
    with pytest.raises(StreamTamperedError) as caught:
        await fresh.agent.resume(cp, check_in_approved(by="dana"))
    assert (cp.session_id, at, reason) == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )
    assert ([], 0) == fresh.nothing_ran()
    assert records == await site.records(cp.session_id)


async def test_r19_a_cut_tail_is_reported_truncated_and_refused(site: Site) -> None:
    """R19/R18: with the last 20 entries deleted, ``helmlog verify`` says
    "truncated after seq N (head says M)" and exits 1, and activation refuses
    with the first missing seq: nothing is appended, no model call is made."""
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
    records = await site.records(sid)
    last = records[-1].seq
    assert last > 20
    kept = records[:-20]
    await site.rewrite(sid, kept)
    cut = last - 20

    if site.memory is None:
        result = await asyncio.to_thread(
            runner.invoke,
            app,
            ["verify", sid, "--store", site.url],
            env={"HELMLOG_CHAIN_KEY": KEY.decode()},
        )
        assert 1 == result.exit_code, result.output
        assert f"truncated after seq {cut} (head says {last})" in result.stdout
    assert cut + 1 == verify_chain(kept, KEY, await site.raw.read_head(sid))

    fresh = Desk(site.store(KEY))
    with pytest.raises(StreamTamperedError) as caught:
        await fresh.agent.recover(sid)
    assert (sid, cut + 1, "truncated") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )
    with pytest.raises(StreamTamperedError):
        await fresh.agent.run("Refund order 9", continue_from=desk.agent.checkpoint())
    assert ([], 0) == fresh.nothing_ran()
    assert kept == await site.records(sid)


async def test_r19_a_deleted_stream_whose_head_remains_is_refused(site: Site) -> None:
    """R19/R18: a stream deleted while its head record remains is "deleted":
    ``helmlog verify`` exits 1 saying so, and resuming its pause is refused
    (it is not imported as a session the store never had)."""
    desk = Desk(site.store(KEY))
    cp = (await desk.pause()).checkpoint
    sid = cp.session_id
    await site.delete(sid, head=False)

    if site.memory is None:
        result = await asyncio.to_thread(
            runner.invoke,
            app,
            ["verify", sid, "--store", site.url],
            env={"HELMLOG_CHAIN_KEY": KEY.decode()},
        )
        assert 1 == result.exit_code, result.output
        assert f"broken: session {sid} — deleted" in result.stdout
    fresh = Desk(site.store(KEY))
    with pytest.raises(StreamTamperedError) as caught:
        await fresh.agent.resume(cp, check_in_approved(by="dana"))
    assert (sid, 1, "deleted") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )
    assert ([], 0) == fresh.nothing_ran()
    assert [] == await site.records(sid)


async def test_r19_a_catch_up_verifies_only_what_another_writer_appended(
    site: Site,
) -> None:
    """R19: a host that verified a session verifies, on its next operation,
    only the records another writer appended since — it never reads what it
    verified again — and refuses when one of those is bad."""
    host = Desk(site.store(KEY), [proposal(1), proposal(2), "unused"])
    other = Desk(site.store(KEY), ["Refunded.", "Refunded."])
    first = await host.pause()
    sid = first.checkpoint.session_id
    # Another writer answers the pause: the host's cache is now behind.
    assert "Refunded." == await other.agent.resume(
        first.checkpoint, check_in_approved(by="dana")
    )
    cp = other.agent.checkpoint()
    assert cp is not None and cp.seq > first.checkpoint.seq
    # An edit of a record the host verified already is not read again ...
    records = await site.records(sid)
    old = next(i for i, r in enumerate(records) if b"Refund order 7" in r.data)
    assert records[old].seq <= first.checkpoint.seq
    records[old] = msgspec.structs.replace(
        records[old], data=records[old].data.replace(b"order 7", b"order 0")
    )
    await site.rewrite(sid, records)
    second = await host.agent.run("Refund order 8", continue_from=cp)
    assert isinstance(second, AskPause)
    # ... while a host activating the session afresh refuses it at once.
    with pytest.raises(StreamTamperedError) as caught:
        await Desk(site.store(KEY)).agent.recover(sid)
    assert (records[old].seq, "hash") == (caught.value.seq, caught.value.reason)

    # The other writer answers again, and one of its records is edited before
    # the host catches up: the catch-up refuses at it, and nothing runs.
    assert "Refunded." == await other.agent.resume(
        second.checkpoint, check_in_approved(by="lee")
    )
    records = await site.records(sid)
    bad = second.checkpoint.seq + 1  # the pause.resume, by lee
    assert b'"lee"' in records[bad - 1].data
    records[bad - 1] = msgspec.structs.replace(
        records[bad - 1], data=records[bad - 1].data.replace(b'"lee"', b'"eve"')
    )
    await site.rewrite(sid, records)
    before = (list(host.ran), len(host.model.requests))
    with pytest.raises(StreamTamperedError) as caught:
        await host.agent.run("Refund order 9", continue_from=other.agent.checkpoint())
    assert (sid, bad, "hash") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )
    assert before == (host.ran, len(host.model.requests))
    assert records == await site.records(sid)


@pytest.mark.parametrize("kind", ["redis", "cluster"])
@pytest.mark.redis
async def test_r09_a_pause_mac_appears_nowhere_in_the_stored_stream(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """R9: under a chain key the checkpoint's MAC verifies, yet its bytes are
    in no field of the session's Redis stream nor in its head record: it
    cannot be derived from what the stream stores."""
    fixture = "redis_cluster_url" if kind == "cluster" else "redis_url"
    made = await Site(request.getfixturevalue(fixture), None).open()
    try:
        desk = Desk(made.store(KEY))
        cp = (await desk.pause()).checkpoint
        assert cp.mac is not None and 64 == len(cp.mac)
        raw = await made.raw_bytes(cp.session_id)
        assert cp.session_id.encode() in raw and b"pause.request" in raw
        assert cp.mac.encode() not in raw
        folded = fold(r.decode() for r in await made.records(cp.session_id))
        assert folded.checkpoint is not None and folded.checkpoint.mac is None
        fresh = Desk(made.store(KEY), ["Refunded."])
        assert "Refunded." == await fresh.agent.resume(cp, check_in_approved(by="dana"))
        assert [{"order": 7, "amount": 900}] == fresh.ran
    finally:
        await made.close()


@pytest.mark.parametrize("name", ["v2_keyed_imported_pause", "v2_imported_pause"])
async def test_r19_an_old_golden_stream_still_verifies_and_resumes(
    site: Site, name: str
) -> None:
    """R19/R9/R10: a stream recorded before head records and unstored MACs
    (``v2_keyed_imported_pause`` stores its pauses' MACs) verifies by its
    chain alone and resumes with the checkpoint its writer handed out."""
    key = chain_key_of(name)
    records = load_records(FIXTURES / f"{name}.jsonl")
    old = fold(r.decode() for r in records).checkpoint
    assert old is not None
    assert (key is not None) == (old.mac is not None)
    store = site.store(key)
    # Loaded as its writer left it: the records, and no head record.
    await site.rewrite(old.session_id, records)
    assert None is await site.raw.read_head(old.session_id)
    assert records == await read_verified(store, old.session_id)

    ran: list[dict[str, Any]] = []
    agent = imported_agent(store, ["Refunded."], ran)
    assert "Refunded." == await agent.resume(
        old.to_json(), check_in_approved(by="dana@ops")
    )
    assert [{"order": 8, "amount": 500}] == ran
    after = await site.records(old.session_id)
    head = await store.read_head(old.session_id)
    assert None is verify_chain(after, key, head)
    assert (after[-1].seq, after[-1].hash) == (head.seq, head.hash)  # type: ignore[union-attr]
