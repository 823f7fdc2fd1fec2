"""H2, tenancy: a session is its app's, an approver decides for its apps only.

Every test runs the real app on uvicorn (a thread, a real socket) over a
real ``redis-server``. The matrix asks every route as five callers about the
billing app's sessions — the owner (a billing session token), another app (a
support session token), an approver in scope (billing), one out of scope
(support) and no one — and checks the status and that nothing of a session
out of the caller's scope reaches any body: a session out of scope answers
byte for byte as an unknown one (404), never 403, so its id does not leak.
The restart test shows the owner lives in the stream, not in a server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from helmlog.events import TurnStarted, open_event_store
from tests.e2e.http import agents
from tests.e2e.http.server import client, running

BILLING = "t-billing-api"
BILLING_BATCH = "t-billing-batch"
SUPPORT = "t-support-api"
DANA = "t-dana-billing"
ERIN = "t-erin-support"
ROOT = "t-root-every-app"
AUTH: dict[str, Any] = {
    "tokens": [
        {"identity": "billing-api", "roles": ["session"], "app": "billing",
         "token": BILLING},
        {"identity": "billing-batch", "roles": ["session"], "app": "billing",
         "token": BILLING_BATCH},
        # No ``app``: its sessions belong to its identity, "support-api".
        {"identity": "support-api", "roles": ["session"], "token": SUPPORT},
        {"identity": "dana@ops", "roles": ["approver"], "apps": ["billing"],
         "token": DANA},
        {"identity": "erin@ops", "roles": ["approver"], "apps": ["support-api"],
         "token": ERIN},
        {"identity": "root@ops", "roles": ["approver"], "apps": ["*"],
         "token": ROOT},
    ],
}  # fmt: skip

# The five callers, as the billing app's sessions see them, in the order
# they call: the one approver who may decide comes last.
CALLERS: dict[str, str | None] = {
    "owner": BILLING,
    "other app": SUPPORT,
    "approver out of scope": ERIN,
    "no token": None,
    "approver in scope": DANA,
}
UNKNOWN = "no-such-session-0000"


@dataclass(frozen=True)
class World:
    """A server, the billing app's sessions, and the support app's ask."""

    url: str
    answered: str  # billing's, answered: "Refund order 7 for $250"
    paused: str  # billing's, asking about call c8: "Refund order 8 for $900"
    support: str  # support's, asking about call c9: "Refund order 9 for $700"

    def billing_marks(self) -> tuple[str, ...]:
        """What would show that something of billing's sessions leaked."""
        return (self.answered, self.paused, "order 7", "order 8", "900.0", "250.0")

    def support_marks(self) -> tuple[str, ...]:
        """What would show that something of support's session leaked."""
        return (self.support, "order 9", "700.0")


def _start(url: str, token: str, message: str) -> str:
    with client(url, token) as c:
        reply = c.post("/sessions", json={"message": message})
    assert 201 == reply.status_code, reply.text
    sid: str = reply.json()["session_id"]
    return sid


@pytest.fixture
def world(redis_url: str) -> Iterator[World]:
    """``helmlog serve`` with two apps' sessions on the test's Redis."""
    with running(agents.build, redis_url, auth=AUTH) as server:
        yield World(
            url=server.url,
            answered=_start(server.url, BILLING, "Refund order 7 for $250"),
            paused=_start(server.url, BILLING, "Refund order 8 for $900"),
            support=_start(server.url, SUPPORT, "Refund order 9 for $700"),
        )


def _call(
    url: str, token: str | None, method: str, path: str, body: Any = None
) -> tuple[int, str]:
    """One request; an event stream's answer is its first event's data."""
    with client(url, token) as c:
        if not path.endswith("/events"):
            reply = c.request(method, path, json=body)
            return reply.status_code, reply.text
        with c.stream(method, path) as stream:
            if stream.status_code != 200:
                return stream.status_code, stream.read().decode()
            data: list[str] = []
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    data.append(line[6:])
                elif not line and data:
                    return 200, "\n".join(data)
    raise AssertionError(f"{path}: the stream ended without data")


def _unknown_body(
    url: str, token: str | None, method: str, path: str, sid: str, body: Any = None
) -> str:
    """The body the same request gets for a session that does not exist."""
    _, text = _call(url, token, method, path.replace(sid, UNKNOWN), body)
    return text.replace(UNKNOWN, sid)


def _leaks(text: str, marks: tuple[str, ...]) -> list[str]:
    return [m for m in marks if m in text]


