"""The event-store contract: a store remembers its sessions and its format.

Pattern: a contract suite (eventsourcing-style): module-level tests taking a
         ``store``/``make_store`` fixture, plus ``erase``: an operator's hand
         deleting a session's stream and head record behind the port's back.
Role:    events layer, shipped tests; this repository runs them on memory,
         Redis and Redis Cluster (``tests/contracts``); a third-party adapter
         runs them too, overriding ``erase`` for its own storage.
Emits:   nothing.

Laws: R25 (a store remembers every session it created, after its stream and
head are deleted), R26 (a store written by this version says it writes head
records, so a stream without its head is refused; ``upgrade_head`` is the
explicit way back).

Why ``erase`` is a fixture with defaults for this repository's adapters: no
port method deletes a session (nothing in helmlog does), so the suite needs
the adapter's own hand for the attack; an adapter of another kind overrides
the fixture, and until it does these tests fail saying so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from helmlog.events import (
    EventStore,
    MemoryEventStore,
    RedisEventStore,
    SequenceConflictError,
    StreamTamperedError,
    read_verified,
    verify_chain,
)
from helmlog.events.redis.keys import head_key, stream_key

from .support import KEY, decision, new_session, turn

__all__ = [
    "erase",
    "test_r25_a_store_remembers_a_session_whose_keys_were_deleted",
    "test_r25_a_store_remembers_only_sessions_it_created",
    "test_r26_a_stream_without_its_head_is_refused_on_a_store_that_writes_heads",
    "test_r26_upgrade_head_restores_a_head_explicitly",
]

Erase = Callable[..., Awaitable[None]]
"""``await erase(store, session_id, *, stream=True, head=True)``."""


@pytest.fixture
def erase() -> Erase:
    """Delete a session's stream and/or head record behind the store's back.

    Override this fixture for an adapter of another kind.
    """

    async def go(
        store: EventStore, session_id: str, *, stream: bool = True, head: bool = True
    ) -> None:
        if isinstance(store, MemoryEventStore):
            if stream:
                store._streams.pop(session_id, None)
            if head:
                store._heads.pop(session_id, None)
        elif isinstance(store, RedisEventStore):
            keys = [stream_key(session_id)] if stream else []
            keys += [head_key(session_id)] if head else []
            for key in keys:
                await store._routes.one(key, "DEL", key)
        else:
            pytest.fail(
                f"override the `erase` fixture for {type(store).__name__}: "
                "delete a session's stream and head record as an operator would"
            )

    return go


async def test_r25_a_store_remembers_only_sessions_it_created(
    store: EventStore,
) -> None:
    """R25: ``remembers`` is false for a session never appended to (a refused
    first append included) and true once an append created it."""
    sid, other = new_session(), new_session()
    before = [await store.remembers(sid), await store.remembers(other)]
    await store.append(sid, turn(1), 0)
    with pytest.raises(SequenceConflictError):
        await store.append(other, turn(1), 3)
    after = [await store.remembers(sid), await store.remembers(other)]
    assert before + after == [False, False, True, False]


async def test_r25_a_store_remembers_a_session_whose_keys_were_deleted(
    make_store: Callable[..., EventStore], erase: Erase
) -> None:
    """R25: with its stream and head record deleted, a session reads as
    absent and is still remembered, by this store and by another opened on
    the same storage."""
    store = make_store(chain_key=KEY)
    sid = new_session()
    seq = await store.append(sid, turn(1), 0)
    await store.append(sid, decision(1), seq)
    await erase(store, sid)
    left = (await store.read(sid), await store.read_head(sid))
    assert left == ([], None)
    assert await store.remembers(sid)
    if not isinstance(store, MemoryEventStore):
        assert await make_store(chain_key=KEY).remembers(sid)


async def test_r26_a_stream_without_its_head_is_refused_on_a_store_that_writes_heads(
    store: EventStore, erase: Erase
) -> None:
    """R26: once written, a store says it writes head records; a stream whose
    head was deleted is then refused by ``read_verified`` ("no-head")."""
    sid = new_session()
    await store.append(sid, turn(1), 0)
    assert await store.writes_heads()
    await erase(store, sid, stream=False)
    assert None is await store.read_head(sid)
    with pytest.raises(StreamTamperedError) as caught:
        await read_verified(store, sid)
    assert (sid, 0, "no-head") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )


async def test_r26_upgrade_head_restores_a_head_explicitly(
    make_store: Callable[..., EventStore], erase: Erase
) -> None:
    """R26: ``upgrade_head`` verifies a headless stream and gives it the head
    of its last record (once); a session with its head, or none, is left."""
    store = make_store(chain_key=KEY)
    sid, absent = new_session(), new_session()
    seq = await store.append(sid, turn(1), 0)
    seq = await store.append(sid, decision(1), seq)
    kept = await store.read_head(sid)
    assert None is await store.upgrade_head(sid)  # it has its head
    await erase(store, sid, stream=False)
    head = await store.upgrade_head(sid)
    assert head is not None and kept == head
    assert seq == head.seq
    records = await read_verified(store, sid)
    assert None is verify_chain(records, KEY, head)
    assert None is await store.upgrade_head(sid)
    assert None is await store.upgrade_head(absent)
    assert not await store.remembers(absent)
