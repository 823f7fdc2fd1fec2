"""The wire's own write matches redis-py's, on a real Redis (R5, R24).

A round trip writes its pipeline on the connection's stream writer under the
round trip's one deadline (``wire._send``), not through redis-py's
``send_packed_command`` (a task and a timer per write). Differential: the
same pipeline written each way gets the same replies from the server, and a
write on a socket the server closed is redis-py's ``ConnectionError`` both
ways, so the wire's retry and R24's lost-reply rule see what they saw.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from helmlog.events.redis import RedisEventStore
from helmlog.events.redis.wire import _replies, _send, pack
from tests.fixtures_redis import RedisServer

pytestmark = [pytest.mark.redis]

PIPELINE = [
    ("SET", "wire-write:k", b"v\x00\xff"),
    ("GET", "wire-write:k"),
    ("INCR", "wire-write:n"),
    ("HSET", "wire-write:h", "f", 7),
    ("HGETALL", "wire-write:h"),
    ("GET", "wire-write:missing"),
    ("INCR", "wire-write:k"),  # an error reply, in its command's place
]


def _shape(replies: list[Any]) -> list[Any]:
    """Replies with error replies as their class and text (comparable)."""
    return [
        (type(r).__name__, str(r)) if isinstance(r, Exception) else r for r in replies
    ]


async def _round_trip(store: RedisEventStore, write: str) -> list[Any]:
    pool = store._routes.seed.pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        packed = b"".join(pack(c) for c in PIPELINE)
        if write == "wire":
            await _send(conn, packed)
        else:
            await conn.send_packed_command(packed, check_health=False)
        return await _replies(conn, len(PIPELINE))
    finally:
        await pool.release(conn)


@pytest.mark.asyncio(loop_scope="session")
async def test_r24_the_wires_write_gets_the_replies_redis_pys_write_gets(
    private_redis: RedisServer,
) -> None:
    """R24, R5: one pipeline written by the wire and by redis-py's
    ``send_packed_command`` on a real server gets the same replies, error
    replies included, in order."""
    store = RedisEventStore.from_url(private_redis.url)
    try:
        by_redis_py = await _round_trip(store, "redis-py")
        private_redis.flushdb()
        by_wire = await _round_trip(store, "wire")
        assert _shape(by_redis_py) == _shape(by_wire)
        assert b"v\x00\xff" == by_wire[1]
    finally:
        await store.close()


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("write", ["wire", "redis-py"])
async def test_r24_a_write_on_a_connection_the_server_closed_is_a_connection_error(
    private_redis: RedisServer, write: str
) -> None:
    """R24: a pipeline written on a connection the server has closed (killed
    by ``CLIENT KILL``) fails as redis-py's ``ConnectionError``, the class
    the wire retries once and marks lost, whichever way it is written."""
    store = RedisEventStore.from_url(private_redis.url)
    pool = store._routes.seed.pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await _send(conn, pack(("CLIENT", "ID")))
        [client_id] = await _replies(conn, 1)
        private_redis.command("CLIENT", "KILL", "ID", str(client_id))
        with pytest.raises(RedisConnectionError):
            packed = pack(("PING",))
            if write == "wire":
                await _send(conn, packed)
            else:
                await conn.send_packed_command(packed, check_health=False)
            await _replies(conn, 1)
    finally:
        await conn.disconnect()
        await pool.release(conn)
        await store.close()
