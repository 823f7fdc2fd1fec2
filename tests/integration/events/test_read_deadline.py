"""A Redis that stops answering fails an append within its read deadline (R5).

A server stopped with SIGSTOP (a stalled host, a partition: the socket stays
open and nothing comes back) must not hang an append: every round trip has
a read deadline (the URL's ``socket_timeout``, 10 s by default), after which
the append fails closed with a typed, retryable error (unknown, R24, when
its command was written: the server may still run it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from helmlog.events import (
    HelmlogError,
    LedgerAppendError,
    StoreError,
    TurnStarted,
    open_event_store,
)
from tests.fixtures_redis import RedisServer

pytestmark = [pytest.mark.redis]

DEADLINE_S = 0.5
RESOLVE_S = 0.5


@pytest.mark.asyncio(loop_scope="session")
async def test_r5_a_stopped_redis_fails_an_append_within_the_deadline(
    private_redis: RedisServer,
) -> None:
    """R5/R24: with Redis stopped (SIGSTOP), an append raises a retryable
    helmlog error within the read deadline plus the read-back window, never
    hangs; once the server resumes the store works again."""
    url = f"{private_redis.url}?socket_timeout={DEADLINE_S}&resolve_timeout={RESOLVE_S}"
    store = open_event_store(url)
    sid = "r5-stopped"
    proc = private_redis._proc
    assert proc is not None
    try:
        seq = await store.append(sid, [TurnStarted(turn=1)], 0)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(HelmlogError) as info:
                # The outer bound only keeps a regression from hanging CI.
                await asyncio.wait_for(
                    store.append(sid, [TurnStarted(turn=2)], seq), timeout=30
                )
            took = time.monotonic() - started
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        # StoreError, or LedgerOutcomeUnknownError once its command was sent.
        assert isinstance(info.value, StoreError | LedgerAppendError), info.value
        assert info.value.retryable, info.value
        assert took < DEADLINE_S + RESOLVE_S + 4.0, took
        # The server answers again: the store goes on from what the stream holds.
        last, _hash = await store.head(sid)
        assert last in (1, 2)
        assert last + 1 == await store.append(sid, [TurnStarted(turn=3)], last)
    finally:
        await store.close()


def test_r5_a_redis_store_has_a_read_deadline_by_default() -> None:
    """R5: the default read deadline is 10 s; ``?socket_timeout=`` overrides it."""
    from helmlog.events import RedisEventStore

    default = RedisEventStore.from_url("redis://127.0.0.1:1/0")
    given = RedisEventStore.from_url("redis://127.0.0.1:1/0?socket_timeout=0.25")
    kwargs = [s._client.connection_pool.connection_kwargs for s in (default, given)]
    assert [10.0, 0.25] == [k["socket_timeout"] for k in kwargs]
