"""Session trust survives eviction and a host kill, on real Ray and Redis.

Pattern: a session on a two-host local cluster asks once and is approved;
         then its host drops it (``cluster.evict(0)``, R21) or is killed
         (``ray.kill``; Ray restarts it in a new process, R22), and the same
         call in the next turn passes without asking, its row naming the
         approver. The factory builds a fresh agent on each activation, so
         the only memory it can have is the session's stream.
Role:    integration tests for ``helmlog.rules.approve_once`` (issue 22).
Emits:   nothing.

Laws: G17 (the remembered call is a pass-through whose ``why`` names who
approved), R21 (an evicted session re-activates from its stream with its
approvals), R22 (a session rebuilt by a restarted host, another process,
folds the same approvals), issue 22.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

from helmlog import check_in_approved, is_ask_pause
from helmlog.events import EventStore

from ...polling import until as _until
from .trust_agents import ANSWER, trust_agent

if TYPE_CHECKING:
    from helmlog.actors import Cluster, ClusterAgent

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]
_on_session_loop = pytest.mark.asyncio(loop_scope="session")

REMEMBERED = "approved earlier this session by dana@ops"


@pytest.fixture
async def cluster(ray_local: None, redis_url: str) -> AsyncIterator[Cluster]:
    from helmlog.actors import Cluster

    c = Cluster.local(redis_url, n_hosts=2, name=f"trust-{uuid.uuid4().hex[:8]}")
    yield c
    await c.shutdown(hosts=True)


async def _approved_session(client: ClusterAgent) -> tuple[str, str]:
    """One refund asked about and approved; the session id and the answer."""
    out = await client.run("refund order 7")
    assert is_ask_pause(out)
    assert "approve-once" == out.ask.middleware
    answer = await client.resume(out.checkpoint, check_in_approved(by="dana@ops"))
    assert isinstance(answer, str)
    assert answer.startswith(ANSWER)
    return out.checkpoint.session_id, answer


def _gate_rows(client: ClusterAgent) -> list[tuple[Any, ...]]:
    return [
        (r.tool_call_id, r.outcome, r.changed, r.why)
        for r in client.last_snapshot().middleware_decisions
        if r.middleware == "approve-once"
    ]


async def _asks(store: EventStore, sid: str) -> int:
    return [r.decode().type for r in await store.read(sid)].count("pause.request")


@_on_session_loop
async def test_r21_an_evicted_session_remembers_its_approval(
    cluster: Cluster, store: EventStore
) -> None:
    """R21/G17: dropped by its host, the session re-activates from its stream
    and the same call passes without asking, naming who approved."""
    client = cluster.agent(trust_agent).client()
    sid, _ = await _approved_session(client)
    assert 1 <= await cluster.evict(0)
    assert all(sid not in ids for ids in await cluster.hosted())

    answer = await client.follow_up("refund order 7 again")

    assert isinstance(answer, str), answer
    assert answer.startswith(ANSWER)
    assert [
        ("c1", "ask"),
        ("c1", "allow", False, "approved by dana@ops"),
        ("c2", "allow", False, REMEMBERED),
    ] == [row[:2] if row[1] == "ask" else row for row in _gate_rows(client)]
    assert 1 == await _asks(store, sid)


@_on_session_loop
async def test_r22_a_session_rebuilt_after_its_host_was_killed_remembers(
    cluster: Cluster, store: EventStore
) -> None:
    """R22/G17: the host is killed and restarted in another process, which
    rebuilds the session from its stream with the factory; the same call
    passes without asking, naming who approved."""
    import ray

    from helmlog.actors import host_for

    client = cluster.agent(trust_agent).client()
    sid, first = await _approved_session(client)
    name = f"{cluster.name}.host.{host_for(sid, cluster.n_hosts)}"
    handle = ray.get_actor(name, namespace="helmlog")
    assert sid in await handle.hosted.remote()
    ray.kill(handle, no_restart=False)

    async def restarted() -> bool:
        # The old process held the session; a restarted one holds nothing yet.
        try:
            return sid not in await handle.hosted.remote()
        except ray.exceptions.RayError:
            return False

    await _until("the host restarts", restarted)

    answer = await client.follow_up("refund order 7 again")

    assert isinstance(answer, str), answer
    # Another process ran the second refund: the session was rebuilt there.
    assert first.rsplit(" ", 1)[-1] != answer.rsplit(" ", 1)[-1]
    assert ("c2", "allow", False, REMEMBERED) == _gate_rows(client)[-1]
    assert 1 == await _asks(store, sid)
