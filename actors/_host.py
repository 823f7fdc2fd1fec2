"""The session host: one async Ray actor hosting many sessions.

Pattern: a host process that only hosts: the loop lives in ``runtime``, state
         is a fold in ``events``, persistence is the store. Operations arrive
         in batches (one actor call each); results leave in groups as they
         finish (a streaming generator), so no session waits on another.
Role:    actors layer; the ``Cluster`` names a fixed number of these and
         routes each session to one by ``host_for`` (R8).

Laws: R4, R6, R8, R17, R19, R21 (``Residents``), R22, R27 (leases; a lost
lease drops idle sessions).
Why an agent object per session: an agent holds per-run state and its
provider; agents are cheap, actors are not. Failover starts from
``__init__``: Ray runs it again on every restart, with nobody calling; once
it has finished, the host is warm and settles its collector (issue 29).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import msgspec

from helmlog.events import (
    EventStore,
    SessionState,
    StoreError,
    fold,
    open_event_store,
    read_verified,
)
from helmlog.events.lowlevel import sign_checkpoint
from helmlog.runtime import Agent
from helmlog.runtime.lowlevel import settle_collector

from ._errors import ClusterConfigError
from ._failover import DEFAULT_FACTS_SWEEP_S, finish_open_turns, publish_open_facts
from ._identity import key_digest
from ._lease import DEFAULT_LEASE_S, ShardLeases
from ._residents import DEFAULT_IDLE_S, DEFAULT_MAX_RESIDENT, Resident, Residents
from ._wire import (
    HostInfo,
    HostUsage,
    Op,
    Result,
    decode_decision,
    decode_ops,
    encode_results,
    encode_state,
    result_of,
    wire_error,
)

AgentFactory = Callable[[EventStore], Agent]

log = logging.getLogger("helmlog.actors")

# A host whose store is unreachable when it starts retries its failover sweep.
FAILOVER_RETRY_S: Final = 2.0


class SessionHost:
    """Hosts sessions; each operation names its session (or checkpoint)."""

    def __init__(
        self,
        factory: AgentFactory,
        store_url: str,
        index: int,
        n_hosts: int,
        *,
        name: str = "",
        factory_key: str = "",
        chain_key: bytes | None = None,
        max_resident: int = DEFAULT_MAX_RESIDENT,
        idle_s: float = DEFAULT_IDLE_S,
        facts_sweep_s: float = DEFAULT_FACTS_SWEEP_S,
        lease_s: float = DEFAULT_LEASE_S,
        failover: bool = True,
    ) -> None:
        self._factory = factory
        self._store_url = store_url
        self._chain_key = chain_key
        self._info = HostInfo(
            name=name,
            index=index,
            n_hosts=n_hosts,
            store_url=store_url,
            key_digest=key_digest(chain_key),
            factory_key=factory_key,
            max_resident=max_resident,
            idle_s=idle_s,
            facts_sweep_s=facts_sweep_s,
        )
        self.index = index
        self._store: EventStore | None = None
        self._residents = Residents(
            self._build, max_resident=max_resident, idle_s=idle_s
        )
        self._checked = False
        self._failover_finished = 0
        self._facts_published = 0
        self._batches = self._groups = self._ops = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.leases = ShardLeases(
            self._open,
            cluster=name,
            index=index,
            n_hosts=n_hosts,
            lease_s=lease_s,
            take_over=self._take_over,
            on_lost=self._lost_lease,
        )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # built outside an actor (a unit test): no tasks
            return
        self._spawn(loop, self._residents.sweep_idle())
        if failover:
            self._spawn(loop, self._failover())
            self._spawn(loop, self._sweep_facts())
            self._spawn(loop, self.leases.run())

    def _spawn(self, loop: asyncio.AbstractEventLoop, coro: Any) -> None:
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sessions ----------------------------------------------------------

    def _open(self) -> EventStore:
        if self._store is None:
            self._store = open_event_store(self._store_url, chain_key=self._chain_key)
        return self._store

    def _build(self) -> Agent:
        store = self._open()
        agent = self._factory(store)
        if not isinstance(agent, Agent) or agent.store is not store:
            raise ClusterConfigError(
                name=self._info.name,
                what="factory",
                existing="",
                requested=f"{self._info.factory_key} did not build on its store",
                hint="the agent factory must return an Agent built on the store "
                "it is given (Agent.create(..., store=store))",
            )
        return agent

    def evict_idle(self, idle_s: float | None = None) -> int:
        """Drop the sessions idle for ``idle_s`` (default: the host's); count them."""
        return self._residents.evict_idle(idle_s)

    # -- failover ------------------------------------------------------------

    async def _failover(self) -> None:
        """Finish this shard's open turns (R22); retry while the store is down."""
        while True:
            try:
                self._failover_finished += await finish_open_turns(
                    self._open(),
                    index=self._info.index,
                    n_hosts=self._info.n_hosts,
                    recover=self._recover_one,
                )
            except StoreError as exc:
                log.warning(
                    "failover: host %d cannot read the open turns yet: %s",
                    self._info.index,
                    exc,
                )
                await asyncio.sleep(FAILOVER_RETRY_S)
                continue
            # Warm: imported, the store open, this shard's open turns done;
            # what lives as long as the host leaves the collector's walk, as
            # ``helmlog serve`` does once listening (issue 29 item 2).
            settle_collector()
            return

    async def _sweep_facts(self) -> None:
        """Every ``facts_sweep_s``, publish the facts the writers of this
        shard's open turns left unpublished (R4); a failure waits a period."""
        while True:
            await asyncio.sleep(self._info.facts_sweep_s)
            try:
                self._facts_published += await publish_open_facts(
                    self._open(),
                    index=self._info.index,
                    n_hosts=self._info.n_hosts,
                    busy=self._residents.busy,
                )
            except StoreError as exc:
                log.warning(
                    "facts sweep: host %d cannot read the open turns: %s",
                    self._info.index,
                    exc,
                )

    async def _take_over(self, shard: int) -> int:
        """Finish the open turns of another host's shard, whose lease
        expired (R27); each with an agent of its own, never made resident
        here: its operations go to its own host."""
        finished = await finish_open_turns(
            self._open(),
            index=shard,
            n_hosts=self._info.n_hosts,
            recover=lambda session_id: self._build().recover(session_id),
        )
        self._failover_finished += finished
        return finished

    def _lost_lease(self) -> None:
        """Another host may have appended to this shard's sessions (R27):
        drop the idle ones, so each re-activates from its stream."""
        self._residents.evict_idle(0.0)

    async def _recover_one(self, session_id: str) -> object:
        res = self._residents.hold(session_id)
        try:
            return await res.agent.recover(session_id)
        finally:
            self._residents.release(res)

    # -- operations ----------------------------------------------------------

    async def call(self, data: bytes) -> AsyncIterator[bytes]:
        """Run a batch of operations concurrently; yield their results in
        groups, each group what finished since the last."""
        ops = decode_ops(data)
        self._batches += 1
        self._ops += len(ops)
        ready: list[Result] = []
        wake = asyncio.Event()

        async def one(op: Op) -> None:
            ready.append(await self._one(op))
            wake.set()

        tasks = [asyncio.ensure_future(one(op)) for op in ops]
        left = len(tasks)
        try:
            while left:
                await wake.wait()
                wake.clear()
                group = ready[:]
                del ready[:]
                left -= len(group)
                self._groups += 1
                yield encode_results(group)
        finally:
            for task in tasks:
                task.cancel()

    async def ping(self) -> None:
        """Answer at once: a client waiting on this host asks whether it
        still runs (a stopped host does not answer, R27)."""

    async def _one(self, op: Op) -> Result:
        kind = op.kind
        if kind == "ping":
            return Result(id=op.id, nothing=True)
        if kind == "snapshot":
            try:
                state = encode_state(await self._state(op))
                return Result(id=op.id, nothing=True, state=state)
            except Exception as exc:  # noqa: BLE001 - sent back as the typed error it is (R12)
                return Result(id=op.id, error=wire_error(exc, op.session_id))
        res: Resident | None = None
        try:
            res = self._residents.hold(op.session_id)
            agent = res.agent
            out: Any
            if kind == "run":
                assert op.message is not None
                if op.checkpoint is None:
                    out = await agent.run(
                        op.message,
                        session_id=op.session_id,
                        identity=op.identity,
                        traceparent=op.traceparent,
                        tracestate=op.tracestate,
                    )
                else:
                    out = await agent.run(
                        op.message,
                        continue_from=op.checkpoint,
                        identity=op.identity,
                        traceparent=op.traceparent,
                        tracestate=op.tracestate,
                    )
            elif kind == "resume":
                assert op.checkpoint is not None
                out = await agent.resume(
                    op.checkpoint,
                    decode_decision(op),
                    traceparent=op.traceparent,
                    tracestate=op.tracestate,
                )
            else:
                out = await agent.recover(op.session_id)
            result = result_of(op.id, out, agent.checkpoint())
        except Exception as exc:  # noqa: BLE001 - sent back as the typed error it is (R12)
            if res is None:
                return Result(id=op.id, error=wire_error(exc, op.session_id))
            result = Result(
                id=op.id,
                error=wire_error(exc, op.session_id),
                checkpoint=res.agent.checkpoint(),
            )
        finally:
            if res is not None:
                self._residents.release(res)
        if op.state:
            assert res is not None
            state = encode_state(res.agent.last_snapshot())
            return msgspec.structs.replace(result, state=state)
        return result

    async def _state(self, op: Op) -> SessionState:
        """A session's served state, folded from its verified stream (R19),
        its pause checkpoint signed as the agent signs it (R9)."""
        res = self._residents.get(op.session_id)
        agent = res.agent if res is not None else self._build()
        store = self._open()
        records = await read_verified(store, op.session_id)
        state = fold([r.decode() for r in records])
        if store.chain_key and state.checkpoint is not None:
            keyed = sign_checkpoint(state.checkpoint, state.pending, store.chain_key)
            state = msgspec.structs.replace(state, checkpoint=keyed)
        redact = agent.config.redact
        return redact.served(state) if redact is not None else state

    # -- the cluster's view ----------------------------------------------------

    async def describe(self) -> bytes:
        """What this host is; the first call checks its factory and its store,
        raising what a client must see (a ``ClusterConfigError``, the store's
        ``StoreError``), encoded."""
        try:
            if not self._checked:
                agent = self._build()
                await agent.store.head("helmlog-cluster-probe")
                self._checked = True
                redact = agent.config.redact
                if redact is not None:
                    # What a watching client must serve of the streams (G86).
                    self._info = msgspec.structs.replace(
                        self._info,
                        redact_fields=sorted(redact.fields),
                        redact_placeholder=redact.placeholder,
                    )
        except Exception as exc:  # noqa: BLE001 - sent back as the typed error it is (R12)
            return msgspec.msgpack.encode(
                Result(id=0, error=wire_error(exc, "helmlog-cluster-probe"))
            )
        return msgspec.msgpack.encode(self._info)

    async def hosted(self) -> list[str]:
        """Ids of the sessions resident on this host."""
        return self._residents.ids()

    async def usage(self, *, collect: bool = False) -> bytes:
        """How much this host holds (``collect``: after a garbage collection)."""
        if collect:
            gc.collect()
        import tracemalloc

        traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        return msgspec.msgpack.encode(
            HostUsage(
                resident=len(self._residents),
                busy=self._residents.busy_count(),
                evicted=self._residents.evicted,
                failover_finished=self._failover_finished,
                facts_published=self._facts_published,
                traced_bytes=traced,
                batches=self._batches,
                groups=self._groups,
                ops=self._ops,
            )
        )

    async def trace_memory(self, on: bool) -> None:
        """Start or stop tracing allocations (for the bench's bytes per session)."""
        import tracemalloc

        if on and not tracemalloc.is_tracing():
            tracemalloc.start()
        elif not on and tracemalloc.is_tracing():
            tracemalloc.stop()

    async def evict(self, idle_s: float | None = None) -> int:
        """Drop the sessions idle for ``idle_s`` now (default: the host's)."""
        return self.evict_idle(idle_s)

    async def close(self) -> None:
        """Stop the background tasks and release the store's connections."""
        for task in list(self._tasks):
            task.cancel()
        if self._store is not None:
            await self._store.close()
            self._store = None
