"""Sessions a stopped host left mid-turn, and the agent that recovers them.

``left_mid_turn(url)`` records, on the store at ``url``, a session whose
stream ends with ``tool.dispatched``: its tool was running when its host
died, so neither its result nor anything after it was appended. The run
happens on an in-memory store that goes dead as the tool starts (the host's
process is gone), and its records are then appended to the real store, as
the dead host had appended them. ``recoverer`` is what ``helmlog recover
--agent tests.e2e.recover_agents:recoverer`` builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helmlog import Agent, Tool, tool
from helmlog.events import EventStore, MemoryEventStore, StoredEvent, open_event_store
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

ANSWER = "I could not confirm the refund; please check order 7 before retrying."

# Every order the recovering agent's ``refund`` ran: R7 says it must stay empty.
RECOVERY_RUNS: list[int] = []


class HostStopped(BaseException):
    """Stands for the host process dying while a tool runs."""


class _DyingStore(MemoryEventStore):
    """A host's view of the store: gone once its process dies."""

    dead = False

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if self.dead:
            raise ConnectionError("the host is gone")
        return await super().append_sealed(session_id, records, expected_seq)


def _agent(store: EventStore, the_tool: Tool, replies: Any) -> Agent:
    return (
        Agent.create(provider=scripted(replies), model="m", store=store)
        .tool(the_tool)
        .build()
    )


async def left_mid_turn(url: str) -> str:
    """Record a session whose last event is ``tool.dispatched``; return its id."""
    local = _DyingStore()

    @tool(name="refund")
    def dying_refund(order: int) -> str:
        """Refund an order (the host dies while it runs)."""
        local.dead = True
        raise HostStopped

    call = ToolCallRequest(id="c1", name="refund", args={"order": 7})
    agent = _agent(local, dying_refund, [Reply(tool_calls=[call])])
    died = False
    try:
        await agent.run("refund order 7")
    except HostStopped:
        died = True
    assert died, "the host was meant to die while its tool ran"
    sid = agent.session_id
    assert sid is not None
    records = await local.read(sid)
    assert "tool.dispatched" == records[-1].decode().type
    store = open_event_store(url)
    try:
        await store.append_sealed(sid, records, 0)
    finally:
        await store.close()
    return sid


@tool
def refund(order: int) -> str:
    """Refund an order."""
    RECOVERY_RUNS.append(order)
    return f"refunded order {order}"


def recoverer(store: EventStore) -> Agent:
    """The agent that finishes the turn: it answers once it reads the tool's fate."""

    def respond(request: Any) -> str:
        return ANSWER

    return (
        Agent.create(provider=scripted(respond=respond), model="m", store=store)
        .tool(refund)
        .build()
    )
