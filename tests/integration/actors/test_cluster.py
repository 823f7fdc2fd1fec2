"""The cluster changes where, not what (R8, R17), on a real local Ray and Redis.

A fixed number of session hosts hosts many sessions, each on the host a stable
hash of its id names; a session run through the cluster appends the same event
types, rows and facts, in the same order, as the same agent run in process on
the same store; errors raised on a host reach the caller as themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from helmlog import DecisionRequiredError, StreamTamperedError, is_ask_pause
from helmlog._demo import demo_agent, run_session
from helmlog.actors import Cluster, ClusterAgent, HostUnavailableError, host_for
from helmlog.events import EventStore, open_event_store, verify_chain

from ...polling import until

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    # Named hosts outlive a client: each test gets (and destroys) its own.
    c = Cluster.local(redis_url, n_hosts=2, name=f"t-{uuid.uuid4().hex[:8]}")
    yield c
    await c.shutdown(hosts=True)


@pytest.fixture
def no_desk(ray_local: None, redis_url: str) -> Iterator[None]:
    """Destroys the CLI's default-named hosts after a CLI test (they outlive it)."""
    import asyncio

    yield
    asyncio.run(Cluster(redis_url, name="desk").destroy())


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[EventStore]:
    s = open_event_store(redis_url)
    yield s
    await s.close()


