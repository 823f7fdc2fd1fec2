"""The "last run" cursor: which session an agent last ran, and where it left it.

Pattern: a small mutable record beside the session cache: the last run's
         session (kept for ``last_snapshot`` even once the cache dropped it),
         the checkpoint the last run left, and why there is none.
Role:    runtime layer; every operation moves it (``Hosting.use``; the run
         path, ``_run.py``, notes an admitted or refused input), ``Agent``
         reads it for ``checkpoint()``, ``last_snapshot()``, ``session_id``
         (``_agent_state.py``) and ``follow_up``; ``Hosting.guard`` moves
         the checkpoint when an operation ends.
Emits:   nothing.

Laws: R1 (``last_snapshot`` is the fold of the last run's session; with a
chain key its checkpoint gets its MAC here, the fold being keyless), G86 (the
snapshot is served redacted), G33–G38 (a refused input is not a
conversation: ``checkpoint()`` is ``None`` and ``follow_up`` says
``last-input-refused``), G59–G68 (a pending question blocks continuation),
R21 (a dropped session's snapshot is still served).

Why the cursor keeps the session itself and not only its id: the cache may
drop an idle session (R21); the snapshot of the last run must still be
served without reading the store.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from helmlog.events import (
    Checkpoint,
    Folder,
    NoConversationError,
    SessionState,
    sign_checkpoint,
)

from ._config import AgentConfig
from ._session import Session


class LastRun:
    """Where one agent's last run left its conversation."""

    __slots__ = (
        "admitted_once",
        "checkpoint",
        "input_refused",
        "session",
        "session_id",
    )

    def __init__(self) -> None:
        self.session_id: str | None = None
        # The last run's session, kept for last_snapshot() even once dropped.
        self.session: Session | None = None
        self.checkpoint: Checkpoint | None = None
        self.admitted_once = False
        self.input_refused = False

    def use(self, session: Session) -> None:
        """An operation runs on ``session``: it is the last run's now."""
        self.session_id = session.session_id
        self.session = session

    def admitted(self) -> None:
        """The input chain let a message in."""
        self.admitted_once = True
        self.input_refused = False

    def refused(self) -> None:
        """The input chain refused the message: no conversation to continue (G36)."""
        self.checkpoint = None
        self.input_refused = True

    def settle(self, f: Folder, key: bytes | None) -> None:
        """The run ended: its checkpoint is the fold's, keyed when the store is."""
        self.checkpoint = sign_checkpoint(f.checkpoint, f.pending, key)

    def continuation(self) -> Checkpoint:
        """The checkpoint ``follow_up`` continues from, or why there is none."""
        cp = self.checkpoint
        if cp is None:
            reason = (
                "last-input-refused"
                if self.input_refused and self.admitted_once
                else "never-run"
            )
            raise NoConversationError(reason)
        if cp.kind == "pause":
            raise NoConversationError("pending-question")
        return cp

    def snapshot(
        self, resident: Callable[[str], Session | None], config: AgentConfig
    ) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        if self.session_id is None:
            return SessionState()
        session = resident(self.session_id) or self.session
        state = session.journal.folder.state() if session else SessionState()
        key = config.store.chain_key
        if key and state.checkpoint is not None:
            # R1's keyed exception: the fold is keyless; the MAC is added here.
            keyed = sign_checkpoint(state.checkpoint, state.pending, key)
            state = msgspec.structs.replace(state, checkpoint=keyed)
        redact = config.redact
        return redact.served(state) if redact is not None else state
