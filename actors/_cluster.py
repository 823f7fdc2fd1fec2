"""The cluster client: named, shared session hosts, reached in batches.

Pattern: a client-side facade: ``agent()`` gives views with the in-process
         agent's shape (``ClusterAgent``); the hosts are named, detached Ray
         actors every client process of one cluster shares (``_roster``).
Role:    actors layer; ``Cluster.local(store_url, name=...)`` or
         ``Cluster.connect(...)``, then ``cluster.agent(factory, watch=...)``.

Laws: R8, R17, R21, R22, R27 (a host silent for ``lease_s`` fails its
operations with ``HostUnavailableError`` naming their sessions).
Why one agent factory per cluster name: a host Ray restarts is rebuilt from
its constructor's arguments and must finish its turns with the agent that
ran them. Why a shared store (``redis://``): the stream is the truth any
host must reach; a host's memory is a cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

try:
    import ray
except ImportError as exc:  # depends on the install
    raise ImportError(
        "helmlog.actors needs Ray: install the cluster extra, "
        "e.g. pip install 'helmlog[cluster]'"
    ) from exc

import msgspec

from helmlog.events import CheckpointError, PendingAsk, open_event_store
from helmlog.runtime import AskPause, RedactionPolicy, Tool

from ._batch import HostLink
from ._cluster_agent import ClusterAgent
from ._cluster_watch import ClusterWatch
from ._failover import DEFAULT_FACTS_SWEEP_S
from ._host import AgentFactory
from ._identity import DEFAULT_NAME, NAMESPACE, factory_key
from ._lease import DEFAULT_LEASE_S
from ._policy import ActorRef, PolicyLink, chain_links, isolated_tool
from ._residents import DEFAULT_IDLE_S, DEFAULT_MAX_RESIDENT
from ._roster import (
    check_host,
    describe_host,
    destroy_all,
    existing_host,
    running_hosts,
    start_chain,
    start_executor,
    start_hosts,
)
from ._wire import HostInfo, HostUsage


class Cluster:
    """A named set of session hosts on Ray, sharing one event store.

    Args:
        store_url: the shared store (``redis://`` or ``rediss://``).
        n_hosts: how many hosts; ``None`` takes the running cluster's count
            (2 when it does not run yet).
        name: the cluster's name; its hosts are the detached actors
            ``<name>.host.<i>`` in Ray namespace ``helmlog``.
        chain_key: the store's chain key (hosts compare its digest).
        max_resident: sessions a host keeps at most (default 10,000).
        idle_s: seconds after which an idle session is dropped (default 600).
        facts_sweep_s: how often each host publishes the facts its shard's
            open turns left unpublished (R4; default 30).
        lease_s: how long a host's lease on its shard lasts unless renewed
            (R27; default 30): a host stopped for longer has its open turns
            finished by another host, and this client fails the operations
            it waits on from a host silent that long.
    """

    def __init__(
        self,
        store_url: str,
        n_hosts: int | None = None,
        *,
        name: str = DEFAULT_NAME,
        chain_key: bytes | None = None,
        max_resident: int = DEFAULT_MAX_RESIDENT,
        idle_s: float = DEFAULT_IDLE_S,
        facts_sweep_s: float = DEFAULT_FACTS_SWEEP_S,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        if not store_url.startswith(("redis://", "rediss://")):
            raise ValueError(
                "a cluster's sessions need a shared store (redis://...), "
                f"not {store_url!r}"
            )
        if n_hosts is not None and n_hosts < 1:
            raise ValueError("a cluster needs at least one session host")
        if not name or "/" in name:
            raise ValueError(f"a cluster name is a non-empty word, not {name!r}")
        if max_resident < 1 or idle_s <= 0:
            raise ValueError("max_resident must be >= 1 and idle_s > 0")
        if facts_sweep_s <= 0:
            raise ValueError("facts_sweep_s must be > 0")
        if lease_s <= 0:
            raise ValueError("lease_s must be > 0")
        self.store_url = store_url
        self.name = name
        self._requested_hosts = n_hosts
        self.chain_key = chain_key
        self.max_resident = max_resident
        self.idle_s = idle_s
        self.facts_sweep_s = facts_sweep_s
        self.lease_s = lease_s
        self._started_ray = False
        self._links: list[HostLink] = []
        self._info: HostInfo | None = None
        self._watches: list[ClusterWatch] = []  # closed by shutdown

    @property
    def n_hosts(self) -> int:
        """How many hosts the cluster has (or will have)."""
        if self._info is not None:
            return self._info.n_hosts
        return self._requested_hosts or 2

    @classmethod
    def local(
        cls,
        store_url: str,
        *,
        name: str = DEFAULT_NAME,
        n_hosts: int | None = None,
        num_cpus: int | None = None,
        chain_key: bytes | None = None,
        max_resident: int = DEFAULT_MAX_RESIDENT,
        idle_s: float = DEFAULT_IDLE_S,
        facts_sweep_s: float = DEFAULT_FACTS_SWEEP_S,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> Cluster:
        """Start a local Ray instance (or use the one this process started);
        hosts come with ``agent()``."""
        cluster = cls(
            store_url,
            n_hosts,
            name=name,
            chain_key=chain_key,
            max_resident=max_resident,
            idle_s=idle_s,
            facts_sweep_s=facts_sweep_s,
            lease_s=lease_s,
        )
        if not ray.is_initialized():
            # "local" starts a new instance: never join another process's
            # Ray that happens to run on this machine.
            ray.init(
                address="local",
                num_cpus=num_cpus,
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            cluster._started_ray = True
        return cluster

    @classmethod
    def connect(
        cls,
        address: str,
        store_url: str,
        *,
        name: str = DEFAULT_NAME,
        n_hosts: int | None = None,
        chain_key: bytes | None = None,
        max_resident: int = DEFAULT_MAX_RESIDENT,
        idle_s: float = DEFAULT_IDLE_S,
        facts_sweep_s: float = DEFAULT_FACTS_SWEEP_S,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> Cluster:
        """Join a running Ray cluster at ``address`` (and its named hosts)."""
        cluster = cls(
            store_url,
            n_hosts,
            name=name,
            chain_key=chain_key,
            max_resident=max_resident,
            idle_s=idle_s,
            facts_sweep_s=facts_sweep_s,
            lease_s=lease_s,
        )
        if not ray.is_initialized():
            ray.init(
                address=address,
                namespace=NAMESPACE,
                log_to_driver=False,
                configure_logging=False,
            )
            cluster._started_ray = True
        return cluster

    # -- hosts ------------------------------------------------------------

    def _join(self, handles: list[Any], key: str | None) -> list[HostLink]:
        infos = [describe_host(h) for h in handles]
        for info in infos:
            check_host(info, self, self._requested_hosts, key)
        self._info = infos[0]
        self._links = [
            HostLink(h, i, answer_s=self.lease_s) for i, h in enumerate(handles)
        ]
        return self._links

    def _running(self) -> list[HostLink]:
        """Links to the hosts already running under this name (none: refused)."""
        if self._links:
            return self._links
        return self._join(running_hosts(self.name), None)

    def agent(
        self, factory: AgentFactory, *, watch: Sequence[Any] = ()
    ) -> ClusterAgent:
        """A view of this cluster's hosts running agents built by ``factory``.

        The first call (in any process) creates the named hosts with
        ``factory``; every later call with the same factory gets views of the
        same hosts. ``factory(store)`` runs inside each host, once per
        session, so it must be picklable — a module-level function or a
        ``functools.partial`` of one — and must build its agent on the store it
        is given.

        ``watch``: watchers attached before the first call, as the builder's
        ``.watch()`` (G82); ``on``/``attach`` add more. They hear this agent's
        own sessions, fed from their streams (``ClusterAgent.attach``). Each
        call returns an agent with watchers of its own.

        Raises:
            ClusterConfigError: the factory cannot be shipped or does not
                build on its store; the hosts run with another store URL, host
                count, chain key or factory.
            StoreError: the hosts cannot reach the store.
        """
        key = factory_key(factory)
        first = existing_host(self.name, 0)
        if first is not None:
            # Check the running hosts before creating any missing one.
            info = describe_host(first)
            check_host(info, self, self._requested_hosts, key)
            count = info.n_hosts
        else:
            count = self._requested_hosts or 2
        handles = start_hosts(self, factory, key, count)
        links = self._join(handles, key)
        joined = self._info
        redact = (
            RedactionPolicy(joined.redact_fields, joined.redact_placeholder)
            if joined is not None and joined.redact_fields is not None
            else None
        )
        watcher = ClusterWatch(self.store_url, self.chain_key, redact=redact)
        self._watches.append(watcher)
        return ClusterAgent(self, links, watcher).watch(*watch)

    def policy(self, factory: Callable[[], Any]) -> list[PolicyLink]:
        """Host the chain ``factory()`` builds in one ``PolicyActor``.

        ``factory`` (picklable: it runs inside the actor) returns a link or a
        sequence of links, in chain order; they share the actor's state. The
        result is one ``PolicyLink`` per hosted link, in that order: what an
        agent factory attaches where it would attach the inline links, and
        what every session on every host shares (R17).

        The actor is named for the cluster and the factory
        (``<name>.policy.<module:qualname>``) and detached, so every client
        process of this cluster reaches the same chain and its state; it
        lives until ``destroy()``. It is not restarted when it dies: its
        hooks then deny (fail closed) rather than run on forgotten state.
        """
        ref = ActorRef(f"{self.name}.policy.{factory_key(factory)}", NAMESPACE)
        handle = start_chain(ref, factory)
        described = ray.get(handle.describe.remote())
        return chain_links(ref, described)

    def isolated(self, *tools: Tool) -> list[Tool]:
        """Run these tools in a ``ToolExecutor`` of their own; the returned
        tools are what an agent factory registers in their place. Their
        arguments and results cross as typed messages (R12).

        The executor is named for the cluster and the tools' names
        (``<name>.tools.<a,b>``) and detached, like ``policy``'s actors: every
        client process of this cluster shares it until ``destroy()``.
        """
        names = ",".join(sorted(t.name for t in tools))
        ref = ActorRef(f"{self.name}.tools.{names}", NAMESPACE)
        start_executor(ref, list(tools))
        return [isolated_tool(t, ref) for t in tools]

    # -- approvals ----------------------------------------------------------

    async def pending_asks(self) -> list[PendingAsk]:
        """Pauses waiting on a person across the cluster, from the store's
        pending-asks index (no scan or fold of every session)."""
        store = open_event_store(self.store_url, chain_key=self.chain_key)
        try:
            return await store.pending_asks()
        finally:
            await store.close()

    async def resume(
        self,
        session_id: str,
        decision: Any,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Resume the pending pause of ``session_id`` on its host, which takes
        the pause's checkpoint from the session's stream (``traceparent``:
        the approver's trace context, as ``Agent.resume`` takes it).

        Raises:
            CheckpointError: ``stale`` when the session has no pending pause,
                or what resuming it raises (``replayed``...).
        """
        view = ClusterAgent(self, self._running())
        state = await view.snapshot(session_id)
        cp = state.checkpoint
        if state.pending is None or cp is None or cp.kind != "pause":
            if state.last_seq == 0:
                raise CheckpointError(
                    "unknown-session", f"no session '{session_id}' in the store"
                )
            raise CheckpointError(
                "stale", f"session '{session_id}' has no pending pause"
            )
        return await view.resume(
            cp, decision, traceparent=traceparent, tracestate=tracestate
        )

    # -- what the hosts hold ------------------------------------------------

    async def hosted(self) -> list[list[str]]:
        """The sessions resident on each host, by host."""
        links = self._running()
        return list(await asyncio.gather(*(k.handle.hosted.remote() for k in links)))

    async def usage(self, *, collect: bool = False) -> list[HostUsage]:
        """What each host holds (resident, busy, evicted sessions)."""
        links = self._running()
        data = await asyncio.gather(
            *(k.handle.usage.remote(collect=collect) for k in links)
        )
        return [msgspec.msgpack.decode(d, type=HostUsage) for d in data]

    async def evict(self, idle_s: float | None = None) -> int:
        """Drop, on every host, the sessions idle for ``idle_s`` (default: the
        hosts' own); return how many. The idle sweep does this by itself."""
        links = self._running()
        counts = await asyncio.gather(*(k.handle.evict.remote(idle_s) for k in links))
        return sum(counts)

    async def ping(self, count: int = 1) -> int:
        """``count`` bare round trips to the hosts (batched as calls are);
        return how many answered."""
        view = ClusterAgent(self, self._running())
        ids = [f"ping-{i}" for i in range(count)]
        await asyncio.gather(*(view.client()._op("ping", sid) for sid in ids))
        return count

    # -- stopping -----------------------------------------------------------

    async def shutdown(self, *, hosts: bool = False) -> None:
        """Leave the cluster: stop Ray when this client started it (which ends
        a local cluster's actors too). The named hosts, chains and executors
        stay for other clients unless ``hosts`` (then ``destroy()``)."""
        watches, self._watches = self._watches, []
        for watch in watches:
            await watch.close()
        if hosts:
            await self.destroy()
        self._links = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    async def destroy(self) -> None:
        """Stop this cluster's named hosts, chains and executors for good."""
        await destroy_all(self.name)
        self._links = []
        self._info = None