def _shape(events: list[Any]) -> list[tuple[Any, ...]]:
    """What R17 compares: types in order, and each row's and fact's content."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e.type == "decision.filed":
            r = e.row
            out.append((e.type, r.middleware, r.moment, r.outcome, r.changed, r.why))
        elif e.type == "middleware.decision":
            out.append((e.type, e.middleware, e.moment, e.outcome, e.changed, e.why))
        else:
            out.append((e.type,))
    return out


def test_r8_placement_is_the_same_in_every_process() -> None:
    """R8: host_for is sha256-based, not Python's salted hash()."""
    ids = [f"session-{i}" for i in range(50)]
    here = [host_for(sid, 3) for sid in ids]
    code = (
        f"from helmlog.actors import host_for; print([host_for(s, 3) for s in {ids!r}])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert repr(here) == there.stdout.strip()
    assert {0, 1, 2} == set(here)


@_on_session_loop
async def test_r17_a_session_on_the_cluster_records_what_it_would_in_process(
    cluster: Cluster, store: EventStore
) -> None:
    """R17: same event types, rows and facts, in the same order, as in process."""
    in_process = await run_session(store)
    on_cluster = await run_session(store, cluster.agent(demo_agent).client())
    assert in_process.session_id != on_cluster.session_id
    local = [r.decode() for r in await store.read(in_process.session_id)]
    remote_records = await store.read(on_cluster.session_id)
    assert verify_chain(remote_records) is None
    assert _shape(local) == _shape([r.decode() for r in remote_records])
    assert in_process.transcript == on_cluster.transcript
    assert [
        (r.middleware, r.moment, r.outcome, r.why)
        for r in in_process.state.middleware_decisions
    ] == [
        (r.middleware, r.moment, r.outcome, r.why)
        for r in on_cluster.state.middleware_decisions
    ]


@_on_session_loop
async def test_r8_hosts_hold_many_sessions_placed_by_their_id(
    cluster: Cluster, store: EventStore
) -> None:
    """R8: two hosts hold twelve sessions, each where host_for says."""
    agent = cluster.agent(demo_agent)
    done = [await run_session(store, agent.client()) for _ in range(12)]
    hosted = await cluster.hosted()
    assert 2 == len(hosted)
    for session in done:
        assert session.session_id in hosted[host_for(session.session_id, 2)]
    assert sorted(s.session_id for s in done) == sorted(hosted[0] + hosted[1])


@_on_session_loop
async def test_errors_raised_on_a_host_reach_the_caller_as_themselves(
    cluster: Cluster,
) -> None:
    """A resume without a decision raises DecisionRequiredError here; the
    same checkpoint then resumes correctly (G61) across the boundary."""
    from helmlog._demo import TURNS, the_approval

    agent: ClusterAgent = cluster.agent(demo_agent).client()
    for number, turn in enumerate(TURNS, start=1):
        out = await (
            agent.run(turn.customer) if number == 1 else agent.follow_up(turn.customer)
        )
        if is_ask_pause(out):
            with pytest.raises(DecisionRequiredError) as info:
                await agent.resume(out.checkpoint, None)
            assert "nothing" == info.value.received
            out = await agent.resume(out.checkpoint, the_approval())
        assert isinstance(out, str)
    assert agent.last_snapshot().middleware_decisions


async def _follow_up_reasons(agent: Any) -> list[tuple[str | None, str]]:
    """What follow_up says after a refused input: once after an admitted run,
    once on a view whose only run was refused (G36, G38)."""
    from helmlog import MessageDeniedError, NoConversationError

    said: list[tuple[str | None, str]] = []
    for first in ("hello", None):
        view = agent.client() if hasattr(agent, "client") else agent
        if first is not None:
            assert "one" == await view.run(first)
        with pytest.raises(MessageDeniedError):
            await view.run("blocked")
        with pytest.raises(NoConversationError) as raised:
            await view.follow_up("again")
        kept = None if view.checkpoint() is None else "kept"
        said.append((kept, raised.value.reason))
    return said


@_on_session_loop
async def test_g36_follow_up_after_a_refused_input_says_so_as_in_process(
    cluster: Cluster, store: EventStore
) -> None:
    """G36/R17: the cluster's follow_up raises ``last-input-refused`` (and
    ``never-run`` when no run was admitted) exactly as ``Agent.follow_up``."""
    from .cluster_agents import gated_agent

    expected = [(None, "last-input-refused"), (None, "never-run")]
    inline = await _follow_up_reasons(_InProcessViews(store))
    assert expected == inline
    assert expected == await _follow_up_reasons(cluster.agent(gated_agent))


class _InProcessViews:
    """Fresh in-process agents, one per view, as ``ClusterAgent.client()`` gives."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def client(self) -> Any:
        from .cluster_agents import gated_agent

        return gated_agent(self.store)


@_on_session_loop
async def test_the_callers_trace_context_reaches_the_hosts_record(
    cluster: Cluster, store: EventStore
) -> None:
    """Issue 8 item 8: ``run``/``follow_up``/``resume`` through the cluster
    record the caller's W3C trace context on the turn and on the resume."""
    from helmlog._demo import TURNS, the_approval
    from helmlog.events import PauseResumed, TurnStarted

    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    approver = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    agent: ClusterAgent = cluster.agent(demo_agent).client()
    for number, turn in enumerate(TURNS, start=1):
        if number == 1:
            out = await agent.run(turn.customer, traceparent=caller)
        else:
            out = await agent.follow_up(turn.customer, traceparent=caller)
        if is_ask_pause(out):
            out = await agent.resume(
                out.checkpoint, the_approval(), traceparent=approver
            )
        assert isinstance(out, str)
    assert agent.session_id is not None
    events = [r.decode() for r in await store.read(agent.session_id)]
    starts = [e.traceparent for e in events if isinstance(e, TurnStarted)]
    resumes = [e.traceparent for e in events if isinstance(e, PauseResumed)]
    assert [caller] * len(TURNS) == starts
    assert resumes and [approver] * len(resumes) == resumes


@_on_session_loop
async def test_r19_a_tampered_stream_is_refused_on_the_cluster_as_itself(
    cluster: Cluster, store: EventStore, redis_url: str
) -> None:
    """R19/R12: a pending pause edited in Redis (its hash kept) is refused by
    the hosts — serving the pause, and activating the session afresh — as
    StreamTamperedError naming its seq, raised here as itself; nothing is
    appended."""
    import redis.asyncio as aioredis

    from helmlog._demo import TURNS, the_approval

    agent: ClusterAgent = cluster.agent(demo_agent).client()
    out: Any = None
    for number, turn in enumerate(TURNS, start=1):
        out = await (
            agent.run(turn.customer) if number == 1 else agent.follow_up(turn.customer)
        )
        if is_ask_pause(out):
            break
    assert is_ask_pause(out)
    sid = out.checkpoint.session_id
    key = f"helmlog:{{{sid}}}:events"
    client = aioredis.Redis.from_url(redis_url)
    try:
        entries: Any = await client.xrange(key)
        await client.delete(key)
        for entry_id, fields in entries:
            if int(fields[b"seq"]) == out.checkpoint.seq:
                fields[b"data"] = fields[b"data"].replace(
                    b'"question":"', b'"question":"!'
                )
            await client.xadd(key, fields, id=entry_id)
    finally:
        await client.aclose()
    before = await store.read(sid)
    with pytest.raises(StreamTamperedError) as caught:
        await cluster.resume(sid, the_approval())
    assert (sid, out.checkpoint.seq, "hash") == (
        caught.value.session_id,
        caught.value.seq,
        caught.value.reason,
    )
    # Dropped by its host, the session is refused when it activates again.
    assert 1 <= await cluster.evict(0)
    with pytest.raises(StreamTamperedError) as caught:
        await agent.resume(out.checkpoint, the_approval())
    assert (out.checkpoint.seq, "hash") == (caught.value.seq, caught.value.reason)
    assert before == await store.read(sid)


def test_r18_demo_cluster_runs_the_sessions_on_session_hosts(
    no_desk: None, redis_url: str
) -> None:
    """R18: ``helmlog demo --cluster`` runs governed sessions on the hosts."""
    import json

    from typer.testing import CliRunner

    from helmlog.cli import app

    result = CliRunner().invoke(
        app, ["demo", "--cluster", "--store", redis_url, "--sessions", "3", "--json"]
    )
    assert 0 == result.exit_code, result.output
    report = json.loads(result.stdout)
    assert (3, 9, 60) == (report["sessions"], report["turns"], report["rows"])


def test_r18_demo_cluster_refuses_a_store_hosts_cannot_share(no_desk: None) -> None:
    """A cluster over ``memory://`` is refused with a clear error, exit 1."""
    from typer.testing import CliRunner

    from helmlog.cli import app

    result = CliRunner().invoke(app, ["demo", "--cluster", "--store", "memory://"])
    assert 1 == result.exit_code
    assert "shared store" in result.output


@_on_session_loop
async def test_r22_a_fresh_run_whose_host_died_raises_with_its_session_id(
    cluster: Cluster, store: EventStore
) -> None:
    """R22: the cut fresh run raises HostUnavailableError naming its own
    session (never the previous one); the restarted host then finishes the
    turn by itself, without re-running the tool (R7)."""
    import asyncio

    import ray

    from .cluster_agents import desk_agent

    agent = cluster.agent(desk_agent)
    client = agent.client()
    assert "echo: hello" == await client.run("hello")  # a previous session
    previous = client.session_id
    running = asyncio.ensure_future(client.run("refund order 7"))
    sid = await _until_dispatched(store, exclude=previous)
    assert sid == client.session_id
    ray.kill(agent._links[host_for(sid, 2)].handle, no_restart=False)
    with pytest.raises(HostUnavailableError) as info:
        await running
    assert (sid, True) == (info.value.session_id, info.value.retryable)
    assert sid == client.session_id

    events = await _until_finished(store, sid)
    assert 1 == [e.type for e in events].count("tool.dispatched")
    assert ["c1"] == [
        e.tool_call_id for e in events if e.type == "tool.outcome_unknown"
    ]
    assert "I could not confirm the refund." == events[-1].final_content


async def _until_dispatched(store: EventStore, *, exclude: str | None) -> str:
    """The session that has recorded a tool.dispatched (polled, 60 s)."""

    async def dispatched() -> str | None:
        for candidate in await store.sessions():
            if candidate == exclude:
                continue
            types = [r.decode().type for r in await store.read(candidate)]
            if "tool.dispatched" in types:
                return candidate
        return None

    found = await until("a dispatch recorded", dispatched, 60)
    assert found is not None
    return found


async def _until_finished(store: EventStore, sid: str) -> list[Any]:
    """The session's events once its turn has ended (polled, 60 s)."""

    async def events() -> list[Any]:
        return [r.decode() for r in await store.read(sid)]

    return await until(
        "the turn finishes",
        events,
        60,
        ok=lambda found: bool(found) and found[-1].type == "agent.turn_end",
    )
