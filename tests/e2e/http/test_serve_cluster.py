"""``helmlog serve --cluster NAME``: the same API, the sessions on Ray hosts (R17).

The server is a client of a local Ray's named session hosts; a session
started over HTTP runs on a host, pauses, is approved over HTTP as the
authenticated approver, and records what it would in process.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from helmlog.actors import Cluster
from tests.e2e.http import agents
from tests.e2e.http.server import APPROVER_TOKEN, SESSION_TOKEN, client, running

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def cluster_name(ray_local: None, redis_url: str) -> Iterator[str]:
    """A cluster name of this test's own; its hosts are destroyed after it."""
    name = f"serve-{uuid.uuid4().hex[:8]}"
    yield name
    asyncio.run(Cluster(redis_url, name=name).destroy())


def test_serve_on_a_cluster_pauses_and_approves_over_http(
    redis_url: str, cluster_name: str
) -> None:
    """Start, pause, list, approve: the row names the approver; hosts ran it."""
    with running(agents.build, redis_url, cluster=cluster_name) as server:
        with client(server.url, SESSION_TOKEN) as c:
            answered = c.post("/sessions", json={"message": "Refund order 7 for $250"})
            paused = c.post("/sessions", json={"message": "Refund order 8 for $900"})
            sid = paused.json()["session_id"]
            more = c.post(f"/sessions/{answered.json()['session_id']}/messages",
                          json={"message": "thanks"})  # fmt: skip
        with client(server.url, APPROVER_TOKEN) as c:
            listed = [a["session_id"] for a in c.get("/asks").json()]
            approved = c.post(f"/asks/{sid}/c8/approve", json={"note": "ok"})
            rows = c.get(f"/sessions/{sid}").json()["middleware_decisions"]
    assert ("Done: refunded 250.00 on order 7", "paused", "You said: thanks") == (
        answered.json()["answer"],
        paused.json()["status"],
        more.json()["answer"],
    )
    assert [sid] == listed
    assert "Done: refunded 900.00 on order 8" == approved.json()["answer"]
    assert "approved by dana@ops: ok" == rows[1]["why"]
    hosted = asyncio.run(_hosted(redis_url, cluster_name))
    assert sid in hosted


async def _hosted(url: str, name: str) -> set[str]:
    cluster = Cluster.local(url, name=name)
    cluster.agent(agents.build)
    return {s for host in await cluster.hosted() for s in host}
