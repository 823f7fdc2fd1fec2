"""Deadlines: an ask not answered in time is declined by timeout (issue 11 item 4).

The deadline is recorded with the pause (``pause.request.timeout_ms``) and
kept in the asks index, so a server that was not running when the ask was
made — or that restarted — declines it all the same; the decline is recorded
like any other (``declined by timeout``) and the model reads G64's text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helmlog.events import fold, open_event_store
from helmlog.gateway.http._service import LocalRunner, Service
from helmlog.runtime import wall_clock_ms
from tests.e2e.http import agents
from tests.e2e.http.server import APPROVER_TOKEN, SESSION_TOKEN, client, running
from tests.polling import until_sync

pytestmark = pytest.mark.redis


def _state(store_url: str, sid: str) -> Any:
    async def read() -> Any:
        store = open_event_store(store_url)
        try:
            return fold(r.decode() for r in await store.read(sid))
        finally:
            await store.close()

    return asyncio.run(read())


def _deadlines(store_url: str) -> list[tuple[str, int | None, int]]:
    async def read() -> list[tuple[str, int | None, int]]:
        store = open_event_store(store_url)
        try:
            return [
                (a.session_id, a.deadline, a.timestamp)
                for a in await store.pending_asks()
            ]
        finally:
            await store.close()

    return asyncio.run(read())


def _wait_declined(store_url: str, sid: str, timeout: float = 15.0) -> Any:
    return until_sync(
        f"session {sid} declined",
        lambda: _state(store_url, sid),
        timeout,
        ok=lambda state: state.pending is None and not state.in_turn,
    )


def test_an_unanswered_ask_is_declined_by_timeout_after_a_restart(
    redis_url: str,
) -> None:
    """The deadline outlives the server that saw the ask: the next one enforces it."""
    with (
        running(agents.hurried, redis_url, sweep_s=60) as first,
        client(first.url, SESSION_TOKEN) as c,
    ):
        sid = c.post("/sessions", json={"message": "Refund order 8 for $900"}).json()[
            "session_id"
        ]
    ((listed, deadline, asked_at),) = _deadlines(redis_url)
    assert (sid, asked_at + round(agents.DEADLINE_S * 1000)) == (listed, deadline)
    with running(agents.hurried, redis_url, sweep_s=0.1):
        state = _wait_declined(redis_url, sid)
    rows = [(r.middleware, r.outcome, r.why) for r in state.middleware_decisions]
    assert [
        ("four-eyes", "ask", "Refund over $500?"),
        ("four-eyes", "deny", "declined by timeout"),
    ] == rows
    assert "Done: declined by human" == state.history[-1].content
    assert [] == _deadlines(redis_url)


def test_the_server_default_deadline_declines_asks_without_their_own(
    redis_url: str,
) -> None:
    """``--ask-timeout``: an ask with no ``timeout_s`` gets the server's deadline."""
    with running(agents.build, redis_url, ask_timeout_s=0.3, sweep_s=0.1) as server:
        with client(server.url, SESSION_TOKEN) as c:
            sid = c.post(
                "/sessions", json={"message": "Refund order 8 for $900"}
            ).json()["session_id"]
        with client(server.url, APPROVER_TOKEN) as c:
            listed = c.get("/asks").json()
        state = _wait_declined(redis_url, sid)
    assert [sid] == [a["session_id"] for a in listed]
    assert listed[0]["deadline"] == listed[0]["asked_at"] + 300
    assert "declined by timeout" == state.middleware_decisions[1].why


def test_an_ask_answered_before_its_deadline_is_not_declined(redis_url: str) -> None:
    """A person's decision wins; a sweep long after the deadline declines nothing."""
    with running(agents.hurried, redis_url, sweep_s=60) as server:
        with client(server.url, SESSION_TOKEN) as c:
            sid = c.post(
                "/sessions", json={"message": "Refund order 8 for $900"}
            ).json()["session_id"]
        with client(server.url, APPROVER_TOKEN) as c:
            assert 200 == c.post(f"/asks/{sid}/c8/approve", json={}).status_code

    async def sweep_in_an_hour() -> int:
        store = open_event_store(redis_url)
        try:
            service = Service(store, LocalRunner(agents.hurried(store), str))
            return await service.expire(now_ms=wall_clock_ms() + 3_600_000)
        finally:
            await store.close()

    assert 0 == asyncio.run(sweep_in_an_hour())
    whys = [r.why for r in _state(redis_url, sid).middleware_decisions]
    assert ["Refund over $500?", "approved by dana@ops"] == whys
