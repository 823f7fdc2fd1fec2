"""The session host: one async Ray actor hosting many sessions.

Pattern: a host process that only hosts — the loop lives in ``runtime``,
         state is a fold in ``events``, persistence is the store.
Role:    actors layer; the ``Cluster`` starts a fixed number of these and
         routes each session to one by ``host_for`` (R8).
Emits:   through each session's agent, into the shared event store.

Laws: R8 (one host holds many sessions; never one actor per session; a
session is activated from its stream on first use), R17 (the cluster changes
where, not what: a session run here appends what the same agent run in
process appends), R6 (activation is silent).

Why an agent object per session inside one host: an agent holds per-run
conversation state and its provider (a scripted model's script, a client's
connection); sessions must not share those. Agent objects are cheap; actors
(processes) are not — so sessions share the host, not the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helmlog.events import EventStore, open_event_store
from helmlog.runtime import Agent

from ._wire import decode_decision, reply_from

AgentFactory = Callable[[EventStore], Agent]


class SessionHost:
    """Hosts sessions; each operation names its session (or checkpoint)."""

    def __init__(
        self,
        factory: AgentFactory,
        store_url: str,
        index: int,
        chain_key: bytes | None = None,
    ) -> None:
        self._factory = factory
        self._store_url = store_url
        self._chain_key = chain_key
        self.index = index
        self._store: EventStore | None = None
        self._agents: dict[str, Agent] = {}

    def _open(self) -> EventStore:
        if self._store is None:
            self._store = open_event_store(self._store_url, chain_key=self._chain_key)
        return self._store

    def _agent(self, session_id: str) -> Agent:
        agent = self._agents.get(session_id)
        if agent is None:
            agent = self._factory(self._open())
            if agent.store is not self._store:
                raise ValueError(
                    "the agent factory must build its agent on the store it is given "
                    "(Agent.create(..., store=store))"
                )
            self._agents[session_id] = agent
        return agent

    def _reply(self, agent: Agent, session_id: str, out: Any) -> bytes:
        return reply_from(session_id, out, agent.last_snapshot(), agent.checkpoint())

    async def run(
        self,
        session_id: str,
        message: str,
        continue_from: str | None = None,
        identity: dict[str, Any] | None = None,
    ) -> bytes:
        """A fresh run (``continue_from=None``) or a continued turn of one session."""
        agent = self._agent(session_id)
        if continue_from is None:
            out = await agent.run(message, session_id=session_id, identity=identity)
        else:
            out = await agent.run(
                message, continue_from=continue_from, identity=identity
            )
        return self._reply(agent, session_id, out)

    async def resume(self, session_id: str, checkpoint: str, decision: bytes) -> bytes:
        """Answer a pause of one session."""
        agent = self._agent(session_id)
        out = await agent.resume(checkpoint, decode_decision(decision))
        return self._reply(agent, session_id, out)

    async def recover(self, session_id: str) -> bytes | None:
        """Take over a session whose host stopped mid-turn (R7)."""
        agent = self._agent(session_id)
        out = await agent.recover(session_id)
        return None if out is None else self._reply(agent, session_id, out)

    async def hosted(self) -> list[str]:
        """Ids of the sessions this host has activated."""
        return sorted(self._agents)

    async def close(self) -> None:
        """Release the store's connections."""
        if self._store is not None:
            await self._store.close()
            self._store = None
