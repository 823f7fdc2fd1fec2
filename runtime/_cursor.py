"""The conversation cursor: which session a caller last ran, and where it left it.

Pattern: a small mutable record. ``Cursor`` is the caller's last call (its
         session id, the checkpoint it left, why there is none) and answers
         ``follow_up``; the in-process agent's ``LastRun`` holds one beside
         the session itself, and each ``ClusterAgent`` view holds its own.
Role:    runtime layer, exported as ``lowlevel.Cursor``; ``Hosting`` moves it,
         the run path notes an admitted or refused input (``_run.py``).

Laws: R1/G86 (``last_snapshot``: the fold, keyed here, served redacted),
G33–G38 (a refused input is not a conversation: ``last-input-refused``),
G59–G68 (a pending question blocks continuation), R17 (a cluster view says
the same), R21 (the session is kept so a dropped one's snapshot is served).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from helmlog.events import Checkpoint, Folder, SessionState
from helmlog.events.lowlevel import sign_checkpoint

from ._config import AgentConfig
from ._errors import NoConversationError
from ._session import Session


class Cursor:
    """Where one caller's last call left its conversation."""

    __slots__ = ("admitted_once", "checkpoint", "input_refused", "session_id")

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.checkpoint: Checkpoint | None = None
        self.admitted_once = False
        self.input_refused = False

    def admitted(self) -> None:
        """The input chain let a message in."""
        self.admitted_once = True
        self.input_refused = False

    def refused(self) -> None:
        """The input chain refused the message: no conversation to continue (G36)."""
        self.checkpoint = None
        self.input_refused = True

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


class LastRun:
    """Where one agent's last run left its conversation, and its session."""

    __slots__ = ("conversation", "session")

    def __init__(self) -> None:
        self.conversation = Cursor()
        # The last run's session, kept for last_snapshot() even once dropped.
        self.session: Session | None = None

    def use(self, session: Session) -> None:
        """An operation runs on ``session``: it is the last run's now."""
        self.conversation.session_id = session.session_id
        self.session = session

    def settle(self, f: Folder, key: bytes | None) -> None:
        """The run ended: its checkpoint is the fold's, keyed when the store is."""
        self.conversation.checkpoint = sign_checkpoint(f.checkpoint, f.pending, key)

    def snapshot(
        self, resident: Callable[[str], Session | None], config: AgentConfig
    ) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        sid = self.conversation.session_id
        if sid is None:
            return SessionState()
        session = resident(sid) or self.session
        state = session.journal.folder.state() if session else SessionState()
        key = config.store.chain_key
        if key and state.checkpoint is not None:
            # R1's keyed exception: the fold is keyless; the MAC is added here.
            keyed = sign_checkpoint(state.checkpoint, state.pending, key)
            state = msgspec.structs.replace(state, checkpoint=keyed)
        redact = config.redact
        return redact.served(state) if redact is not None else state
