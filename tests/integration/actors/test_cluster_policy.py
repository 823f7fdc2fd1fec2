"""Shared chains and isolated tools on a real Ray (R17, R12, G6, G7, G69).

A chain hosted by a ``PolicyActor`` shares its state across sessions and
hosts; a tool run by a ``ToolExecutor`` returns what it would inline; neither
adds, removes or reorders a decision, and a hook that raises or returns a
non-outcome in the actor reads exactly as it would inline. What crosses is
typed messages (their round trips are tested in tests/unit/actors).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import ray

from helmlog import is_ask_pause
from helmlog.actors import Cluster, host_for
from helmlog.events import EventStore, open_event_store

from . import chain_agents
from .cluster_agents import (
    budget,
    call_id_agent,
    card_agent,
    pick_card,
    refund,
    refund_agent,
    whose_call,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    # A cluster name serves one agent factory: each test gets its own hosts.
    c = Cluster.local(redis_url, n_hosts=2, name=f"policy-{uuid.uuid4().hex[:8]}")
    yield c
    await c.shutdown(hosts=True)


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
    """R17: three refunds in all, across six or more sessions on two hosts.

    Sessions are placed by their (random) ids (R8); sessions are added past
    six until both hosts have held one, so the shared state always crosses.
    """
    shared = cluster.policy(budget)
    factory = functools.partial(refund_agent, tools=[refund], links=shared)
    agent = cluster.agent(factory)
    outcomes = []
    while len(outcomes) < 6 or not all(await cluster.hosted()):
        assert len(outcomes) < 40, "placement kept every session on one host"
        client = agent.client()
        assert "Done." == await client.run("refund order 7")
        rows = client.last_snapshot().middleware_decisions
        outcomes.append((rows[0].outcome, rows[0].why))
    assert [
        ("allow", "2 refunds left in the budget"),
        ("allow", "1 refunds left in the budget"),
        ("allow", "0 refunds left in the budget"),
    ] + [("deny", "the refund budget is spent")] * (len(outcomes) - 3) == outcomes
    hosted = await cluster.hosted()
    assert all(hosted), "both hosts held sessions (the state crossed hosts)"


@_on_session_loop
async def test_r21_a_chain_is_named_and_shared_by_every_client_of_its_cluster(
    cluster: Cluster, ray_local: None, redis_url: str
) -> None:
    """R21/R17: a chain and an executor are named, detached actors of their
    cluster: a second client's ``policy``/``isolated`` reach the same ones
    (the same state, the same pickled factory), a client's ``shutdown()``
    leaves them, and ``destroy()`` stops them."""
    from ray import cloudpickle

    other = Cluster.local(redis_url, name=cluster.name)
    first, second = cluster.policy(budget), other.policy(budget)
    assert cloudpickle.dumps(first) == cloudpickle.dumps(second)
    (tool_a,), (tool_b,) = cluster.isolated(refund), other.isolated(refund)
    assert cloudpickle.dumps(tool_a.execute) == cloudpickle.dumps(tool_b.execute)
    agent = cluster.agent(functools.partial(refund_agent, tools=[tool_a], links=first))
    assert "Done." == await agent.client().run("refund order 7")
    await other.shutdown()  # the second client leaves; the chain stays
    # The same chain, reached through the second client's proxies: its budget
    # already counts the first client's refund.
    (link,) = second
    from helmlog.runtime import ToolCallContext

    ctx = ToolCallContext("refund", None, "c9", 1, {"order": 7}, (), {})
    assert "1 refunds left in the budget" == (await link.on_tool_call(ctx)).why
    await cluster.destroy()
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert not {n for n in names if n.startswith(f"{cluster.name}.")}


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
        refund_agent, tools=[isolated], links=cluster.policy(budget)
    )
    remote = cluster.agent(factory).client()
    assert "Done." == await remote.run("refund order 7")
    assert remote.session_id is not None

    local_events = [r.decode() for r in await store.read(inline.session_id)]
    remote_events = [r.decode() for r in await store.read(remote.session_id)]
    assert _shape(local_events) == _shape(remote_events)


@_on_session_loop
async def test_r17_an_isolated_tool_runs_as_its_call_not_as_its_tool_name(
    cluster: Cluster, store: EventStore
) -> None:
    """R17: a ToolExecutor runs the call under its call id, as inline (issue 9)."""
    inline = call_id_agent(store, tools=[whose_call])
    assert "Done." == await inline.run("whose call?")
    (isolated,) = cluster.isolated(whose_call)
    factory = functools.partial(call_id_agent, tools=[isolated])
    remote = cluster.agent(factory).client()
    assert "Done." == await remote.run("whose call?")
    results = []
    for agent in (inline, remote):
        assert agent.session_id is not None
        events = [r.decode() for r in await store.read(agent.session_id)]
        results.append([e.result for e in events if e.type == "stream.tool_end"])
    assert [["call c-42"], ["call c-42"]] == results


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


async def _stream_shape(store: EventStore, session_id: str | None) -> list[Any]:
    assert session_id is not None
    return _shape([r.decode() for r in await store.read(session_id)])


@_on_session_loop
async def test_r17_a_two_link_chain_in_one_policy_actor_shares_state_as_inline(
    cluster: Cluster, store: EventStore
) -> None:
    """R17: two links share one actor's state across hosts; same rows, same order."""
    links = cluster.policy(chain_agents.desk_chain)
    assert ["refund-quota", "receipt"] == [link.name for link in links]
    factory = functools.partial(
        chain_agents.one_refund_agent,
        tools=[chain_agents.refund],
        links=links,
        tool_name="refund",
    )
    agent = cluster.agent(factory)
    remote_shapes: list[list[Any]] = []
    placed: set[int] = set()
    # At least five sessions (the quota of three runs out), and until both
    # hosts have held one: the state must cross hosts.
    while len(remote_shapes) < 5 or len(placed) < 2:
        client = agent.client()
        assert "Done." == await client.run("refund order 7")
        assert client.session_id is not None
        placed.add(host_for(client.session_id, 2))
        remote_shapes.append(await _stream_shape(store, client.session_id))

    inline_links = chain_agents.desk_chain()
    inline_shapes: list[list[Any]] = []
    for _ in remote_shapes:
        inline = chain_agents.one_refund_agent(
            store, tools=[chain_agents.refund], links=inline_links, tool_name="refund"
        )
        assert "Done." == await inline.run("refund order 7")
        inline_shapes.append(await _stream_shape(store, inline.session_id))

    assert inline_shapes == remote_shapes
    # The receipt link reads the count the quota link keeps: shared state.
    for n, shape in enumerate(remote_shapes[:3], start=1):
        assert ("message.committed", f"refunded order 7 (desk refund #{n})") in shape
    spent = "the desk's quota of 3 refunds is spent"
    assert ("decision.filed", "refund-quota", "deny", False, spent) in remote_shapes[3]


