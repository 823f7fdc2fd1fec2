"""Bounded requests: bodies, messages and notes have limits (issue 24 item 3, H3).

Pattern: a real ``helmlog serve`` (uvicorn on a free loopback port, real
         Redis) with small limits, and real HTTP clients sending too much,
         declared or streamed.
Role:    e2e tests of ``gateway/http/_limits.py``.
Emits:   nothing.

Laws: H3 (a request past a limit is refused, 413 with a JSON problem, before
its body is read further; nothing of it is stored: no session is started, no
note reaches the ledger, the ask stays pending).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx2

from helmlog.events import open_event_store
from tests.fixtures_redis import RedisServer

from . import agents
from .server import APPROVER_TOKEN, SESSION_TOKEN, bearer, client, running

LIMITS = {"max_body_bytes": 4096, "max_message_chars": 200, "max_note_chars": 50}


def sessions(store_url: str) -> list[str]:
    async def read() -> list[str]:
        store = open_event_store(store_url)
        try:
            return await store.sessions()
        finally:
            await store.close()

    return asyncio.run(read())


def assert_too_large(reply: httpx2.Response) -> None:
    assert 413 == reply.status_code, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    assert "ERR_TOO_LARGE" == reply.json()["code"]


def test_h3_a_declared_body_past_the_limit_is_refused_unread(
    private_redis: RedisServer,
) -> None:
    """H3: a Content-Length over the limit gets 413; no session starts."""
    with (
        running(agents.build, private_redis.url, **LIMITS) as server,
        client(server.url, SESSION_TOKEN) as c,
    ):
        reply = c.post(
            "/sessions",
            content=b'{"message": "' + b"x" * 64_000 + b'"}',
            headers={"content-type": "application/json"},
        )
    assert_too_large(reply)
    assert "64,015 bytes; the limit is 4,096" in reply.json()["detail"]
    assert [] == sessions(private_redis.url)


def test_h3_a_streamed_body_past_the_limit_is_cut(private_redis: RedisServer) -> None:
    """H3: a chunked body (no length declared) is refused at the first chunk
    past the limit; no session starts."""
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:
        yield b'{"message": "'
        for _ in range(64):
            sent.append(1024)
            yield b"y" * 1024
        yield b'"}'

    with (
        running(agents.build, private_redis.url, **LIMITS) as server,
        httpx2.Client(
            base_url=server.url, headers=bearer(SESSION_TOKEN), timeout=30
        ) as c,
    ):
        reply = c.post("/sessions", content=chunks())
    assert_too_large(reply)
    assert [] == sessions(private_redis.url)


def test_h3_a_message_past_its_limit_is_refused(private_redis: RedisServer) -> None:
    """H3: a message longer than ``max_message_chars`` (within the body
    limit) is refused before anything runs."""
    with (
        running(agents.build, private_redis.url, **LIMITS) as server,
        client(server.url, SESSION_TOKEN) as c,
    ):
        reply = c.post("/sessions", json={"message": "z" * 201})
        fine = c.post("/sessions", json={"message": "Refund order 8 for $90"})
    assert_too_large(reply)
    assert "the message is 201 characters; the limit is 200" == reply.json()["detail"]
    assert 201 == fine.status_code, fine.text
    assert 1 == len(sessions(private_redis.url))


def test_h3_a_note_past_its_limit_is_refused_and_the_ask_waits(
    private_redis: RedisServer,
) -> None:
    """H3: an approval with a note over ``max_note_chars`` is refused: the
    ask stays pending and no note reaches the ledger."""
    with running(agents.build, private_redis.url, **LIMITS) as server:
        with client(server.url, SESSION_TOKEN) as c:
            started = c.post("/sessions", json={"message": "Refund order 8 for $900"})
        sid = started.json()["session_id"]
        with client(server.url, APPROVER_TOKEN) as c:
            reply = c.post(f"/asks/{sid}/c8/approve", json={"note": "n" * 51})
            waiting = c.get("/asks").json()
    assert_too_large(reply)
    assert [sid] == [a["session_id"] for a in waiting]
