"""The agent: run, continue, resume; the checkpoint and the snapshot.

Pattern: a facade over the loop that hosts sessions as caches of their
         streams, serializing the operations of each session (R2).
Role:    runtime layer; what library users hold. ``helmlog.Agent`` is this.
Emits:   through the loop; ``agent.on``/``attach`` subscribe listeners.

Laws: G33–G38 (admission, continued turns, a refused input is not a
conversation, the errors), G59–G68 (pause and resume, decisions, a pending
question blocks continuation), G82–G84, G86 (``last_snapshot`` is served
redacted), R1 (``last_snapshot`` is the fold of the last run's session), R9
(checkpoints are checked before anything is appended, and single-use), R14.

Why sessions are re-activated from the store after a failed append: the
cached fold then holds events the store never accepted; the store's stream is
the truth (R1, R5).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Mapping
from typing import Any

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    ConversationSeeded,
    DecisionRequiredError,
    Folder,
    HelmlogError,
    LedgerAppendError,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    NoConversationError,
    PauseResumed,
    SessionState,
    TurnStarted,
    binding_mac,
    shape,
)

from ._builder import AgentBuilder
from ._chain import CallSite, walk_messages, walk_tool_calls
from ._config import AgentConfig
from ._journal import Journal
from ._loop import Loop, MessageRefused, Session, find_call
from ._pause import AskPause, CheckInDecision, decision_why
from ._tools import invalid_arguments_text
from ._watchers import Listeners
from .providers import Provider


class Agent:
    """A governed agent. Build one with ``Agent.create(provider=..., model=...)``."""

    def __init__(self, config: AgentConfig, listeners: Listeners) -> None:
        self._config = config
        self._loop = Loop(config)
        self._listeners = listeners
        self._sessions: dict[str, Session] = {}
        self._last_session_id: str | None = None
        self._checkpoint: Checkpoint | None = None
        self._admitted_once = False
        self._last_input_refused = False

    @staticmethod
    def create(provider: Provider, model: str, **options: Any) -> AgentBuilder:
        """Start building an agent (options: ``redact``, ``store``, ``clock``,
        ``ids``, ``credentials``)."""
        return AgentBuilder(provider, model, **options)

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
        return self._checkpoint

    def last_snapshot(self) -> SessionState:
        """The fold of the last run's session, served redacted (R1, G86)."""
        if self._last_session_id is None:
            return SessionState()
        session = self._sessions.get(self._last_session_id)
        state = session.journal.folder.state() if session else SessionState()
        redact = self._config.redact
        return redact.served(state) if redact is not None else state

    @property
    def session_id(self) -> str | None:
        """The id of the last run's session."""
        return self._last_session_id

    # -- sessions ---------------------------------------------------------

    def _new_session(self, session_id: str) -> Session:
        cfg = self._config
        journal = Journal(
            cfg.store,
            session_id,
            self._listeners,
            cfg.clock,
            stored_form=cfg.redact.stored if cfg.redact is not None else None,
            served_form=cfg.redact.served if cfg.redact is not None else None,
        )
        session = Session(journal)
        self._sessions[session_id] = session
        return session

    async def _activate(self, session_id: str) -> Session | None:
        """The hosted session, activated from its stream on first use (R6)."""
        session = self._sessions.get(session_id)
        if session is not None and not session.journal.broken:
            return session
        session = self._new_session(session_id)
        # R9, R2: a caller that finds this session cached meanwhile waits on its
        # lock, so the stream is never folded twice into one cache.
        async with session.lock:
            await session.journal.activate()
        if session.journal.folder.last_seq == 0:
            del self._sessions[session_id]
            return None
        return session

    async def _hosted(self, session_id: str) -> Session:
        """The session, activated; ``CheckpointError("unknown-session")`` if absent."""
        session = await self._activate(session_id)
        if session is None:
            raise CheckpointError(
                "unknown-session", f"no session '{session_id}' in the store"
            )
        return session

    # -- running ----------------------------------------------------------

    async def run(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> str | AskPause:
        """Run one turn: admit the message, loop, return the answer or a pause.

        ``session_id`` names a fresh session (a cluster places a session before
        it exists); it must be new to the store.
        """
        if not isinstance(message, str):
            raise TypeError(f"run() takes the message as a str, got {shape(message)}")
        seed: Checkpoint | None = None
        cp: Checkpoint | None = None
        base_seq = 0
        if continue_from is None and session_id is not None:
            if not isinstance(session_id, str) or not session_id:
                raise ValueError("run(session_id=...) takes a non-empty str")
            if await self._activate(session_id) is not None:
                raise ValueError(
                    f"session '{session_id}' already exists: continue it with "
                    "run(message, continue_from=checkpoint)"
                )
            session = self._new_session(session_id)
        elif continue_from is None:
            session = self._new_session(self._config.new_id())
        else:
            cp = _coerce(continue_from)
            found = await self._activate(cp.session_id)
            if found is None:
                session, seed, cp = self._new_session(cp.session_id), cp, None
            else:
                session = found
        async with session.lock:
            if cp is not None:
                await session.journal.activate()  # catch up with other hosts
                base_seq = self._check_continuation(session.journal.folder, cp)
            self._last_session_id = session.session_id
            return await self._guard(
                session, self._start_turn(session, message, identity, base_seq, seed)
            )

    def _check_continuation(self, f: Folder, cp: Checkpoint) -> int:
        if f.pending is not None:
            raise NoConversationError("pending-question")
        if cp.kind != "conversation":
            raise CheckpointError("stale", "a pause checkpoint was already resumed")
        held = f.history_at(cp.seq)
        if held is None or held[0] != cp.history:
            raise CheckpointError(
                "tampered",
                f"seq {cp.seq} and history do not match session '{cp.session_id}'",
            )
        return cp.seq

    async def _start_turn(
        self,
        s: Session,
        message: str,
        identity: Mapping[str, Any] | None,
        base_seq: int,
        seed: Checkpoint | None,
    ) -> str | AskPause:
        cfg = self._config
        j = s.journal
        ident = dict(identity) if identity is not None else {"session_id": s.session_id}
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
                self._checkpoint = None
                self._last_input_refused = True
                raise MessageRefused.of(verdict, "input")
            admitted = verdict.content
        self._admitted_once = True
        self._last_input_refused = False
        if seed is not None:
            seeded = j.add(
                ConversationSeeded(
                    history=seed.history, original_input=seed.original_input
                )
            )
            base_seq = seeded.seq or 0
        j.add(TurnStarted(turn=j.folder.turn + 1, base_seq=base_seq, identity=ident))
        j.add(MessageCommitted(message=Message(role="user", content=admitted)))
        return await self._loop.drive(s)

    async def follow_up(self, message: str) -> str | AskPause:
        """Continue the last conversation: ``run(m, continue_from=checkpoint())``."""
        cp = self._checkpoint
        if cp is None:
            reason = (
                "last-input-refused"
                if self._last_input_refused and self._admitted_once
                else "never-run"
            )
            raise NoConversationError(reason)
        if cp.kind == "pause":
            raise NoConversationError("pending-question")
        return await self.run(message, continue_from=cp)

    async def _guard(self, s: Session, body: Any) -> str | AskPause:
        """Run a body; on a raise, record it once (G91) and re-raise."""
        try:
            out: str | AskPause = await body
        except MessageRefused as refused:
            err = refused.error
            await self._loop.fail(
                s, refused, phase=err.phase, middleware=err.middleware
            )
            await self._after(s, refused=err.phase == "input")
            raise err from None
        except BaseException as exc:
            await self._loop.fail(s, exc)
            await self._after(s)
            raise
        await self._after(s)
        return out

    async def _after(self, s: Session, *, refused: bool = False) -> None:
        if s.journal.broken:
            # The cache holds events the store never accepted: re-activate from
            # the store, which is the truth (R1, R5). If the store is still
            # down, the next use re-activates; the snapshot stays the cache's.
            del self._sessions[s.session_id]
            try:
                fresh = await self._activate(s.session_id)
            except LedgerAppendError:
                fresh = None
            except HelmlogError:
                fresh = None
            if fresh is None:
                self._sessions[s.session_id] = s
            else:
                s = fresh
        if not refused:
            self._checkpoint = s.journal.folder.checkpoint

    async def recover(self, session_id: str) -> str | AskPause | None:
        """Take over a session whose host stopped mid-turn, and finish the turn.

        Activation folds the stream; if a turn was left unfinished with no
        pause pending, the turn continues from the record (R7): a call that
        was dispatched without a recorded result is not run again (its outcome
        is recorded as unknown) unless its tool is idempotent, the rest of the
        batch is dispatched, and the model is called. Returns the answer or a
        new pause; ``None`` when there was nothing to finish.

        Raises:
            CheckpointError: ``unknown-session`` when the store lacks it.
        """
        session = await self._hosted(session_id)
        async with session.lock:
            await session.journal.activate()  # catch up with other hosts
            f = session.journal.folder
            if not f.in_turn or f.pending is not None:
                return None
            self._last_session_id = session_id
            return await self._guard(session, self._loop.drive(session))

    def run_sync(self, message: str, **kwargs: Any) -> str | AskPause:
        """``run`` for scripts without an event loop."""
        return asyncio.run(self.run(message, **kwargs))

    # -- resume -------------------------------------------------------------

    async def resume(
        self, checkpoint: Checkpoint | str, decision: Any = None
    ) -> str | AskPause:
        """Answer a pause and continue the run (G59–G70)."""
        cp = _coerce(checkpoint)
        session = await self._hosted(cp.session_id)
        async with session.lock:
            await session.journal.activate()  # catch up with other hosts
            f = session.journal.folder
            self._check_pause(f, cp)
            pending = f.pending
            assert pending is not None
            if (
                find_call(f.history, pending.tool_call_id) is None
                or pending.tool_name not in self._config.tools
            ):
                # G91, R9: refused before anything is appended.
                raise CheckpointError(
                    "tampered", f"call {pending.tool_call_id} is not in the session"
                )
            if pending.kind in ("ask", "check-in"):
                if not isinstance(decision, CheckInDecision):
                    raise DecisionRequiredError(
                        gate=pending.kind,
                        middleware=pending.middleware,
                        tool_name=pending.tool_name,
                        received="nothing" if decision is None else shape(decision),
                    )
            elif decision is None:
                raise DecisionRequiredError(
                    gate="ask-human",
                    middleware=None,
                    tool_name=pending.tool_name,
                    received="nothing",
                )
            self._last_session_id = session.session_id
            return await self._guard(session, self._resume(session, decision))

    def _check_pause(self, f: Folder, cp: Checkpoint) -> None:
        """R9: refuse a checkpoint before anything is appended."""
        if cp.kind != "pause":
            raise CheckpointError(
                "stale", "a conversation checkpoint cannot be resumed"
            )
        if cp.seq in f.resolved_pauses:
            raise CheckpointError(
                "replayed", f"the pause at seq {cp.seq} was already resolved"
            )
        if cp.seq not in f.pause_seqs:
            # R9: the seq binding names no pause.request in the stream.
            raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
        p = f.pending
        if p is None or p.seq != cp.seq:
            if p is not None and cp.seq > p.seq:
                raise CheckpointError("tampered", f"no pause at seq {cp.seq}")
            raise CheckpointError(
                "stale", f"the session moved past the pause at seq {cp.seq}"
            )
        stored = f.pause_checkpoint
        assert stored is not None
        if (
            cp.tool_call_id != p.tool_call_id
            or cp.args_digest != p.args_digest
            or cp.policy_version != p.policy_version
            or cp.tool_name != p.tool_name
            or cp.history != stored.history
            or (cp.mac or None) != (stored.mac or None)
        ):
            raise CheckpointError(
                "tampered", "a binding disagrees with the session stream"
            )
        key = self._config.store.chain_key
        if key:
            expected = binding_mac(
                key,
                session_id=cp.session_id,
                seq=cp.seq,
                tool_call_id=cp.tool_call_id,
                args_digest=cp.args_digest,
                policy_version=cp.policy_version,
            )
            if not cp.mac or not hmac.compare_digest(cp.mac, expected):
                raise CheckpointError(
                    "tampered", "the checkpoint's MAC does not verify"
                )
        if p.policy_version != self._config.policy_version:
            raise CheckpointError(
                "policy-changed",
                "the agent's rules changed since this pause; resume it with the agent "
                "that paused it",
            )

    async def _resume(self, s: Session, decision: Any) -> str | AskPause:
        cfg = self._config
        loop = self._loop
        j = s.journal
        f = j.folder
        p = f.pending
        assert p is not None
        call = find_call(f.history, p.tool_call_id)
        tool = cfg.tools.get(p.tool_name)
        # Invariant: resume() refused a missing call or tool before appending.
        assert call is not None and tool is not None
        approved = decision.approved if isinstance(decision, CheckInDecision) else None
        j.add(
            PauseResumed(
                kind=p.kind,
                tool_call_id=p.tool_call_id,
                approved=approved,
                by=decision.by if isinstance(decision, CheckInDecision) else None,
                note=decision.note if isinstance(decision, CheckInDecision) else None,
                paused_duration_ms=max(0, cfg.clock() - p.timestamp),
                component_id=p.component_id,
            )
        )
        site = CallSite(
            p.tool_name,
            tool.source,
            p.tool_call_id,
            p.iteration,
            tuple(f.history),
            loop.identity(s),
        )
        pause: AskPause | None = None
        if p.kind == "ask":
            assert isinstance(decision, CheckInDecision) and p.middleware is not None
            j.file([_resume_row(p.middleware, site, decision, p.component_id)])
            if not decision.approved:
                loop.refuse(s, call, _declined_text(decision))
            else:
                verdict = await walk_tool_calls(
                    cfg.tool_links,
                    site,
                    p.args,
                    start=p.link_index + 1,
                    ask_allowed=False,
                )
                j.file(verdict.rows)
                if verdict.kind != "allow":
                    loop.refuse(s, call, verdict.reason or "")
                else:
                    pause = await loop.validate_and_run(
                        s, call, tool, site, verdict.args, asked_by=p.middleware
                    )
        elif p.kind == "check-in":
            assert isinstance(decision, CheckInDecision)
            if not decision.approved:
                loop.refuse(s, call, _declined_text(decision))
            else:
                kwargs, issues = tool.validate(p.args)
                if kwargs is None:
                    loop.refuse(s, call, invalid_arguments_text(tool.name, issues))
                else:
                    pause = await loop.run_tool(s, call, tool, site, p.args, kwargs)
        else:
            await loop.complete(s, call, site, p.args, decision, error=False)
        if pause is not None:
            return pause
        return await loop.drive(s)


def _resume_row(
    middleware: str, site: CallSite, decision: CheckInDecision, component_id: str | None
) -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware=middleware,
        moment="before-tool",
        at="tool",
        iteration=site.iteration,
        outcome="allow" if decision.approved else "deny",
        changed=False,
        tool_name=site.tool_name,
        tool_call_id=site.tool_call_id,
        why=decision_why(decision),
        component_id=component_id,
    )


def _declined_text(decision: CheckInDecision) -> str:
    return "declined by human" + (f": {decision.note}" if decision.note else "")


def _coerce(checkpoint: Any) -> Checkpoint:
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    if isinstance(checkpoint, str | bytes):
        return Checkpoint.from_json(checkpoint)
    raise CheckpointError(
        "malformed", f"expected a Checkpoint or its JSON, got {shape(checkpoint)}"
    )
