"""helmlog.rules hosted by a PolicyActor on a real Ray: one limit for every session.

A ``Budget`` and a ``RateLimit`` are ordinary links, so ``Cluster.policy``
hosts them unchanged; their state lives in the link, so sessions on two hosts
spend one budget and fill one window (R17, issue 12 item 7).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator

import pytest

from helmlog.actors import Cluster
from helmlog.rules import Budget, RateLimit

from .cluster_agents import refund, refund_agent

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")


def shared_limits() -> list[object]:
    """The policy factory (runs inside the PolicyActor; module level for Ray)."""
    return [
        RateLimit("refund-rate", max_calls=100, per_s=3600),
        Budget("refund-budget", limit=3),
    ]


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    c = Cluster.local(redis_url, n_hosts=2, name=f"rules-{uuid.uuid4().hex[:8]}")
    yield c
    await c.shutdown(hosts=True)


@_on_session_loop
async def test_r17_a_hosted_budget_is_spent_by_sessions_on_every_host(
    cluster: Cluster,
) -> None:
    """R17: three refunds in all across five sessions, whichever host ran each."""
    links = cluster.policy(shared_limits)
    agent = cluster.agent(functools.partial(refund_agent, tools=[refund], links=links))
    outcomes = []
    for _ in range(5):
        client = agent.client()
        assert "Done." == await client.run("refund order 7")
        rows = client.last_snapshot().middleware_decisions
        outcomes.append([(r.middleware, r.outcome, r.why) for r in rows])

    denied = (
        "budget 'refund-budget' has 0 left of 3, less than this call needs; "
        "do not retry it in this run"
    )
    assert [
        [("refund-rate", "allow", None), ("refund-budget", "allow", "2 left")],
        [("refund-rate", "allow", None), ("refund-budget", "allow", "1 left")],
        [("refund-rate", "allow", None), ("refund-budget", "allow", "0 left")],
        [("refund-rate", "allow", None), ("refund-budget", "deny", denied)],
        [("refund-rate", "allow", None), ("refund-budget", "deny", denied)],
    ] == outcomes
