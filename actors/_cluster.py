"""The cluster client: start or join Ray, place sessions, talk to their hosts.

Pattern: a client-side facade with the in-process agent's shape, so code
         written against ``Agent`` runs unchanged on a cluster.
Role:    actors layer; the CLI (``helmlog demo --cluster``) and users start
         here: ``Cluster.local()`` or ``Cluster.connect(address)``.
Emits:   nothing itself; hosts append to the shared store.

Laws: R8 (a fixed number of hosts; placement by ``host_for``), R17 (the same
event types, rows and facts in the same order as in process on the same
store; ``Cluster.local()`` starts or joins a local Ray,
``Cluster.connect(address)`` joins a running cluster).

Why the store must be shared (``redis://``): a session's stream is the truth
and any host (or a client reading a snapshot) must reach it; a host's memory
is a cache. A ``memory://`` store lives in one process and cannot be.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from typing import Any

try:
    import ray
    from ray.exceptions import ActorUnavailableError, RayTaskError
except ImportError as exc:  # depends on the install
    raise ImportError(
        "helmlog.actors needs Ray: install the cluster extra, "
        "e.g. pip install 'helmlog[cluster]'"
    ) from exc

from helmlog.events import Checkpoint, HelmlogError, NoConversationError, SessionState
from helmlog.runtime import AskPause, Tool

from ._host import AgentFactory, SessionHost
from ._placement import host_for
from ._policy import PolicyActor, PolicyLink, ToolExecutor, isolated_tool
from ._wire import HostReply, decode_reply, encode_decision

RESTART_WAIT_S = 60.0


async def _call(ref: Any) -> Any:
    """Await a host call; a helmlog error raised there is raised here as itself."""
    try:
        out = await ref
    except RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, HelmlogError | ValueError | TypeError):
            raise cause from None
        raise
    return out


class ClusterAgent:
    """An agent whose sessions run on the cluster's hosts (``Agent``'s shape)."""

    def __init__(self, cluster: Cluster, hosts: list[Any]) -> None:
        self._cluster = cluster
        self._hosts = hosts
        self._last: HostReply | None = None

    def client(self) -> ClusterAgent:
        """Another client view of the same hosts, with its own last call."""
        return ClusterAgent(self._cluster, self._hosts)

    def _host(self, session_id: str) -> Any:
        return self._hosts[host_for(session_id, len(self._hosts))]

    def _keep(self, data: bytes) -> str | AskPause:
        out, reply = decode_reply(data)
        self._last = reply
        return out

    @property
    def session_id(self) -> str | None:
        """The id of the last run's session."""
        return self._last.session_id if self._last else None

    async def run(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
    ) -> str | AskPause:
        """Run one turn on the host of its session (a new one when fresh)."""
        if continue_from is None:
            sid = uuid.uuid4().hex
            text = None
        else:
            cp = (
                continue_from
                if isinstance(continue_from, Checkpoint)
                else Checkpoint.from_json(continue_from)
            )
            sid, text = cp.session_id, cp.to_json()
        ident = dict(identity) if identity is not None else None
        ref = self._host(sid).run.remote(sid, message, text, ident)
        return self._keep(await _call(ref))

    async def follow_up(self, message: str) -> str | AskPause:
        """Continue the last conversation."""
        cp = self.checkpoint()
        if cp is None:
            raise NoConversationError("never-run")
        if cp.kind == "pause":
            raise NoConversationError("pending-question")
        return await self.run(message, continue_from=cp)

    async def resume(
        self, checkpoint: Checkpoint | str, decision: Any = None
    ) -> str | AskPause:
        """Answer a pause on the host of its session."""
        cp = (
            checkpoint
            if isinstance(checkpoint, Checkpoint)
            else Checkpoint.from_json(checkpoint)
        )
        ref = self._host(cp.session_id).resume.remote(
            cp.session_id, cp.to_json(), encode_decision(decision)
        )
        return self._keep(await _call(ref))

    async def recover(self, session_id: str) -> str | AskPause | None:
        """Finish a turn its previous host left unfinished (R7); ``None`` when
        there was nothing to finish."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESTART_WAIT_S
        while True:
            try:
                data = await _call(self._host(session_id).recover.remote(session_id))
            except ActorUnavailableError:
                # Its host is being restarted; recovering is safe to repeat.
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
                continue
            return None if data is None else self._keep(data)

    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint the last call left."""
        return self._last.checkpoint if self._last else None

    def last_snapshot(self) -> SessionState:
        """The state of the last call's session, as its host served it."""
        return self._last.state if self._last else SessionState()


