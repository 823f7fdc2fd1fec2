"""What an agent holds, and the doors that read or tend it.

Pattern: the standing half of the facade, a base class of ``Agent``: its
         configuration, its listeners, the "last run" cursor and its resident
         sessions, each door delegating to the part that keeps it
         (``Listeners``, ``LastRun``, ``Hosting``/``Residency``), and the
         loop they share. ``Agent`` (``_agent.py``) adds the operations that
         run turns, each entry wired to these parts.
Role:    runtime layer; users reach these doors on ``helmlog.Agent``
         (``agent.on``, ``agent.checkpoint()``, ``agent.evict_idle()``, ...).
Emits:   nothing; ``on``/``attach`` subscribe listeners to what the journal
         delivers.

Laws: G82–G84 (listeners and watchers see copies, in stream order, and never
steer the run; ``idle`` waits for async ones), R1 and G86 (``last_snapshot``
is the fold of the last run's session, served redacted, ``_cursor.py``),
G33–G38 (``checkpoint()`` is ``None`` after a refused input), R9
(``policy_version`` is the digest a pause binds), R21 and R6 (at most
``max_resident`` sessions resident; idle ones dropped, busy ones never; a
dropped one re-activates from its stream silently, and dropping appends
nothing).

Why a base class and not more methods on ``Agent``: the operations (run,
resume, recover) and the doors over what an agent holds change for different
reasons; each half then reads whole in a module of its own, and a user still
finds every door, with its docstring, on ``Agent`` (``help(Agent)``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from helmlog.events import Checkpoint, SessionState

from ._config import AgentConfig
from ._cursor import LastRun
from ._hosting import Hosting
from ._loop import Loop
from ._session import Session
from ._watchers import Listeners


class AgentState:
    """An agent's configuration, listeners, last run and resident sessions."""

    def __init__(self, config: AgentConfig, listeners: Listeners) -> None:
        self._config = config
        self._listeners = listeners
        self._loop = Loop(config)
        self._cursor = LastRun()
        self._hosting = Hosting(config, listeners, self._loop, self._cursor)
        # The resident sessions, least recently used first (R21).
        self._sessions: OrderedDict[str, Session] = self._hosting.sessions

    @property
    def config(self) -> AgentConfig:
        """The frozen configuration this agent runs with."""
        return self._config

    @property
    def store(self) -> Any:
        """The event store this agent records into."""
        return self._config.store

    @property
    def policy_version(self) -> str:
        """Digest of this agent's governance posture (R9)."""
        return self._config.policy_version

    # -- listening --------------------------------------------------------

    def on(self, event_type: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe ``fn`` to one event type (``"*"`` for all); returns unsubscribe."""
        return self._listeners.on(event_type, fn)

    def attach(self, watcher: Any) -> Callable[[], None]:
        """Attach a watcher at runtime (G82, G83); returns unsubscribe."""
        (w,) = self._listeners.check_watchers([watcher]) or (watcher,)
        return self._listeners.attach(w)

    async def idle(self) -> None:
        """Wait until async watchers have seen every event delivered so far."""
        await self._listeners.idle()

    # -- state ------------------------------------------------------------

    def checkpoint(self) -> Checkpoint | None:
        """Where the last run left its conversation; ``None`` after a refused input."""
        return self._cursor.checkpoint

    def last_snapshot(self) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        return self._cursor.snapshot(self._hosting.resident.get, self._config)

    @property
    def session_id(self) -> str | None:
        """The id of the last run's session."""
        return self._cursor.session_id

    # -- residency (R21) ----------------------------------------------------

    @property
    def resident_count(self) -> int:
        """How many sessions this agent holds in memory now."""
        return len(self._hosting.resident)

    def evict_idle(self, now: int | None = None) -> int:
        """Drop resident sessions idle longer than ``idle_s``; return how many.

        Args:
            now: the agent clock's reading in ms (default: the clock's now).

        A session with an operation in flight is never dropped; a dropped one
        re-activates from its stream on next use, silently (R6).
        """
        return self._hosting.resident.evict_idle(now)

    def forget(self, session_id: str) -> bool:
        """Drop one resident session unless an operation is in flight on it.

        Returns whether it was dropped. Nothing is appended (R6).
        """
        return self._hosting.resident.forget(session_id)
