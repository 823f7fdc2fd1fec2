"""The cluster client: named, shared session hosts, reached in batches.

Pattern: a client-side facade with the in-process agent's shape, so code
         written against ``Agent`` runs unchanged on a cluster; the hosts are
         named, detached Ray actors that every client process of one cluster
         shares.
Role:    actors layer; the CLI, an HTTP server and tests start here:
         ``Cluster.local(store_url, name=...)`` or
         ``Cluster.connect(address, store_url, name=...)``, then
         ``cluster.agent(factory)``.
Emits:   nothing itself; hosts append to the shared store.

Laws: R8 (a fixed number of hosts; placement by ``host_for``), R17 (the same
event types, rows and facts in the same order as in process on the same
store), R21 (hosts are named, detached actors shared by every client process;
they keep at most ``max_resident`` sessions and drop those idle for
``idle_s``), R22 (a host that starts or restarts finishes its shard's open
turns; an error raised because a host died carries the session id, and
``ClusterAgent.session_id`` never names another session).

Why one agent factory per cluster name: a host that Ray restarts is rebuilt
from its constructor's arguments, and must finish the open turns of its shard
with the agent that ran them (R22). A factory given to the constructor is
always there after a restart; a registry filled by later calls would be
empty. So the first ``agent(factory)`` creates the hosts with its factory, and
later calls — in any process — with the same factory (by ``module:qualname``)
get views of the same hosts; another factory is refused with
``ClusterConfigError``: give that agent a cluster of its own name.

Why the store must be shared (``redis://``): a session's stream is the truth
and any host (or a client reading a snapshot) must reach it; a host's memory
is a cache. A ``memory://`` store lives in one process and cannot be.

Why a change of host count is refused while hosts run: placement is
``sha256(id) % n_hosts``; with another count most sessions live elsewhere.
Destroy the hosts (``Cluster.destroy()``) and start the new count: each
session re-activates from its stream on its new host on first use, and a
turn still running on an old host is fenced by the store's seq check (its
next append conflicts and appends nothing, R2, R20).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import pickle
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

try:
    import ray
except ImportError as exc:  # depends on the install
    raise ImportError(
        "helmlog.actors needs Ray: install the cluster extra, "
        "e.g. pip install 'helmlog[cluster]'"
    ) from exc

import msgspec

from helmlog.events import (
    Checkpoint,
    ClusterConfigError,
    HostUnavailableError,
    MessageDeniedError,
    NoConversationError,
    PendingAsk,
    SessionState,
    open_event_store,
)
from helmlog.runtime import AskPause, Tool

from ._batch import HostLink
from ._failover import DEFAULT_FACTS_SWEEP_S
from ._host import (
    DEFAULT_IDLE_S,
    DEFAULT_MAX_RESIDENT,
    AgentFactory,
    HostInfo,
    HostUsage,
    SessionHost,
    key_digest,
)
from ._placement import host_for
from ._policy import PolicyActor, PolicyLink, ToolExecutor, isolated_tool
from ._wire import (
    NIL,
    Op,
    OpKind,
    Result,
    decode_state,
    encode_decision,
    error_from,
    output_of,
)

NAMESPACE: Final = "helmlog"
DEFAULT_NAME: Final = "desk"
# How long a retried call (a read, a recover, a resume) waits for a
# restarting host before it gives up and raises HostUnavailableError.
RESTART_WAIT_S: Final = 60.0
# Ray's calls a host runs at once: batches and their streams, not sessions.
HOST_CONCURRENCY: Final = 1000


def host_name(cluster: str, index: int) -> str:
    """The Ray actor name of one host of a cluster (in namespace ``helmlog``)."""
    return f"{cluster}.host.{index}"


def factory_key(factory: Any) -> str:
    """``module:qualname`` of an agent factory (a partial's adds its arguments'
    digest); refuses what a host in another process could not rebuild."""
    func = factory.func if isinstance(factory, functools.partial) else factory
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not callable(factory) or module is None or qualname is None:
        raise _factory_error(factory, "is not a function")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise _factory_error(factory, "is a lambda or a function defined inside one")
    try:
        _pickle(factory)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise _factory_error(factory, f"cannot be pickled ({exc})") from exc
    key = f"{module}:{qualname}"
    if isinstance(factory, functools.partial):
        bound = _pickle((factory.args, sorted(factory.keywords.items())))
        key += f"[{hashlib.sha256(bound).hexdigest()[:12]}]"
    return key


def _pickle(value: Any) -> bytes:
    """What Ray will ship: ``cloudpickle`` (it pickles partials and mains)."""
    from ray import cloudpickle

    data: bytes = cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    return data


def _factory_error(factory: Any, why: str) -> ClusterConfigError:
    return ClusterConfigError(
        name="",
        what="the agent factory",
        existing="",
        requested=f"{factory!r} {why}",
        hint="hosts run it in other processes: pass a module-level function "
        "(or a functools.partial of one) taking the store",
    )


def public_store_url(url: str) -> str:
    """A store URL without its credentials (for error messages)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class ClusterAgent:
    """An agent whose sessions run on the cluster's hosts (``Agent``'s shape).

    Each view remembers its own last call (session id, checkpoint, state);
    ``client()`` gives another view of the same hosts.
    """

    def __init__(self, cluster: Cluster, links: list[HostLink]) -> None:
        self._cluster = cluster
        self._links = links
        self._session_id: str | None = None
        self._checkpoint: Checkpoint | None = None
        self._state: SessionState | msgspec.Raw | None = None
        # What ``follow_up`` says when there is no checkpoint, as ``Agent``
        # says it: whether a run of this view passed input admission, and
        # whether the last run's input was refused.
        self._admitted_once = False
        self._last_input_refused = False

    def client(self) -> ClusterAgent:
        """Another client view of the same hosts, with its own last call."""
        return ClusterAgent(self._cluster, self._links)

    @property
    def session_id(self) -> str | None:
        """The id of the last call's session (set before the call is sent)."""
        return self._session_id

    async def _op(
        self, kind: OpKind, session_id: str, *, retry: bool = False, **fields: Any
    ) -> str | AskPause | None:
        """Send one operation to the session's host; keep what it left."""
        self._session_id = session_id
        link = self._links[host_for(session_id, len(self._links))]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESTART_WAIT_S
        while True:
            op = Op(id=link.next_id(), kind=kind, session_id=session_id, **fields)
            try:
                result = await link.submit(op)
            except HostUnavailableError:
                # A restarting host: this operation is safe to send again.
                if not retry or loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
                continue
            break
        self._keep(kind, result)
        return output_of(result)

    def _keep(self, kind: OpKind, result: Result) -> None:
        error = result.error
        if kind == "snapshot":
            pass  # a read leaves the last call's checkpoint as it was
        elif (
            kind == "run"
            and error is not None
            and error.code == MessageDeniedError.code
            and error.data.get("phase") == "input"
        ):
            # As in process: a refused input starts no conversation, so
            # there is none to follow up (G38, "last-input-refused").
            self._checkpoint = None
            self._last_input_refused = True
        elif error is None or result.checkpoint is not None:
            self._checkpoint = result.checkpoint
            if kind == "run":
                self._admitted_once = True
                self._last_input_refused = False
        if result.state != NIL:
            self._state = result.state

    async def run(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Run one turn on the host of its session (a new one when fresh).

        ``traceparent``/``tracestate``: the caller's W3C trace context, as
        ``Agent.run`` takes it (recorded on the turn's start by the host).

        Raises:
            HostUnavailableError: the host died or is restarting (it carries
                this session's id; a turn it started is finished by failover).
        """
        if not isinstance(message, str):
            raise TypeError(f"run() takes the message as a str, got {type(message)}")
        cp: Checkpoint | None = None
        if continue_from is None:
            sid = uuid.uuid4().hex
        else:
            cp = Checkpoint.coerce(continue_from)
            sid = cp.session_id
        ident = dict(identity) if identity is not None else None
        out = await self._op(
            "run",
            sid,
            message=message,
            checkpoint=cp,
            identity=ident,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        assert out is not None
        return out

    async def follow_up(
        self,
        message: str,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Continue the last conversation: ``run(m, continue_from=checkpoint())``.

        Raises:
            NoConversationError: ``"never-run"``, ``"last-input-refused"`` or
                ``"pending-question"``, as ``Agent.follow_up`` does.
        """
        cp = self._checkpoint
        if cp is None:
            refused = self._last_input_refused and self._admitted_once
            raise NoConversationError("last-input-refused" if refused else "never-run")
        if cp.kind == "pause":
            raise NoConversationError("pending-question")
        return await self.run(
            message, continue_from=cp, traceparent=traceparent, tracestate=tracestate
        )

    async def resume(
        self,
        checkpoint: Checkpoint | str,
        decision: Any = None,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Answer a pause on the host of its session.

        A restarting host is waited for: a resume is single-use (R9), so a
        second attempt of one that ran is refused as ``replayed``.
        ``traceparent``/``tracestate``: the resuming caller's trace context,
        as ``Agent.resume`` takes it.
        """
        cp = Checkpoint.coerce(checkpoint)
        check_in, answer = encode_decision(decision)
        out = await self._op(
            "resume",
            cp.session_id,
            retry=True,
            checkpoint=cp,
            check_in=check_in,
            answer=answer,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        assert out is not None
        return out

    async def recover(self, session_id: str) -> str | AskPause | None:
        """Finish a turn its previous host left unfinished (R7); ``None`` when
        there was nothing to finish. Waits for a restarting host."""
        return await self._op("recover", session_id, retry=True)

    async def snapshot(self, session_id: str) -> SessionState:
        """A session's state as its host serves it, folded from its stream."""
        await self._op("snapshot", session_id, retry=True)
        return self.last_snapshot()

    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint the last call left."""
        return self._checkpoint

    def last_snapshot(self) -> SessionState:
        """The state of the last call's session, as its host served it."""
        state = self._state
        if state is None:
            return SessionState()
        if isinstance(state, msgspec.Raw):
            # Decoded on first use: most callers never ask (see _wire).
            state = self._state = decode_state(state)
        return state


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
        self.store_url = store_url
        self.name = name
        self._requested_hosts = n_hosts
        self.chain_key = chain_key
        self.max_resident = max_resident
        self.idle_s = idle_s
        self.facts_sweep_s = facts_sweep_s
        self._started_ray = False
        self._links: list[HostLink] = []
        self._info: HostInfo | None = None

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

    def _existing(self, index: int) -> Any | None:
        try:
            return ray.get_actor(host_name(self.name, index), namespace=NAMESPACE)
        except ValueError:  # Ray's answer for a name nobody holds
            return None

    def _describe(self, handle: Any) -> HostInfo:
        data = ray.get(handle.describe.remote())
        try:
            return msgspec.msgpack.decode(data, type=HostInfo)
        except msgspec.ValidationError:
            failed = msgspec.msgpack.decode(data, type=Result)
            assert failed.error is not None
            raise error_from(failed.error) from None

    def _check(self, info: HostInfo, key: str | None) -> None:
        """Refuse a client whose settings differ from the running hosts'."""
        mine = {
            "store_url": (info.store_url, self.store_url),
            "chain_key": (info.key_digest, key_digest(self.chain_key)),
        }
        if self._requested_hosts is not None:
            mine["n_hosts"] = (str(info.n_hosts), str(self._requested_hosts))
        if key is not None:
            mine["factory"] = (info.factory_key, key)
        for what, (existing, requested) in mine.items():
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
                name=self.name,
                what=what,
                existing=existing,
                requested=requested,
                hint=hint,
            )

    def _join(self, handles: list[Any], key: str | None) -> list[HostLink]:
        infos = [self._describe(h) for h in handles]
        for info in infos:
            self._check(info, key)
        self._info = infos[0]
        self._links = [HostLink(h, i) for i, h in enumerate(handles)]
        return self._links

    def _running(self) -> list[HostLink]:
        """Links to the hosts already running under this name (none: refused)."""
        if self._links:
            return self._links
        first = self._existing(0)
        if first is None:
            raise ClusterConfigError(
                name=self.name,
                what="has no hosts",
                existing="",
                requested="yet",
                hint="start them with cluster.agent(factory)",
            )
        n = self._describe(first).n_hosts
        handles = [first] + [self._existing(i) for i in range(1, n)]
        if any(h is None for h in handles):
            raise ClusterConfigError(
                name=self.name,
                what="is missing hosts",
                existing="",
                requested=f"of {n}",
                hint="destroy the cluster and start it again",
            )
        return self._join(handles, None)

    def agent(self, factory: AgentFactory) -> ClusterAgent:
        """A view of this cluster's hosts running agents built by ``factory``.

        The first call (in any process) creates the named hosts with
        ``factory``; every later call with the same factory gets views of the
        same hosts. ``factory(store)`` runs inside each host, once per
        session, so it must be picklable — a module-level function or a
        ``functools.partial`` of one — and must build its agent on the store it
        is given.

        Raises:
            ClusterConfigError: the factory cannot be shipped or does not
                build on its store; the hosts run with another store URL, host
                count, chain key or factory.
            StoreError: the hosts cannot reach the store.
        """
        key = factory_key(factory)
        first = self._existing(0)
        if first is not None:
            # Check the running hosts before creating any missing one.
            info = self._describe(first)
            self._check(info, key)
            count = info.n_hosts
        else:
            count = self._requested_hosts or 2
        remote: Any = ray.remote(SessionHost)
        handles = [
            # Detached and named: every client process of this cluster reaches
            # the same hosts; Ray restarts a dead one with the same arguments,
            # and its failover finishes its shard's open turns (R21, R22).
            remote.options(
                name=host_name(self.name, i),
                namespace=NAMESPACE,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_restarts=-1,
                max_concurrency=HOST_CONCURRENCY,
            ).remote(
                factory,
                self.store_url,
                i,
                count,
                name=self.name,
                factory_key=key,
                chain_key=self.chain_key,
                max_resident=self.max_resident,
                idle_s=self.idle_s,
                facts_sweep_s=self.facts_sweep_s,
            )
            for i in range(count)
        ]
        return ClusterAgent(self, self._join(handles, key))

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
        from ._policy import ActorRef, chain_links

        ref = ActorRef(f"{self.name}.policy.{factory_key(factory)}", NAMESPACE)
        remote: Any = ray.remote(PolicyActor)
        # One hook at a time: a rule updates its state without racing another
        # session's call.
        handle = remote.options(
            name=ref.name,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=1,
        ).remote(factory)
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
        from ._policy import ActorRef

        names = ",".join(sorted(t.name for t in tools))
        ref = ActorRef(f"{self.name}.tools.{names}", NAMESPACE)
        remote: Any = ray.remote(ToolExecutor)
        remote.options(
            name=ref.name,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=100,
        ).remote(list(tools))
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
        from helmlog.events import CheckpointError

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
        if hosts:
            await self.destroy()
        self._links = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    async def destroy(self) -> None:
        """Stop this cluster's named hosts, chains and executors for good."""
        handles: list[Any] = []
        i = 0
        while (handle := self._existing(i)) is not None:
            handles.append(handle)
            i += 1
        # A host that is dead or restarting has nothing left to close.
        await asyncio.gather(
            *(h.close.remote() for h in handles), return_exceptions=True
        )
        for handle in handles:
            ray.kill(handle, no_restart=True)
        prefixes = (f"{self.name}.policy.", f"{self.name}.tools.")
        for named in ray.util.list_named_actors(all_namespaces=True):
            if named["namespace"] == NAMESPACE and named["name"].startswith(prefixes):
                try:
                    actor = ray.get_actor(named["name"], namespace=NAMESPACE)
                except ValueError:
                    continue  # it died meanwhile
                ray.kill(actor, no_restart=True)
        self._links = []
        self._info = None
