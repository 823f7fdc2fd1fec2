"""A cluster agent's watchers (G95, G82–G84, R17), on a real local Ray and Redis.

A program that moves from ``Agent`` to ``Cluster.agent`` keeps its watchers:
they hear the same facts and documented events, in the same order, each
once, rows as ``middleware.decision`` facts and never a value of a row; in
the factory's served form when it redacts (G86); unsubscribe stops
delivery, and a watcher that raises changes nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from helmlog import Agent
from helmlog._demo import demo_agent, run_session
from helmlog.actors import Cluster
from helmlog.events import DecisionFiled, EventStore

from ...polling import until as _until
from .watch_agents import capped, redacted

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")

# What differs between two runs of one program: the session, the clock and
# what it times, and the trace context each run starts.
_PER_RUN = {
    "session_id",
    "timestamp",
    "prev_hash",
    "at",
    "duration_ms",
    "paused_duration_ms",
    "content_digest",
    "identity",
    "traceparent",
    "tracestate",
}


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    # Named hosts outlive a client: each test gets (and destroys) its own.
    c = Cluster.local(redis_url, n_hosts=2, name=f"w-{uuid.uuid4().hex[:8]}")
    yield c
    await c.shutdown(hosts=True)


class Keep:
    """A plain watcher: keeps what it hears."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    def heard(self) -> list[Any]:
        """What it heard but the transient tokens (never stored)."""
        return [e for e in self.events if e.type != "stream.token"]


def _shape(events: list[Any]) -> list[tuple[Any, ...]]:
    """Each event's type, seq and every untimed field, in order."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        fields = msgspec.structs.asdict(e)
        kept = tuple(
            sorted((k, repr(v)) for k, v in fields.items() if k not in _PER_RUN)
        )
        out.append((e.type, e.seq, kept))
    return out


def _no_values(events: list[Any]) -> list[str]:
    """Events that carry a row or a row's before/after (none may)."""
    return [
        e.type
        for e in events
        if isinstance(e, DecisionFiled)
        or {"row", "before", "after"} & set(e.__struct_fields__)
    ]


async def _in_process(store: EventStore, factory: Any, program: Any) -> Keep:
    keep = Keep()
    agent: Agent = factory(store)
    agent.attach(keep)
    await program(agent)
    return keep


async def _refund_twice(agent: Any) -> str:
    """The small program: one turn, then a follow-up."""
    assert "Done." == await agent.run("refund order 7")
    assert "Done." == await agent.follow_up("and again")
    assert agent.session_id is not None
    return str(agent.session_id)


@_on_session_loop
async def test_g95_r17_a_program_moved_to_the_cluster_keeps_its_watchers(
    cluster: Cluster, store: EventStore
) -> None:
    """G95, R17: the demo program (follow-ups, a rewrite, an ask and its
    resume) run with a watcher in process and on ``Cluster.agent``: the
    cluster's watcher hears the same events and facts in the same order,
    every seq of the session once, and no row or value of a row."""
    local = await _in_process(
        store, demo_agent, lambda agent: run_session(store, agent)
    )
    remote = Keep()
    agent = cluster.agent(demo_agent, watch=[remote])
    session = await run_session(store, agent)
    await agent.idle()
    heard = remote.heard()
    assert _shape(local.heard()) == _shape(heard)
    stored = await store.read(session.session_id)
    assert [r.seq for r in stored] == [e.seq for e in heard]
    assert {session.session_id} == {e.session_id for e in heard}
    facts = [e for e in heard if e.type == "middleware.decision"]
    rows = [r.decode() for r in stored if r.type == "decision.filed"]
    assert len(rows) == len(facts) > 0
    assert [] == _no_values(heard)
    for kind in ("agent.turn_start", "agent.turn_end", "pause.request"):
        assert kind in {e.type for e in heard}


@_on_session_loop
async def test_g95_watch_on_and_attach_hear_the_same_facts(
    cluster: Cluster, store: EventStore
) -> None:
    """G82, G95: ``watch``, ``attach`` and ``on("middleware.decision")`` on a
    cluster agent hear what the in-process agent's do; a rewrite's fact says
    it changed the value, and carries none."""
    local = await _in_process(store, capped, _refund_twice)
    agent = cluster.agent(capped)
    watched, attached = Keep(), Keep()
    facts: list[Any] = []
    agent.watch(watched)
    agent.attach(attached)
    agent.on("middleware.decision", facts.append)
    await _refund_twice(agent)
    await agent.idle()
    assert _shape(local.heard()) == _shape(watched.heard())
    assert watched.events == attached.events
    assert [e for e in watched.events if e.type == "middleware.decision"] == facts
    assert [("cap", "allow", True, "capped at 25")] * 2 == [
        (f.middleware, f.outcome, f.changed, f.why) for f in facts
    ]
    assert [] == _no_values(watched.events)