THREW = "middleware 'rate-check' threw: the rate service is down"
NOT_AN_OUTCOME = (
    "middleware 'sloppy-rule' returned a str, which is not allow(), deny() or ask()"
)


@pytest.mark.parametrize(
    ("chain", "tool_name", "entry"),
    [
        pytest.param(
            chain_agents.raising_chain,
            "refund",
            ("decision.filed", "rate-check", "deny", False, THREW),
            id="G7-hook-raises",
        ),
        pytest.param(
            chain_agents.non_outcome_chain,
            "refund",
            ("decision.filed", "sloppy-rule", "deny", False, NOT_AN_OUTCOME),
            id="G6-not-an-outcome",
        ),
        pytest.param(
            None,
            "broken_refund",
            ("stream.tool_end", "the payments backend refused order 7"),
            id="G18-isolated-tool-raises",
        ),
    ],
)
@_on_session_loop
async def test_g7_a_hosted_hook_or_tool_that_fails_reads_exactly_as_inline(
    cluster: Cluster,
    store: EventStore,
    chain: Any,
    tool_name: str,
    entry: tuple[Any, ...],
) -> None:
    """G6/G7/G18: a raise or a non-outcome in an actor files the inline text."""
    tool = getattr(chain_agents, tool_name)
    inline_links = [] if chain is None else [chain()]
    inline = chain_agents.one_refund_agent(
        store, tools=[tool], links=inline_links, tool_name=tool_name
    )
    assert "Done." == await inline.run("refund order 7")

    links = [] if chain is None else cluster.policy(chain)
    tools = [tool] if chain is not None else cluster.isolated(tool)
    factory = functools.partial(
        chain_agents.one_refund_agent, tools=tools, links=links, tool_name=tool_name
    )
    remote = cluster.agent(factory).client()
    assert "Done." == await remote.run("refund order 7")

    expected = await _stream_shape(store, inline.session_id)
    assert expected == await _stream_shape(store, remote.session_id)
    assert entry in expected