def _matrix(
    world: World, method: str, path: str, body: Any = None
) -> dict[str, tuple[int, str]]:
    return {
        who: _call(world.url, token, method, path, body)
        for who, token in CALLERS.items()
    }


@pytest.mark.redis
@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("GET", "/events")],
    ids=["snapshot", "facts-sse"],
)
def test_h2_a_session_is_read_by_its_app_and_its_approvers_only(
    world: World, method: str, suffix: str
) -> None:
    """H2: snapshot and facts: owner and in-scope approver 200, others 404 as
    unknown (never 403), no token 401; no 404 body holds the session."""
    path = f"/sessions/{world.answered}{suffix}"
    got = _matrix(world, method, path)
    assert {
        "owner": 200,
        "other app": 404,
        "approver in scope": 200,
        "approver out of scope": 404,
        "no token": 401,
    } == {who: status for who, (status, _) in got.items()}
    for who in ("other app", "approver out of scope"):
        token = CALLERS[who]
        expected = _unknown_body(world.url, token, method, path, world.answered)
        assert expected == got[who][1], who
        assert [world.answered] == _leaks(got[who][1], world.billing_marks())
    assert [] == _leaks(got["no token"][1], world.billing_marks())
    assert "order 7" in got["owner"][1] or suffix == "/events"


@pytest.mark.redis
def test_h2_a_session_is_continued_by_its_own_app_only(world: World) -> None:
    """H2: messages: the owner 200 (any token of its app), another app 404 as
    unknown, approvers 403 by role (before any read), no token 401."""
    path = f"/sessions/{world.answered}/messages"
    got = _matrix(world, "POST", path, {"message": "thanks"})
    assert {
        "owner": 200,
        "other app": 404,
        "approver in scope": 403,
        "approver out of scope": 403,
        "no token": 401,
    } == {who: status for who, (status, _) in got.items()}
    expected = _unknown_body(
        world.url, SUPPORT, "POST", path, world.answered, {"message": "thanks"}
    )
    assert expected == got["other app"][1]
    for who in ("approver in scope", "approver out of scope", "no token"):
        assert [] == _leaks(got[who][1], world.billing_marks()), who
    batch = _call(world.url, BILLING_BATCH, "POST", path, {"message": "again"})
    assert (200, "You said: again") == (batch[0], json.loads(batch[1])["answer"])


@pytest.mark.redis
@pytest.mark.parametrize(
    "path", ["/asks", "/asks/events", "/page/asks/events", "/"]
)  # fmt: skip
def test_h2_an_approver_lists_only_the_asks_of_its_apps(
    world: World, path: str
) -> None:
    """H2: the asks (JSON, SSE, the page's fragment, the page) list only the
    caller's apps' asks; session tokens 403, no token 401."""
    got = _matrix(world, "GET", path)
    statuses = {who: status for who, (status, _) in got.items()}
    if path == "/":  # the page: a sign-in form for no one, 403 for a session
        assert (200, 200, 403) == (
            statuses["approver in scope"],
            statuses["approver out of scope"],
            statuses["owner"],
        )
    else:
        assert {
            "owner": 403,
            "other app": 403,
            "approver in scope": 200,
            "approver out of scope": 200,
            "no token": 401,
        } == statuses
    dana, erin = got["approver in scope"][1], got["approver out of scope"][1]
    assert (world.paused in dana, world.support in erin) == (True, True)
    assert [] == _leaks(dana, world.support_marks())
    assert [] == _leaks(erin, world.billing_marks())
    for who in ("owner", "other app", "no token"):
        text = got[who][1]
        assert [] == _leaks(text, world.billing_marks() + world.support_marks())
    if path == "/asks":
        assert [world.paused] == [a["session_id"] for a in json.loads(dana)]
        assert [world.support] == [a["session_id"] for a in json.loads(erin)]
        with client(world.url, ROOT) as c:
            every = {a["session_id"] for a in c.get("/asks").json()}
        assert {world.paused, world.support} == every