@_on_session_loop
async def test_g86_a_redacting_factory_is_served_to_cluster_watchers(
    cluster: Cluster, store: EventStore
) -> None:
    """G86: under the factory's redaction the cluster's watcher hears the
    served form, as the in-process agent's watcher does, though the stream
    keeps the committed messages' text (G87)."""
    local = await _in_process(store, redacted, _refund_twice)
    remote = Keep()
    agent = cluster.agent(redacted, watch=[remote])
    sid = await _refund_twice(agent)
    assert _shape(local.heard()) == _shape(remote.heard())
    committed = [e for e in remote.events if e.type == "message.committed"]
    assert committed
    assert {"[redacted]"} == {e.message.content for e in committed}
    stored = [r.decode() for r in await store.read(sid)]
    kept = [e.message.content for e in stored if e.type == "message.committed"]
    assert "refund order 7" in kept


@_on_session_loop
async def test_g84_a_raising_watcher_changes_nothing_and_g82_unsubscribe_stops(
    cluster: Cluster, store: EventStore
) -> None:
    """G84: a watcher that raises on every event changes neither the answers
    nor what another watcher hears; G82: after its unsubscribe a watcher
    hears nothing more, while the others still do."""

    class Raising:
        def on_event(self, event: Any) -> None:
            raise RuntimeError("a watcher that fails")

    keep, later = Keep(), Keep()
    agent = cluster.agent(capped, watch=[Raising(), keep])
    stop = agent.attach(later)
    sid = await _refund_twice(agent)
    assert [r.seq for r in await store.read(sid)] == [e.seq for e in keep.events]
    assert keep.events == later.events
    stop()
    heard = len(later.events)
    second = await _refund_twice(agent.client())
    assert heard == len(later.events)
    assert [r.seq for r in await store.read(second)] == [
        e.seq for e in keep.events if e.session_id == second
    ]


@_on_session_loop
async def test_g95_views_share_watchers_each_session_in_order_once(
    cluster: Cluster, store: EventStore
) -> None:
    """G95, R4: sessions run at once through several views of one agent are
    each heard in seq order, every seq once, by the agent's one watcher."""
    keep = Keep()
    agent = cluster.agent(capped, watch=[keep])
    views = [agent.client() for _ in range(4)]
    sids = await asyncio.gather(*(_refund_twice(v) for v in views))
    assert len(set(sids)) == 4
    for sid in sids:
        stored = [r.seq for r in await store.read(sid)]
        assert stored == [e.seq for e in keep.events if e.session_id == sid]
    assert {*sids} == {e.session_id for e in keep.events}


@_on_session_loop
async def test_g95_a_fact_reaches_the_watcher_while_the_turn_runs(
    cluster: Cluster, store: EventStore, redis_url: str
) -> None:
    """G95: delivery is live: the cap's fact reaches the cluster agent's
    watcher while the session's tool is still running (it waits for the
    watcher to have heard the fact before it returns)."""
    from .watch_agents import gate_key, gated

    gate = f"helmlog-test-gate-{uuid.uuid4().hex}"
    opened = asyncio.Event()
    seen: list[Any] = []

    async def open_gate(fact: Any) -> None:
        seen.append(fact)
        import redis.asyncio as redis

        client = redis.from_url(redis_url)
        try:
            await client.set(gate_key(gate), b"1", ex=60)
        finally:
            await client.aclose()
        opened.set()

    agent = cluster.agent(gated)
    agent.on("middleware.decision", open_gate)
    assert "Done." == await agent.run(gate)
    assert opened.is_set()
    assert ["cap"] == [f.middleware for f in seen]
    assert agent.session_id is not None
    ends = [
        e
        for e in (r.decode() for r in await store.read(agent.session_id))
        if e.type == "stream.tool_end"
    ]
    assert ["opened"] == [e.result for e in ends]


@_on_session_loop
async def test_g95_r22_a_turn_failover_finishes_is_heard_in_order_once(
    cluster: Cluster, store: EventStore
) -> None:
    """G95, R22: a run whose host dies raises; the restarted host finishes the
    turn, and the watcher hears the rest of it (no fact wakes it: the reader
    polls a turn no call runs), every seq of the session once, in order."""
    import ray

    from helmlog.actors import HostUnavailableError, host_for

    from .cluster_agents import desk_agent

    keep = Keep()
    agent = cluster.agent(desk_agent, watch=[keep])
    running = asyncio.ensure_future(agent.run("refund order 7"))

    async def dispatched() -> str | None:
        sid = agent.session_id
        if sid is None:
            return None
        types = [r.type for r in await store.read(sid)]
        return sid if "tool.dispatched" in types else None

    sid = await _until("no dispatch recorded", dispatched)
    ray.kill(agent._links[host_for(sid, 2)].handle, no_restart=False)
    with pytest.raises(HostUnavailableError):
        await running

    async def finished() -> bool:
        return any(e.type == "agent.turn_end" for e in keep.events)

    await _until("the watcher never heard the turn end", finished)
    stored = await store.read(sid)
    assert [r.seq for r in stored] == [e.seq for e in keep.events]
    assert "tool.outcome_unknown" in {e.type for e in keep.events}
