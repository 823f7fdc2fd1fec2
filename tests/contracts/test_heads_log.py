"""The log of signed heads on every store: appended with the head, proved, repaired.

Pattern: the contract suite's ``store_url`` (memory, a real Redis, a real
         3-master Redis Cluster); heads signed as the journal signs them
         (``HeadSigner.sign`` over the running digest), appended in the same
         batch as the turn's end; bundles built from the store and checked
         with ``helmlog_evidence`` alone.
Role:    contract tests for ``events/_headlog.py``, ``events/memory/store.py``,
         ``events/redis/headlog.py`` and ``events/_evidence.py``.

Laws: issue 30 items 2–4 (the log lives in the same store, is append-only,
repairable from the streams; a session's bundle verifies offline), R19.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from helmlog.events import (
    EventStore,
    HeadSigned,
    HeadSigner,
    HeadsLog,
    Message,
    MessageCommitted,
    TurnEnded,
    TurnStarted,
    log_checkpoint,
    open_event_store,
    session_bundle,
)
from helmlog.events.lowlevel import advance_digest, seal
from helmlog_evidence import (
    Checkpoint,
    SigningKey,
    leaf_hash,
    open_note,
    verify,
    verify_consistency,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEY = SigningKey.generate("helmlog-contract")


async def signed_turn(
    store: EventStore, session_id: str, signer: HeadSigner, n: int = 3
) -> int:
    """Append one turn of ``n`` messages and its signed head, in one batch, as
    the journal does; the seq of the signed head."""
    after, prev = await store.head(session_id)
    batch = [
        TurnStarted(turn=1),
        *(
            MessageCommitted(message=Message(role="user", content=f"m{i}"))
            for i in range(n)
        ),
        TurnEnded(turn=1, final_content="done"),
    ]
    _stamped, records = seal(
        session_id, batch, after_seq=after, prev_hash=prev, key=store.chain_key
    )
    before = await store.read(session_id)
    _seq, digest = advance_digest((0, bytes(32)), [*before, *records])
    last = records[-1]
    head = signer.sign(
        session_id, last.seq, last.hash, digest, keyed=store.chain_key is not None
    )
    _s, signed = seal(
        session_id, [head], after_seq=last.seq, prev_hash=last.hash, key=store.chain_key
    )
    await store.append_sealed(session_id, [*records, *signed], after)
    return signed[0].seq


@pytest.fixture
async def signing_store(store_url: str) -> AsyncIterator[EventStore]:
    """A clean store of each kind that signs with ``KEY``."""
    store = open_event_store(store_url, signer=HeadSigner(KEY))
    yield store
    await store.close()


async def test_a_signed_head_lands_in_the_log_and_its_bundle_verifies(
    signing_store: EventStore,
) -> None:
    """Each signed head's leaf is in the store's log, in order; the session's
    bundle verifies with the public key alone (issue 30 items 2 and 4)."""
    store = signing_store
    assert isinstance(store, HeadsLog)
    await signed_turn(store, "s-1", HeadSigner(KEY))
    await signed_turn(store, "s-2", HeadSigner(KEY))
    at = await signed_turn(store, "s-1", HeadSigner(KEY))
    leaves = await store.log_leaves()
    assert 3 == len(leaves)
    record = (await store.read("s-1", at - 1))[0]
    event = record.decode()
    assert isinstance(event, HeadSigned)
    text = event.note.rpartition("\n\n")[0] + "\n"
    assert 2 == await store.log_index(leaf_hash(text.encode()))
    bundle = await session_bundle(store, "s-1", KEY)
    verdict = verify(bundle, [KEY.public])
    assert (True, at - 1, 3) == (verdict.ok, verdict.head_seq, verdict.checkpoint_size)


async def test_the_log_only_grows_between_checkpoints(
    signing_store: EventStore,
) -> None:
    """A checkpoint kept before more heads are appended is consistent with a
    later one (RFC 9162 consistency proof from the store's leaves)."""
    from helmlog_evidence import consistency_proof

    store = signing_store
    assert isinstance(store, HeadsLog)
    await signed_turn(store, "a", HeadSigner(KEY))
    kept = open_note(await log_checkpoint(store, KEY), [KEY.public])
    for sid in ("b", "c", "a"):
        await signed_turn(store, sid, HeadSigner(KEY))
    now = open_note(await log_checkpoint(store, KEY), [KEY.public])
    old, new = Checkpoint.parse(kept.text), Checkpoint.parse(now.text)  # type: ignore[union-attr]
    proof = consistency_proof(old.size, await store.log_leaves())
    assert (1, 4) == (old.size, new.size)
    assert verify_consistency(old.size, new.size, old.root, new.root, proof)


@pytest.mark.redis
async def test_a_lost_log_is_repaired_from_the_streams_append_only(
    redis_url: str,
) -> None:
    """With the log's keys gone (a leaf that never landed), ``repair_log``
    appends every head the streams hold; run again, it appends nothing."""
    store = open_event_store(redis_url, signer=HeadSigner(KEY))
    try:
        assert isinstance(store, HeadsLog)
        for sid in ("r-1", "r-2"):
            await signed_turn(store, sid, HeadSigner(KEY))
        before = await store.log_leaves()
        raw = aioredis.Redis.from_url(redis_url)
        await raw.delete("helmlog:{evidence}:log", "helmlog:{evidence}:leaves")
        await raw.aclose()
        assert [] == await store.log_leaves()
        assert 2 == await store.repair_log()
        assert sorted(before) == sorted(await store.log_leaves())
        assert 0 == await store.repair_log()
        await store.reindex("r-1")
        assert 2 == len(await store.log_leaves())
    finally:
        await store.close()


async def test_a_resent_head_is_not_logged_twice(signing_store: EventStore) -> None:
    """Repair over streams whose heads are all logged appends nothing: a leaf
    is in the log once (issue 30 item 2)."""
    store = signing_store
    assert isinstance(store, HeadsLog)
    await signed_turn(store, "once", HeadSigner(KEY))
    assert 0 == await store.repair_log("once")
    assert 0 == await store.repair_log()
    assert 1 == len(await store.log_leaves())


async def test_every_tampering_of_a_stored_sessions_bundle_fails(
    signing_store: EventStore,
) -> None:
    """A bundle built from the store verifies; an edit, a delete, a reorder,
    a truncation and a replacement of an event after signing each fail, on
    every store (issue 30 item 4)."""
    import msgspec

    store = signing_store
    await signed_turn(store, "t-1", HeadSigner(KEY), n=4)
    await signed_turn(store, "t-2", HeadSigner(KEY), n=2)
    bundle = await session_bundle(store, "t-1", KEY)
    assert verify(bundle, [KEY.public]).ok
    recs = bundle.records
    other = (await session_bundle(store, "t-2", KEY)).records
    edited = msgspec.structs.replace(recs[2], data=recs[2].data.replace(b"m1", b"mX"))
    cases = {
        "edit": [*recs[:2], edited, *recs[3:]],
        "delete": [*recs[:2], *recs[3:]],
        "reorder": [recs[0], recs[2], recs[1], *recs[3:]],
        "truncate": recs[:-1],
        "replace": [*recs[:1], other[1], *recs[2:]],
    }
    failures = {
        name: verify(msgspec.structs.replace(bundle, records=changed), [KEY.public])
        for name, changed in cases.items()
    }
    assert {
        "edit": ("hash", 3),
        "delete": ("order", 3),
        "reorder": ("order", 2),
        "truncate": ("truncated", len(recs)),
        "replace": ("chain", 2),
    } == {name: (v.failure, v.seq) for name, v in failures.items()}
