"""The roster of a cluster's named actors in Ray: found, checked, started, stopped.

Pattern: a registry by name: hosts (``<name>.host.<i>``), chains
         (``<name>.policy.<factory>``) and executors (``<name>.tools.<a,b>``)
         are detached Ray actors in namespace ``helmlog``, created with
         ``get_if_exists``; a joining client reads ``HostInfo`` and refuses
         other settings.
Role:    actors layer; the ``Cluster`` facade finds, starts and destroys here.

Laws: R8, R12, R21, R22 (``max_restarts=-1``), R27.
Why a change of host count is refused while hosts run: placement is
``sha256(id) % n_hosts``. Why a chain's actor is never restarted: a restart
would run its shared rules on forgotten state; a dead one denies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, Protocol

import msgspec
import ray

from helmlog.runtime import Tool

from ._errors import ClusterConfigError
from ._host import AgentFactory, SessionHost
from ._identity import NAMESPACE, host_name, key_digest, public_store_url
from ._policy import ActorRef, PolicyActor, ToolExecutor
from ._wire import HostInfo, Result, error_from

# Ray's calls a host runs at once: batches and their streams, not sessions.
HOST_CONCURRENCY: Final = 1000


class Settings(Protocol):
    """What a client's cluster asks of its hosts (the ``Cluster``'s fields)."""

    name: str
    store_url: str
    chain_key: bytes | None
    max_resident: int
    idle_s: float
    facts_sweep_s: float
    lease_s: float


def existing_host(cluster: str, index: int) -> Any | None:
    """The handle of host ``index`` of ``cluster``, or ``None`` when none runs."""
    try:
        return ray.get_actor(host_name(cluster, index), namespace=NAMESPACE)
    except ValueError:  # Ray's answer for a name nobody holds
        return None


def describe_host(handle: Any) -> HostInfo:
    """What a running host is; raises what its first check raised."""
    data = ray.get(handle.describe.remote())
    try:
        return msgspec.msgpack.decode(data, type=HostInfo)
    except msgspec.ValidationError:
        failed = msgspec.msgpack.decode(data, type=Result)
        assert failed.error is not None
        raise error_from(failed.error) from None


def check_host(
    info: HostInfo, mine: Settings, n_hosts: int | None, key: str | None
) -> None:
    """Refuse a client whose settings differ from the running hosts'.

    ``n_hosts`` and ``key`` (the factory's) are checked when given.
    """
    compared = {
        "store_url": (info.store_url, mine.store_url),
        "chain_key": (info.key_digest, key_digest(mine.chain_key)),
    }
    if n_hosts is not None:
        compared["n_hosts"] = (str(info.n_hosts), str(n_hosts))
    if key is not None:
        compared["factory"] = (info.factory_key, key)
    for what, (existing, requested) in compared.items():
        if existing == requested:
            continue
        if what == "store_url":
            existing, requested = (
                public_store_url(existing),
                public_store_url(requested),
            )
        elif what == "chain_key":
            existing, requested = "another key", "this one"
        hint = {
            "factory": "one cluster name serves one agent factory (its "
            "hosts finish open turns with it after a restart): use "
            "another name for this agent",
            "n_hosts": "destroy the hosts (Cluster.destroy) to change "
            "their count; sessions re-activate on their new hosts",
        }.get(what, "use another cluster name, or this one's settings")
        raise ClusterConfigError(
            name=mine.name,
            what=what,
            existing=existing,
            requested=requested,
            hint=hint,
        )


def running_hosts(cluster: str) -> list[Any]:
    """The handles of every host running under ``cluster`` (none: refused)."""
    first = existing_host(cluster, 0)
    if first is None:
        raise ClusterConfigError(
            name=cluster,
            what="has no hosts",
            existing="",
            requested="yet",
            hint="start them with cluster.agent(factory)",
        )
    n = describe_host(first).n_hosts
    handles = [first] + [existing_host(cluster, i) for i in range(1, n)]
    if any(h is None for h in handles):
        raise ClusterConfigError(
            name=cluster,
            what="is missing hosts",
            existing="",
            requested=f"of {n}",
            hint="destroy the cluster and start it again",
        )
    return handles


def start_hosts(
    mine: Settings, factory: AgentFactory, key: str, count: int
) -> list[Any]:
    """The handles of ``count`` hosts running agents ``factory`` builds: the
    running ones under this name, the missing ones created."""
    remote: Any = ray.remote(SessionHost)
    return [
        # Detached and named: every client process of this cluster reaches
        # the same hosts; Ray restarts a dead one with the same arguments,
        # and its failover finishes its shard's open turns (R21, R22).
        remote.options(
            name=host_name(mine.name, i),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=-1,
            max_concurrency=HOST_CONCURRENCY,
        ).remote(
            factory,
            mine.store_url,
            i,
            count,
            name=mine.name,
            factory_key=key,
            chain_key=mine.chain_key,
            max_resident=mine.max_resident,
            idle_s=mine.idle_s,
            facts_sweep_s=mine.facts_sweep_s,
            lease_s=mine.lease_s,
        )
        for i in range(count)
    ]


def start_chain(ref: ActorRef, factory: Callable[[], Any]) -> Any:
    """The handle of the ``PolicyActor`` named ``ref`` hosting ``factory()``."""
    remote: Any = ray.remote(PolicyActor)
    # One hook at a time: a rule updates its state without racing another
    # session's call.
    return remote.options(
        name=ref.name,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=1,
    ).remote(factory)


def start_executor(ref: ActorRef, tools: list[Tool]) -> None:
    """Start (or join) the ``ToolExecutor`` named ``ref`` running ``tools``."""
    remote: Any = ray.remote(ToolExecutor)
    remote.options(
        name=ref.name,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=100,
    ).remote(tools)


async def destroy_all(cluster: str) -> None:
    """Stop ``cluster``'s named hosts, chains and executors for good."""
    handles: list[Any] = []
    i = 0
    while (handle := existing_host(cluster, i)) is not None:
        handles.append(handle)
        i += 1
    # A host that is dead or restarting has nothing left to close.
    await asyncio.gather(*(h.close.remote() for h in handles), return_exceptions=True)
    for handle in handles:
        ray.kill(handle, no_restart=True)
    prefixes = (f"{cluster}.policy.", f"{cluster}.tools.")
    for named in ray.util.list_named_actors(all_namespaces=True):
        if named["namespace"] == NAMESPACE and named["name"].startswith(prefixes):
            try:
                actor = ray.get_actor(named["name"], namespace=NAMESPACE)
            except ValueError:
                continue  # it died meanwhile
            ray.kill(actor, no_restart=True)
