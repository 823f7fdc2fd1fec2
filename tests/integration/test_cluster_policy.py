"""Shared rules and isolated tools on a real Ray (R17).

A link hosted by a ``PolicyActor`` shares its state across sessions and hosts;
a tool run by a ``ToolExecutor`` returns what it would inline; neither adds,
removes or reorders a decision.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from helmlog import is_ask_pause
from helmlog.actors import Cluster
from helmlog.events import EventStore, open_event_store

from .cluster_agents import budget, card_agent, pick_card, refund, refund_agent

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    c = Cluster.local(redis_url, n_hosts=2)
    yield c
    await c.shutdown()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[EventStore]:
    s = open_event_store(redis_url)
    yield s
    await s.close()


def _shape(events: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e.type == "decision.filed":
            r = e.row
            out.append((e.type, r.middleware, r.outcome, r.changed, r.why))
        elif e.type in ("stream.tool_end", "message.committed"):
            body = e.result if e.type == "stream.tool_end" else e.message.content
            out.append((e.type, body))
        else:
            out.append((e.type,))
    return out


@_on_session_loop
async def test_r17_a_policy_actor_shares_its_state_across_sessions_and_hosts(
    cluster: Cluster, store: EventStore
) -> None:
    """R17: three refunds in all, across six sessions on two hosts."""
    shared = cluster.policy(budget)
    factory = functools.partial(refund_agent, tools=[refund], links=[shared])
    agent = cluster.agent(factory)
    outcomes = []
    for _ in range(6):
        client = agent.client()
        assert "Done." == await client.run("refund order 7")
        rows = client.last_snapshot().middleware_decisions
        outcomes.append((rows[0].outcome, rows[0].why))
    assert [
        ("allow", "2 refunds left in the budget"),
        ("allow", "1 refunds left in the budget"),
        ("allow", "0 refunds left in the budget"),
        ("deny", "the refund budget is spent"),
        ("deny", "the refund budget is spent"),
        ("deny", "the refund budget is spent"),
    ] == outcomes
    hosted = await cluster.hosted()
    assert all(hosted), "both hosts held sessions (the state crossed hosts)"


@_on_session_loop
async def test_r17_an_isolated_tool_and_a_remote_rule_record_what_inline_ones_do(
    cluster: Cluster, store: EventStore
) -> None:
    """R17: same events, rows and results as the same agent with inline parts."""
    inline = refund_agent(store, tools=[refund], links=[budget()])
    assert "Done." == await inline.run("refund order 7")
    assert inline.session_id is not None

    (isolated,) = cluster.isolated(refund)
    factory = functools.partial(
        refund_agent, tools=[isolated], links=[cluster.policy(budget)]
    )
    remote = cluster.agent(factory).client()
    assert "Done." == await remote.run("refund order 7")
    assert remote.session_id is not None

    local_events = [r.decode() for r in await store.read(inline.session_id)]
    remote_events = [r.decode() for r in await store.read(remote.session_id)]
    assert _shape(local_events) == _shape(remote_events)


@_on_session_loop
async def test_g69_ask_human_in_an_isolated_tool_pauses_and_resumes(
    cluster: Cluster,
) -> None:
    """G69/G70 across the boundary: the answer becomes the isolated tool's result."""
    (isolated,) = cluster.isolated(pick_card)
    agent = cluster.agent(functools.partial(card_agent, tools=[isolated])).client()
    out = await agent.run("refund order 7")
    assert is_ask_pause(out)
    assert ("ask-human", "Which card should the refund go to?") == (
        out.kind,
        out.ask.question,
    )
    assert "Refunded to the card you chose." == await agent.resume(
        out.checkpoint, "the visa ending 4242"
    )
    history = agent.last_snapshot().history
    assert "the visa ending 4242" == history[2].content
