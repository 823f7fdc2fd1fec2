"""Portable checkpoints on real Redis: an imported pause is single-use (R9).

Pattern: pause on an in-memory store (the process that paused is gone), then
         two agents on one real Redis store resume the same checkpoint at
         once; compare what ran and what was stored with what the law says.
Role:    integration test for the import path on ``RedisEventStore``
         (issue 8 item 6).
Emits:   nothing.

Laws: R9 (a pause checkpoint whose session the store lacks is imported; of
two concurrent resumes of one checkpoint exactly one proceeds and the other
gets ``"replayed"``; with a chain key only a verifying MAC is imported), R2
(the import is the first append of a new stream: ``expected_seq`` 0), R3.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from helmlog import CheckpointError, check_in_approved
from helmlog.events import (
    MemoryEventStore,
    SessionImported,
    fold,
    open_event_store,
    verify_chain,
)
from tests.unit.runtime.portable_agent import CAP, build, pause

pytestmark = [pytest.mark.redis]

KEY = b"operator-secret-key"


@pytest.mark.parametrize("key", [None, KEY], ids=["no-key", "chain-key"])
async def test_r09_two_imports_of_one_checkpoint_exactly_one_proceeds(
    redis_url: str, key: bytes | None
) -> None:
    """R9/R2: two agents on one Redis store import the same pause at once:
    one answers, the other is refused "replayed"; the tool ran once."""
    cp = (await pause(MemoryEventStore(chain_key=key))).checkpoint
    stores = [open_event_store(redis_url, chain_key=key) for _ in range(2)]
    ran: list[dict[str, Any]] = []
    try:
        agents = [build(store, ran, resuming=True) for store in stores]
        outcomes = await asyncio.gather(
            *(a.resume(cp.to_json(), check_in_approved(by="dana")) for a in agents),
            return_exceptions=True,
        )
        answers = [o for o in outcomes if o == "Refunded."]
        refused = [o for o in outcomes if isinstance(o, CheckpointError)]
        assert (1, ["replayed"]) == (len(answers), [e.reason for e in refused])
        assert [{"order": 7, "amount": CAP}] == ran
        records = await stores[0].read(cp.session_id)
        assert verify_chain(records, key) is None
        events = [r.decode() for r in records]
        assert isinstance(events[0], SessionImported)
        assert cp.digest() == events[0].checkpoint_digest
        assert fold(events).pending is None
    finally:
        for store in stores:
            await store.close()


async def test_r09_a_forged_mac_is_not_imported_into_redis(redis_url: str) -> None:
    """R9: under a chain key, a checkpoint whose MAC does not verify seeds nothing."""
    cp = (await pause(MemoryEventStore(chain_key=KEY))).checkpoint
    store = open_event_store(redis_url, chain_key=KEY)
    ran: list[dict[str, Any]] = []
    try:
        agent = build(store, ran, resuming=True)
        forged = msgspec.structs.replace(cp, mac="0" * 64)
        with pytest.raises(CheckpointError) as caught:
            await agent.resume(forged, check_in_approved(by="dana"))
        assert "tampered" == caught.value.reason
        assert ([], []) == (ran, await store.read(cp.session_id))
    finally:
        await store.close()