@pytest.mark.redis
@pytest.mark.parametrize("verdict", ["approve", "decline"])
def test_h2_an_approver_decides_only_the_asks_of_its_apps(
    world: World, verdict: str
) -> None:
    """H2: a decision out of scope is a 404 as for an unknown session and
    changes nothing; session tokens 403, no token 401; in scope, 200."""
    path = f"/asks/{world.paused}/c8/{verdict}"
    got = _matrix(world, "POST", path, {"note": "mine"})
    assert {
        "owner": 403,
        "other app": 403,
        "approver in scope": 200,
        "approver out of scope": 404,
        "no token": 401,
    } == {who: status for who, (status, _) in got.items()}
    expected = _unknown_body(world.url, ERIN, "POST", path, world.paused, {})
    assert expected == got["approver out of scope"][1]
    for who in ("owner", "other app", "no token"):
        assert [] == _leaks(got[who][1], world.billing_marks()), who
    # The others called first and changed nothing: Dana's decision is the one.
    with client(world.url, DANA) as c:
        rows = c.get(f"/sessions/{world.paused}").json()["middleware_decisions"]
    assert f"{verdict}d by dana@ops: mine" == rows[1]["why"]
    reach = _call(world.url, DANA, "POST", f"/asks/{world.support}/c9/approve", {})
    assert 404 == reach[0]
    with client(world.url, ERIN) as c:
        assert [world.support] == [a["session_id"] for a in c.get("/asks").json()]


@pytest.mark.redis
def test_h2_sessions_are_started_by_session_tokens_and_owned_by_their_app(
    world: World, redis_url: str
) -> None:
    """H2: ``POST /sessions`` as each caller; the owner is recorded in the
    stream, in the identity of the session's first ``agent.turn_start``."""
    got = _matrix(world, "POST", "/sessions", {"message": "hello"})
    assert {
        "owner": 201,
        "other app": 201,
        "approver in scope": 403,
        "approver out of scope": 403,
        "no token": 401,
    } == {who: status for who, (status, _) in got.items()}

    async def first_identity(sid: str) -> Any:
        store = open_event_store(redis_url)
        try:
            records = await store.read(sid)
        finally:
            await store.close()
        events = [r.decode() for r in records]
        return next(e.identity for e in events if isinstance(e, TurnStarted))

    sid = json.loads(got["other app"][1])["session_id"]
    assert {"principal": "support-api", "app": "support-api", "session_id": sid} == (
        asyncio.run(first_identity(sid))
    )


@pytest.mark.redis
def test_h2_ownership_holds_on_another_replica_and_after_a_restart(
    redis_url: str,
) -> None:
    """H2: a second server on the same store, and one started after the first
    stopped, enforce the owner the first recorded (it lives in the stream)."""

    def enforced(url: str, sid: str) -> dict[str, int]:
        return {
            "other app reads": _call(url, SUPPORT, "GET", f"/sessions/{sid}")[0],
            "out of scope decides": _call(
                url, ERIN, "POST", f"/asks/{sid}/c8/approve", {}
            )[0],
            "out of scope lists": len(
                [a for a in json.loads(_call(url, ERIN, "GET", "/asks")[1])
                 if a["session_id"] == sid]
            ),
            "owner reads": _call(url, BILLING, "GET", f"/sessions/{sid}")[0],
        }  # fmt: skip

    held = {
        "other app reads": 404,
        "out of scope decides": 404,
        "out of scope lists": 0,
        "owner reads": 200,
    }
    with running(agents.build, redis_url, auth=AUTH) as first:
        sid = _start(first.url, BILLING, "Refund order 8 for $900")
        with running(agents.build, redis_url, auth=AUTH) as replica:
            assert held == enforced(replica.url, sid)
    with running(agents.build, redis_url, auth=AUTH) as restarted:
        assert held == enforced(restarted.url, sid)
        approved = _call(restarted.url, DANA, "POST", f"/asks/{sid}/c8/approve", {})
    assert (200, "Done: refunded 900.00 on order 8") == (
        approved[0],
        json.loads(approved[1])["answer"],
    )


@pytest.mark.redis
def test_h2_a_session_with_no_recorded_owner_is_every_app_approvers_only(
    redis_url: str,
) -> None:
    """H2, fail closed: a session started outside ``serve`` names no app, so
    no session token and no scoped approver sees it; ``apps = ["*"]`` does."""

    async def outside() -> str:
        store = open_event_store(redis_url)
        try:
            agent = agents.build(store)
            await agent.run("Refund order 8 for $900", session_id="outside-1")
        finally:
            await store.close()
        return "outside-1"

    sid = asyncio.run(outside())
    with running(agents.build, redis_url, auth=AUTH) as server:
        reads = {
            name: _call(server.url, token, "GET", f"/sessions/{sid}")[0]
            for name, token in (("billing", BILLING), ("dana", DANA), ("root", ROOT))
        }
        listed = {
            name: [
                a["session_id"]
                for a in json.loads(_call(server.url, token, "GET", "/asks")[1])
            ]
            for name, token in (("dana", DANA), ("root", ROOT))
        }
    assert {"billing": 404, "dana": 404, "root": 200} == reads
    assert {"dana": [], "root": [sid]} == listed
