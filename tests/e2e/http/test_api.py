"""The HTTP API of ``helmlog serve``, through httpx2, on a real Redis (issue 11).

Every test runs the real app on uvicorn (a thread, a real socket) over a
real ``redis-server``; sessions start and pause through the API itself.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from helmlog.events import fold, open_event_store
from tests.e2e.http import agents
from tests.e2e.http.server import (
    APPROVER_TOKEN,
    OTHER_APPROVER_TOKEN,
    SESSION_TOKEN,
    Running,
    bearer,
    client,
    running,
)
from tests.fixtures_redis import RedisServer

pytestmark = pytest.mark.redis

PROBLEM = "application/problem+json"


@pytest.fixture
def api(redis_url: str) -> Iterator[Running]:
    """``helmlog serve`` of the refund desk on the test's Redis."""
    with running(agents.build, redis_url) as server:
        yield server


def _start(url: str, message: str) -> dict[str, Any]:
    with client(url, SESSION_TOKEN) as c:
        reply = c.post("/sessions", json={"message": message})
    assert 201 == reply.status_code, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _rows(store_url: str, sid: str) -> list[tuple[str, str, str | None]]:
    async def read() -> list[tuple[str, str, str | None]]:
        store = open_event_store(store_url)
        try:
            state = fold(r.decode() for r in await store.read(sid))
        finally:
            await store.close()
        return [(r.middleware, r.outcome, r.why) for r in state.middleware_decisions]

    return asyncio.run(read())


def _length(store_url: str, sid: str) -> int:
    async def read() -> int:
        store = open_event_store(store_url)
        try:
            return len(await store.read(sid))
        finally:
            await store.close()

    return asyncio.run(read())


def test_post_sessions_returns_the_answer_or_the_pause(api: Running) -> None:
    """A message under the ceiling is answered; over it, the pause is returned."""
    answered = _start(api.url, "Refund order 7 for $250")
    assert ("answered", "Done: refunded 250.00 on order 7") == (
        answered["status"],
        answered["answer"],
    )
    paused = _start(api.url, "Refund order 8 for $900")
    assert "paused" == paused["status"]
    assert {
        "session_id": paused["session_id"],
        "tool_call_id": "c8",
        "tool_name": "refund",
        "kind": "ask",
        "middleware": "four-eyes",
        "question": "Refund over $500?",
        "args": None,
        "detail": {"amount": 900.0},
        "asked_at": 0,
        "deadline": None,
    } == paused["ask"]


def test_messages_continue_a_session_by_id_without_a_checkpoint(
    api: Running,
) -> None:
    """``POST /sessions/{id}/messages`` continues from the stream (R1)."""
    sid = _start(api.url, "Refund order 7 for $250")["session_id"]
    with client(api.url, SESSION_TOKEN) as c:
        reply = c.post(f"/sessions/{sid}/messages", json={"message": "thanks"})
        snapshot = c.get(f"/sessions/{sid}").json()
    assert (200, "You said: thanks") == (reply.status_code, reply.json()["answer"])
    assert 2 == snapshot["turn"]
    assert "You said: thanks" == snapshot["history"][-1]["content"]


def test_a_paused_session_cannot_be_continued_until_decided(api: Running) -> None:
    """G68: continuing a session that waits on a person is a 409 problem."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    with client(api.url, SESSION_TOKEN) as c:
        reply = c.post(f"/sessions/{sid}/messages", json={"message": "again"})
    assert (409, PROBLEM, "ERR_NO_CONVERSATION") == (
        reply.status_code,
        reply.headers["content-type"],
        reply.json()["code"],
    )


def test_asks_lists_pending_pauses_with_their_arguments(api: Running) -> None:
    """``GET /asks`` lists each pause from the index, with the call's arguments."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    with client(api.url, APPROVER_TOKEN) as c:
        asks = c.get("/asks").json()
    args = {"order": 8, "amount": 900.0}
    assert [(sid, "c8", "refund", "four-eyes", "Refund over $500?", args)] == [
        (a["session_id"], a["tool_call_id"], a["tool_name"], a["middleware"],
         a["question"], a["args"])
        for a in asks
    ]  # fmt: skip


def test_approval_names_the_authenticated_approver_and_runs_on(
    api: Running, redis_url: str
) -> None:
    """The row says ``approved by <identity>: <note>``; the ask leaves the list."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    with client(api.url, APPROVER_TOKEN) as c:
        reply = c.post(f"/asks/{sid}/c8/approve", json={"note": "checked"})
        left = c.get("/asks").json()
    assert (200, "answered", "Done: refunded 900.00 on order 8") == (
        reply.status_code,
        reply.json()["status"],
        reply.json()["answer"],
    )
    assert [] == left
    assert [
        ("four-eyes", "ask", "Refund over $500?"),
        ("four-eyes", "allow", "approved by dana@ops: checked"),
    ] == _rows(redis_url, sid)


def test_decline_names_the_approver_and_the_tool_never_runs(
    api: Running, redis_url: str
) -> None:
    """G64: a decline files ``declined by <identity>``; the model reads it."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    with client(api.url, OTHER_APPROVER_TOKEN) as c:
        reply = c.post(f"/asks/{sid}/c8/decline", json={})
    assert "Done: declined by human" == reply.json()["answer"]
    assert ("four-eyes", "deny", "declined by erin@ops") == _rows(redis_url, sid)[1]