class Cluster:
    """A set of session hosts on Ray, sharing one event store."""

    def __init__(
        self, store_url: str, n_hosts: int, *, chain_key: bytes | None = None
    ) -> None:
        if not store_url.startswith(("redis://", "rediss://")):
            raise ValueError(
                "a cluster's sessions need a shared store (redis://...), "
                f"not {store_url!r}"
            )
        if n_hosts < 1:
            raise ValueError("a cluster needs at least one session host")
        self.store_url = store_url
        self.n_hosts = n_hosts
        self.chain_key = chain_key
        self._started_ray = False
        self._hosts: list[list[Any]] = []
        self._actors: list[Any] = []

    @classmethod
    def local(
        cls,
        store_url: str,
        *,
        n_hosts: int = 2,
        num_cpus: int | None = None,
        chain_key: bytes | None = None,
    ) -> Cluster:
        """Start (or join) a local Ray instance."""
        cluster = cls(store_url, n_hosts, chain_key=chain_key)
        if not ray.is_initialized():
            ray.init(
                num_cpus=num_cpus,
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
        n_hosts: int = 2,
        chain_key: bytes | None = None,
    ) -> Cluster:
        """Join a running Ray cluster at ``address``."""
        cluster = cls(store_url, n_hosts, chain_key=chain_key)
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            cluster._started_ray = True
        return cluster

    def agent(self, factory: AgentFactory) -> ClusterAgent:
        """Start ``n_hosts`` session hosts for agents built by ``factory(store)``.

        The factory runs inside each host (it is pickled there), once per
        session, and must build its agent on the store it is given.
        """
        # An async actor runs many sessions' calls concurrently on its loop;
        # Ray's stubs do not know actor options on ray.remote, hence Any.
        remote: Any = ray.remote(SessionHost)
        hosts = [
            # A host that dies is restarted by Ray with an empty cache; its
            # sessions re-activate from their streams on first use (R7, R8).
            remote.options(num_cpus=0, max_concurrency=1000, max_restarts=-1).remote(
                factory, self.store_url, i, self.chain_key
            )
            for i in range(self.n_hosts)
        ]
        self._hosts.append(hosts)
        return ClusterAgent(self, hosts)

    def policy(self, factory: Callable[[], Any]) -> list[PolicyLink]:
        """Host the chain ``factory()`` builds in one ``PolicyActor``.

        ``factory`` (picklable: it runs inside the actor) returns a link or a
        sequence of links, in chain order; they share the actor's state. The
        result is one ``PolicyLink`` per hosted link, in that order: what an
        agent factory attaches where it would attach the inline links, and
        what every session on every host shares (R17).
        """
        from ._policy import chain_links

        remote: Any = ray.remote(PolicyActor)
        # One hook at a time: a rule updates its state without racing another
        # session's call.
        handle = remote.options(num_cpus=0, max_concurrency=1).remote(factory)
        described = ray.get(handle.describe.remote())
        self._actors.append(handle)
        return chain_links(handle, described)

    def isolated(self, *tools: Tool) -> list[Tool]:
        """Run these tools in a ``ToolExecutor`` of their own; the returned
        tools are what an agent factory registers in their place. Their
        arguments and results cross as typed messages (R12)."""
        remote: Any = ray.remote(ToolExecutor)
        handle = remote.options(num_cpus=0, max_concurrency=100).remote(list(tools))
        self._actors.append(handle)
        return [isolated_tool(t, handle) for t in tools]

    async def hosted(self) -> list[list[str]]:
        """The sessions each host of the latest agent has activated, by host."""
        if not self._hosts:
            return []
        return list(await asyncio.gather(*(h.hosted.remote() for h in self._hosts[-1])))

    async def shutdown(self) -> None:
        """Stop the hosts (and Ray, when this cluster started it)."""
        for hosts in self._hosts:
            # A host that is dead or restarting has nothing left to close.
            await asyncio.gather(
                *(h.close.remote() for h in hosts), return_exceptions=True
            )
            for h in hosts:
                ray.kill(h)
        self._hosts = []
        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
