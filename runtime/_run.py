"""The run path: open a turn on a session, then hand it to the loop.

Pattern: check, admit, record, hand over: the session a run names is found
         (or made), caught up with its stream, a continuation checked on it
         (``pause/_bindings.py``) before anything is appended, the input walk admits
         the message, the turn's opening events are recorded, and the loop
         drives the turn under the operation guard (``Hosting.guard``).
Role:    runtime layer; ``Agent.run``/``turn``/``stream`` delegate here;
         a steered turn (``_steering.py``) opens by the same ``session``,
         ``caught_up`` and ``admit``, and is driven by another framework.

Laws: G33–G38 (input first; a refused input is not a conversation,
``Cursor.refused``), R1, R9, R14, R19, R20, issue 8 item 8 (trace context).
Why a conversation checkpoint the store lacks seeds a stream
(``conversation.seeded``): it carries its whole history (R14), so it is
portable; a pause checkpoint is imported on the resume path instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from helmlog.events import (
    Checkpoint,
    ConversationSeeded,
    Message,
    MessageCommitted,
    TurnStarted,
    shape,
)

from ._chain import walk_messages
from ._config import AgentConfig
from ._cursor import LastRun
from ._hosting import Hosting
from ._loop import Loop
from ._session import MessageRefused, Session
from ._trace import Trace, given
from .pause._bindings import check_continuation, continuation_by_id
from .pause._pause import AskPause, TurnResult
from .pause._resume import activate_checkpointed
from .providers._base import name_of


class Run:
    """Opens the turns of one agent's sessions."""

    __slots__ = ("_config", "_cursor", "_hosting", "_loop")

    def __init__(
        self, config: AgentConfig, loop: Loop, hosting: Hosting, cursor: LastRun
    ) -> None:
        self._config = config
        self._loop = loop
        self._hosting = hosting
        self._cursor = cursor

    async def __call__(
        self,
        message: str,
        continue_from: Checkpoint | str | None,
        identity: Mapping[str, Any] | None,
        session_id: str | None,
        traceparent: str | None,
        tracestate: str | None,
    ) -> TurnResult:
        """Run one turn on the session named (``Agent.turn``'s rules)."""
        hosting = self._hosting
        cp: Checkpoint | None = None
        seed: Checkpoint | None = None
        by_id = False
        if continue_from is None and session_id is None and type(message) is str:
            # ``session``'s case of a new session, without its coroutine.
            session = hosting.new(self._config.new_id())
        else:
            session, cp, seed, by_id = await self.session(
                message, continue_from, session_id
            )
        # ``Hosting.operating``, spelled out: no context-manager generator
        # per turn (bench/turns.py).
        await hosting.hold(session)
        try:
            # A session made for this turn has nothing to catch up with.
            base_seq = (
                await self.caught_up(session, cp, by_id)
                if cp is not None or by_id
                else 0
            )
            hosting.use(session)
            # ``resolve`` for a new turn (nothing recorded to continue): the
            # caller's context when valid, else a minted one.
            caller = None if traceparent is None else given(traceparent, tracestate)
            minted = caller is None
            trace = (self._config.new_traceparent(), "") if caller is None else caller
            out = await hosting.guard(
                session,
                self._start(session, message, identity, base_seq, seed, trace, minted),
            )
            return hosting.result(session, out)
        finally:
            hosting.unhold(session)

    async def session(
        self,
        message: str,
        continue_from: Checkpoint | str | None,
        session_id: str | None,
    ) -> tuple[Session, Checkpoint | None, Checkpoint | None, bool]:
        """The session a turn names, found or made, before its lock is taken:
        with the checkpoint it continues from, the one it is seeded from, and
        whether a stored session was named by its id.

        Raises:
            TypeError: the message is not a str.
            ValueError: a malformed ``session_id``, or one that is not the
                checkpoint's session.
        """
        if not isinstance(message, str):
            raise TypeError(f"run() takes the message as a str, got {shape(message)}")
        hosting = self._hosting
        if session_id is not None and (
            not isinstance(session_id, str) or not session_id
        ):
            raise ValueError("run(session_id=...) takes a non-empty str")
        if continue_from is None and session_id is not None:
            found = await hosting.activate(session_id)
            if found is None:
                return hosting.new(session_id), None, None, False
            return found, None, None, True
        if continue_from is None:
            return hosting.new(self._config.new_id()), None, None, False
        cp = Checkpoint.coerce(continue_from)
        if session_id is not None and session_id != cp.session_id:
            raise ValueError(
                f"run(): session_id '{session_id}' is not the checkpoint's "
                f"session '{cp.session_id}'"
            )
        # R25: a conversation checkpoint of a deleted session seeds nothing.
        found = await activate_checkpointed(hosting, self._config, cp.session_id)
        if found is None:
            return hosting.new(cp.session_id), None, cp, False
        return found, cp, None, False

    @staticmethod
    async def caught_up(s: Session, cp: Checkpoint | None, by_id: bool) -> int:
        """Under the session's lock: catch up with other hosts, and the seq
        the turn continues from, checked on the fold (R9, R1)."""
        if cp is not None:
            await s.journal.activate()  # catch up with other hosts
            return check_continuation(s.journal.folder, cp)
        if by_id:
            await s.journal.activate()  # catch up with other hosts
            return continuation_by_id(s.journal.folder)
        return 0

    def session_id(
        self, continue_from: Checkpoint | str | None, session_id: str | None
    ) -> str:
        """The id of the session a run will name, known before it starts
        (``Agent.stream`` filters the events by it): minted for a new one."""
        if session_id is not None:
            return session_id
        if continue_from is None:
            return self._config.new_id()
        return Checkpoint.coerce(continue_from).session_id

    async def _start(
        self,
        s: Session,
        message: str,
        identity: Mapping[str, Any] | None,
        base_seq: int,
        seed: Checkpoint | None,
        trace: Trace,
        minted: bool,
    ) -> str | AskPause:
        """Admit the message, record the turn's opening, drive the turn."""
        if self._config.message_links:
            await self.admit(s, message, identity, base_seq, seed, trace, minted)
        else:
            # ``admit`` without an input chain: no walk, no coroutine.
            self.opened(
                s, message, _identity(s, identity), base_seq, seed, trace, minted
            )
        return await self._loop.drive(s)

    async def admit(
        self,
        s: Session,
        message: str,
        identity: Mapping[str, Any] | None,
        base_seq: int,
        seed: Checkpoint | None,
        trace: Trace,
        minted: bool,
    ) -> str:
        """The input walk (its rows filed), ``agent.turn_start`` and the user's
        message committed; the message as admitted (G33–G38).

        Raises:
            MessageRefused: the input chain refused it (rows filed first).
        """
        cfg = self._config
        j = s.journal
        ident = _identity(s, identity)
        admitted = message
        if cfg.message_links:
            verdict = await walk_messages(
                cfg.message_links,
                "input",
                message,
                history=(),
                identity=ident,
                iteration=0,
            )
            j.file(verdict.rows)
            if verdict.denied:
                self._cursor.conversation.refused()
                raise MessageRefused.of(verdict, "input")
            admitted = verdict.content
        return self.opened(s, admitted, ident, base_seq, seed, trace, minted)

    def opened(
        self,
        s: Session,
        admitted: str,
        ident: dict[str, Any],
        base_seq: int,
        seed: Checkpoint | None,
        trace: Trace,
        minted: bool,
    ) -> str:
        """``admit``'s record, once the message is in: ``agent.turn_start``
        (after the seed, if any) and the user's message committed."""
        cfg = self._config
        j = s.journal
        self._cursor.conversation.admitted()
        if seed is not None:
            seeded = j.add(
                ConversationSeeded(
                    history=seed.history, original_input=seed.original_input
                )
            )
            base_seq = seeded.seq or 0
        j.add(
            TurnStarted(
                turn=j.folder.turn + 1,
                base_seq=base_seq,
                identity=ident,
                traceparent=trace[0],
                tracestate=trace[1],
                trace_minted=minted,
                provider=name_of(cfg.provider),
            )
        )
        j.add(MessageCommitted(message=Message(role="user", content=admitted)))
        return admitted


def _identity(s: Session, identity: Mapping[str, Any] | None) -> dict[str, Any]:
    """The identity a turn records: the caller's (a copy), else the session's id."""
    return dict(identity) if identity is not None else {"session_id": s.session_id}