def test_concurrent_approvals_of_one_ask_exactly_one_wins(
    api: Running, redis_url: str
) -> None:
    """R9: of two approvals racing on one ask, one is 200 and the other 409."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    barrier = threading.Barrier(2)
    statuses: list[tuple[int, str]] = []

    def approve(token: str) -> None:
        with client(api.url, token) as c:
            barrier.wait()
            reply = c.post(f"/asks/{sid}/c8/approve", json={})
        code = reply.json().get("code", "") if reply.status_code != 200 else ""
        statuses.append((reply.status_code, code))

    threads = [
        threading.Thread(target=approve, args=(t,))
        for t in (APPROVER_TOKEN, OTHER_APPROVER_TOKEN)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [(200, ""), (409, "ERR_ASK_RESOLVED")] == sorted(statuses)
    approvals = [r for r in _rows(redis_url, sid) if r[1] == "allow"]
    assert 1 == len(approvals)


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "ERR_UNAUTHENTICATED"),
        (bearer("not-a-token"), 401, "ERR_UNAUTHENTICATED"),
        (bearer(SESSION_TOKEN), 403, "ERR_FORBIDDEN"),
        ({"X-Forwarded-Email": ""}, 401, "ERR_UNAUTHENTICATED"),
    ],
)
def test_an_unauthenticated_or_wrong_role_approval_records_nothing(
    api: Running, redis_url: str, headers: dict[str, str], status: int, code: str
) -> None:
    """401/403 before anything is read or run: the stream and the ask stay."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    before = _length(redis_url, sid)
    with httpx2.Client(base_url=api.url, headers=headers) as c:
        reply = c.post(f"/asks/{sid}/c8/approve", json={"note": "me"})
    assert (status, PROBLEM, code) == (
        reply.status_code,
        reply.headers["content-type"],
        reply.json()["code"],
    )
    assert before == _length(redis_url, sid)
    with client(api.url, APPROVER_TOKEN) as c:
        assert [sid] == [a["session_id"] for a in c.get("/asks").json()]


def test_an_approver_token_cannot_start_sessions(api: Running) -> None:
    """Roles separate starting sessions from approving (issue 11 item 2)."""
    with client(api.url, APPROVER_TOKEN) as c:
        reply = c.post("/sessions", json={"message": "hi"})
    assert (403, "ERR_FORBIDDEN") == (reply.status_code, reply.json()["code"])


def test_a_trusted_proxy_header_names_the_approver(
    api: Running, redis_url: str
) -> None:
    """A header the proxy set (from its address) is the identity in the row."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    with httpx2.Client(base_url=api.url, headers={"X-Forwarded-Email": "pat@ops"}) as c:
        reply = c.post(f"/asks/{sid}/c8/approve", json={})
    assert 200 == reply.status_code, reply.text
    assert ("four-eyes", "allow", "approved by pat@ops") == _rows(redis_url, sid)[1]


def test_a_decision_on_a_resolved_ask_is_409(api: Running) -> None:
    """Deciding an ask that was answered is a conflict, not a second run."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    with client(api.url, APPROVER_TOKEN) as c:
        assert 200 == c.post(f"/asks/{sid}/c8/approve", json={}).status_code
        again = c.post(f"/asks/{sid}/c8/decline", json={})
    assert (409, "ERR_ASK_RESOLVED") == (again.status_code, again.json()["code"])


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/sessions", {"text": "no message field"}, 400, "ERR_BAD_REQUEST"),
        ("POST", "/sessions", {"message": 7}, 400, "ERR_BAD_REQUEST"),
        ("GET", "/sessions/nope", None, 404, "ERR_UNKNOWN_SESSION"),
        ("POST", "/sessions/nope/messages", {"message": "hi"}, 404,
         "ERR_UNKNOWN_SESSION"),
        ("GET", "/no/such/route", None, 404, "ERR_NOT_FOUND"),
    ],
)  # fmt: skip
def test_errors_are_problem_details_with_codes(
    api: Running, method: str, path: str, body: Any, status: int, code: str
) -> None:
    """Bad input is 400, an unknown session 404, each ``application/problem+json``."""
    with client(api.url, SESSION_TOKEN) as c:
        reply = c.request(method, path, json=body)
    assert (status, PROBLEM, code, status) == (
        reply.status_code,
        reply.headers["content-type"],
        reply.json()["code"],
        reply.json()["status"],
    )


