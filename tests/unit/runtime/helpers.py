"""Shared helpers for the runtime's unit tests: recorders, scripts, the fold check.

Pattern: small test doubles and assertions, no fixtures with hidden state.
Role:    imported by the ``tests/unit/runtime`` modules that drive whole runs.
Emits:   nothing.

Laws: R1 (``assert_fold_matches``: folding the stored stream gives exactly the
state the live session holds), G82 (``Recorder`` is a plain ``Watcher``).

Why the fold check reads the store, not a listener: listeners see the served
(possibly redacted) form and never the ``decision.filed`` rows; the store
holds what was recorded, which is what another host would fold.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from helmlog.events import Event, SessionState, ToolCallRequest, UnknownEvent, fold
from helmlog.runtime import Agent, Tool, tool
from helmlog.runtime.providers import Reply
from helmlog.runtime.testing import Recorder as PublicRecorder


def call(call_id: str, name: str, **args: Any) -> ToolCallRequest:
    """One proposed tool call."""
    return ToolCallRequest(id=call_id, name=name, args=args)


def calls(*proposed: ToolCallRequest, content: str = "") -> Reply:
    """An assistant turn that proposes ``proposed``, in order."""
    return Reply(content=content, tool_calls=proposed)


class Recorder(PublicRecorder):
    """The public recording watcher, with the short name these tests use."""

    def of(self, event_type: str) -> list[Any]:
        """The events of one type, in order."""
        return self.of_type(event_type)


async def stored(
    agent: Agent, session_id: str | None = None
) -> list[Event | UnknownEvent]:
    """The decoded events of a session's stream (the last run's by default)."""
    sid = session_id if session_id is not None else agent.session_id
    assert sid is not None, "the agent has not run"
    return [record.decode() for record in await agent.store.read(sid)]


async def stored_types(agent: Agent, session_id: str | None = None) -> list[str]:
    """The ``type`` of every stored event of a session, in seq order."""
    return [e.type for e in await stored(agent, session_id)]


def of_type(events: Iterable[Any], event_type: str) -> list[Any]:
    """The events of one type, in order."""
    return [e for e in events if e.type == event_type]


def live_state(agent: Agent) -> SessionState:
    """What the agent's live session holds, unredacted.

    With no redaction policy this is exactly ``agent.last_snapshot()``; under a
    policy the snapshot is served redacted (G86), so the live folder is read.
    """
    if agent.config.redact is None:
        return agent.last_snapshot()
    sid = agent.session_id
    assert sid is not None, "the agent has not run"
    # The live cache of the session: the one place an unredacted state is held.
    return agent._sessions[sid].journal.folder.state()


async def assert_fold_matches(agent: Agent) -> None:
    """R1: folding the last run's stored stream equals the live session state."""
    sid = agent.session_id
    assert sid is not None, "the agent has not run"
    folded = fold([record.decode() for record in await agent.store.read(sid)])
    assert live_state(agent) == folded


def refund_recorder() -> tuple[Tool, list[int]]:
    """A ``refund(order, amount)`` tool and the amounts it ran with, in order."""
    ran: list[int] = []

    @tool
    def refund(order: int, amount: int) -> str:
        """Refund an order."""
        ran.append(amount)
        return f"refunded {amount}"

    return refund, ran
