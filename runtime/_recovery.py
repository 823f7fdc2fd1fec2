"""Recovery: take over a session whose host stopped mid-turn, and settle it.

Pattern: continue from the record: the session is activated from its stream;
         an unfinished turn with no pause pending is driven on by the loop
         (``recover_call`` settles each call left dispatched); a turn ended by
         ``error.fatal`` that left calls dispatched is settled here.
Role:    runtime layer; ``Agent.recover`` delegates here (the cluster's
         failover and ``helmlog recover`` call it).

Laws: R7 (no re-run unless idempotent; ``tool.outcome_unknown``), R20, R2,
issue 8 item 8 (the outcome carries the turn's trace context).
Why a turn ended by ``error.fatal`` is settled: a call it left dispatched
without a result would block the session forever.
"""

from __future__ import annotations

from helmlog.events import ToolOutcomeUnknown

from ._config import AgentConfig
from ._hosting import Hosting
from ._loop import Loop
from ._session import Session
from ._trace import resolve
from .pause._pause import AskPause


class Recovery:
    """Recovers the sessions of one agent."""

    __slots__ = ("_config", "_hosting", "_loop")

    def __init__(self, config: AgentConfig, loop: Loop, hosting: Hosting) -> None:
        self._config = config
        self._loop = loop
        self._hosting = hosting

    async def __call__(self, session_id: str) -> str | AskPause | None:
        """Finish or settle the turn ``session_id`` was left in (``Agent.recover``)."""
        hosting = self._hosting
        session = await hosting.hosted(session_id)
        async with hosting.operating(session):
            await session.journal.activate()  # catch up with other hosts
            f = session.journal.folder
            if f.unfinished:
                hosting.use(session)
                return await hosting.guard(session, self._loop.drive(session))
            if f.dispatched and f.pending is None:
                hosting.use(session)
                try:
                    await self.settle(session)
                finally:
                    await hosting.after(session)
            return None

    async def settle(self, s: Session) -> None:
        """Record the outcome of calls a failed turn left dispatched (R7).

        The turn ended with ``error.fatal`` while these calls ran, so nothing
        reads their results and nothing is run again: each is recorded as
        ``tool.outcome_unknown``, which lets the session continue (R20).
        """
        j = s.journal
        for record in list(j.folder.dispatched.values()):
            traceparent, tracestate = resolve(
                None, None, j.folder.trace, self._config.new_traceparent
            )
            j.add(
                ToolOutcomeUnknown(
                    tool_name=record.tool_name,
                    tool_call_id=record.tool_call_id,
                    traceparent=traceparent,
                    tracestate=tracestate,
                )
            )
        await j.flush()