def test_unknown_session_for_a_decision_is_404(api: Running) -> None:
    """An approval naming no session is a 404 problem."""
    with client(api.url, APPROVER_TOKEN) as c:
        reply = c.post("/asks/nope/c1/approve", json={})
    assert (404, "ERR_UNKNOWN_SESSION") == (reply.status_code, reply.json()["code"])


def test_a_store_that_is_down_is_503_and_retryable(
    private_redis: RedisServer,
) -> None:
    """A store that cannot be reached is a 503 problem that says retry."""
    with (
        running(agents.build, private_redis.url) as server,
        client(server.url, SESSION_TOKEN) as c,
    ):
        assert 200 == c.get("/healthz").status_code
        private_redis.stop()
        reply = c.get("/sessions/anything")
        health = c.get("/healthz")
    body = reply.json()
    assert (503, PROBLEM, True, "1") == (
        reply.status_code,
        reply.headers["content-type"],
        body["retryable"],
        reply.headers["retry-after"],
    )
    assert (503, True) == (health.status_code, health.json()["retryable"])


def test_session_events_stream_the_facts_only(api: Running) -> None:
    """``GET /sessions/{id}/events`` is SSE of decision facts, never values."""
    sid = _start(api.url, "Refund order 8 for $900")["session_id"]
    events: list[tuple[str, str, dict[str, Any]]] = []
    with (
        client(api.url, APPROVER_TOKEN) as c,
        c.stream("GET", f"/sessions/{sid}/events") as stream,
    ):
        assert "text/event-stream" in stream.headers["content-type"]
        name = event_id = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                events.append((name, event_id, json.loads(line[6:])))
                break
    (name, event_id, fact) = events[0]
    assert ("middleware.decision", "four-eyes", "ask") == (
        name,
        fact["middleware"],
        fact["outcome"],
    )
    assert str(fact["seq"]) == event_id
    assert not {"before", "after", "args"} & set(fact)


def test_snapshot_and_asks_are_served_redacted(redis_url: str) -> None:
    """G86: under a redaction policy the read views hold the placeholder."""
    with running(agents.redacted, redis_url) as server:
        sid = _start(server.url, "Refund order 8 for $900")["session_id"]
        with client(server.url, APPROVER_TOKEN) as c:
            snapshot = c.get(f"/sessions/{sid}").json()
            asks = c.get("/asks").json()
    row = snapshot["middleware_decisions"][0]
    assert ("four-eyes", "ask", "[redacted]") == (
        row["middleware"],
        row["outcome"],
        row["why"],
    )
    assert ("[redacted]", "[redacted]") == (asks[0]["args"], asks[0]["question"])


def test_metrics_count_sessions_turns_and_pending_asks(api: Running) -> None:
    """``/metrics`` is Prometheus text with sessions, turns, asks and store time."""
    _start(api.url, "Refund order 8 for $900")
    with client(api.url) as c:
        reply = c.get("/metrics")
    text = reply.text
    lines = set(text.splitlines())
    assert "text/plain; version=0.0.4; charset=utf-8" == reply.headers["content-type"]
    assert {
        "helmlog_asks_pending 1",
        "helmlog_sessions_started_total 1",
        'helmlog_turns_total{outcome="paused"} 1',
    } <= lines
    assert any(line.startswith("helmlog_store_seconds_count{") for line in lines)


def test_healthz_names_the_store(api: Running, redis_url: str) -> None:
    """``/healthz`` answers ok and the store it reached (no credentials)."""
    with client(api.url) as c:
        body = c.get("/healthz").json()
    assert {"status": "ok", "store": redis_url} == body


def test_asks_events_push_a_new_list_when_an_ask_arrives(api: Running) -> None:
    """``GET /asks/events`` sends the list now and again when it changes."""
    lists: list[list[dict[str, Any]]] = []
    with (
        client(api.url, APPROVER_TOKEN) as c,
        c.stream("GET", "/asks/events") as stream,
    ):
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                lists.append(json.loads(line[6:]))
                if len(lists) == 1:
                    _start(api.url, "Refund order 8 for $900")
                else:
                    break
    assert [[], ["c8"]] == [[a["tool_call_id"] for a in items] for items in lists]


def test_the_api_runs_unchanged_on_a_redis_cluster(redis_cluster_url: str) -> None:
    """R11: start, list, approve and read back on a 3-master Redis Cluster."""
    with running(agents.build, redis_cluster_url) as server:
        sid = _start(server.url, "Refund order 8 for $900")["session_id"]
        with client(server.url, APPROVER_TOKEN) as c:
            listed = [a["session_id"] for a in c.get("/asks").json()]
            approved = c.post(f"/asks/{sid}/c8/approve", json={})
            rows = c.get(f"/sessions/{sid}").json()["middleware_decisions"]
    assert ([sid], "Done: refunded 900.00 on order 8") == (
        listed,
        approved.json()["answer"],
    )
    assert "approved by dana@ops" == rows[1]["why"]
