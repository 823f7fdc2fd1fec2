"""What the HTTP API does, without HTTP: sessions, snapshots, asks, decisions.

Pattern: an application service over the store port and a ``Runner`` (the
         in-process ``Agent`` or a cluster's ``ClusterAgent``).
Role:    gateway layer (http), for ``helmlog serve``; routes only decode,
         authorize and encode.
Emits:   through the agent it drives; nothing itself.

Laws: R1, R19, R9 (of two decisions on one ask one proceeds; the other is a
409), R18, G86, issue 11 item 4, H2 (a session belongs to the app of its
first turn; out of scope is 404), issue 28 (cards, history, timeline; a
stale decision says who decided and when).

Why the owner is read from the stream, only cached: every replica must
enforce the same ownership, and an owner never changes once recorded.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    EventStore,
    MiddlewareDecisionEvent,
    PauseRequested,
    PauseResumed,
    SessionImported,
    SessionState,
    StreamTamperedError,
    TurnStarted,
    encode_event,
    fold,
    read_verified,
    verify_records,
    verify_session,
    watched,
)
from helmlog.runtime import (
    AskPause,
    NoConversationError,
    RedactionPolicy,
    wall_clock_ms,
)
from helmlog.runtime.lowlevel import NoPendingAsk, decide_pending

from ._audit import (
    DecisionHistory,
    Entry,
    HistoryFilter,
    HistoryPage,
    Resolution,
    Timeline,
    card_context,
    decoded,
    resolutions,
    said,
    timeline_of,
)
from ._auth import ALL_APPS, Principal
from ._metrics import Metrics
from ._wire import (
    ERR_ASK_RESOLVED,
    ERR_BAD_REQUEST,
    ERR_NOT_AN_APPROVAL,
    ERR_UNKNOWN_SESSION,
    AskView,
    HttpProblem,
    Outcome,
)

TIMEOUT_BY = "timeout"
# Cards' conversations kept: a stream up to its pause never changes.
CARDS_CACHED: Final = 1_024
# Decisions the approvals page keeps showing as decided.
RECENT: Final = 8
# H2: the key of a turn's identity that names the app owning the session.
OWNER_KEY: Final = "app"
OWNERS_CACHED: Final = 65_536


def owner_of(events: Iterable[Any]) -> str | None:
    """The app a session belongs to (H2): ``app`` in the identity of its
    first recorded turn (``agent.turn_start``, or an import's paused call);
    ``None`` when that turn names none (the session was not started through
    ``serve``) or the stream holds no turn."""
    for ev in events:
        if isinstance(ev, TurnStarted):
            ident = ev.identity
        elif isinstance(ev, SessionImported) and ev.call is not None:
            ident = ev.call.identity
        else:
            continue
        app = ident.get(OWNER_KEY) if isinstance(ident, dict) else None
        return app if isinstance(app, str) and app else None
    return None


class Runner(Protocol):
    """Where turns run: in this process, or on a cluster's hosts."""

    async def start(
        self, message: str, identity: Mapping[str, Any]
    ) -> tuple[str, str | AskPause]:
        """Run the first turn of a new session; return its id and outcome."""
        ...

    async def send(
        self, checkpoint: Checkpoint, message: str, identity: Mapping[str, Any]
    ) -> str | AskPause:
        """Run the next turn from a conversation checkpoint."""
        ...

    async def resume(self, checkpoint: Checkpoint, decision: Any) -> str | AskPause:
        """Resolve a pause."""
        ...


class LocalRunner:
    """Turns run by one in-process ``Agent`` (sessions interleave freely)."""

    def __init__(self, agent: Any, new_id: Any) -> None:
        self.agent = agent
        self._new_id = new_id

    async def start(
        self, message: str, identity: Mapping[str, Any]
    ) -> tuple[str, str | AskPause]:
        sid = self._new_id()
        out = await self.agent.run(
            message, session_id=sid, identity={**identity, "session_id": sid}
        )
        return sid, out

    async def send(
        self, checkpoint: Checkpoint, message: str, identity: Mapping[str, Any]
    ) -> str | AskPause:
        ident = {**identity, "session_id": checkpoint.session_id}
        out: str | AskPause = await self.agent.run(
            message, continue_from=checkpoint, identity=ident
        )
        return out

    async def resume(self, checkpoint: Checkpoint, decision: Any) -> str | AskPause:
        out: str | AskPause = await self.agent.resume(checkpoint, decision)
        return out


class ClusterRunner:
    """Turns run on a cluster's session hosts (one client view per call)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    async def start(
        self, message: str, identity: Mapping[str, Any]
    ) -> tuple[str, str | AskPause]:
        view = self.agent.client()
        out = await view.run(message, identity=dict(identity))
        return str(view.session_id), out

    async def send(
        self, checkpoint: Checkpoint, message: str, identity: Mapping[str, Any]
    ) -> str | AskPause:
        ident = {**identity, "session_id": checkpoint.session_id}
        out: str | AskPause = await self.agent.client().run(
            message, continue_from=checkpoint, identity=ident
        )
        return out

    async def resume(self, checkpoint: Checkpoint, decision: Any) -> str | AskPause:
        out: str | AskPause = await self.agent.client().resume(checkpoint, decision)
        return out


@runtime_checkable
class DecidesAsks(Protocol):
    """What decides the asks of calls that start elsewhere: an ``mcp_serve``
    result (S10), an ``McpProxy`` (P14), an integration's ``Governance``
    (issue 27). Rebuilt on the store a command opens (``on_store``), it
    resumes a pause (``resume``) and starts no session here; an ``Agent``
    has no ``on_store``. The app picks ``ServedRunner`` by this shape, so
    the gateway names none of the layers beside it.
    """

    def on_store(self, store: Any) -> Any:
        """The same decider, recording into ``store``."""
        ...

    async def resume(self, checkpoint: Checkpoint, decision: Any) -> Any:
        """Answer a pause; what the caller reads (or the call's next pause)."""
        ...


class ServedRunner:
    """The asks of tools served over MCP (an ``mcp_serve`` result, S10), of
    an ``McpProxy``'s governance (P14), or of an integration's
    ``Governance`` (issue 27): any ``DecidesAsks``.

    Their calls start over MCP, not here: ``start`` and ``send`` are a 400;
    ``resume`` carries a decided pause out with ``ServedTools.resume`` (or
    ``McpProxy.resume``, which opens the proxy's upstream for it, or
    ``Governance.resume``, which runs the agent's registered tool).
    """

    def __init__(self, served: Any) -> None:
        self.served = served

    async def start(
        self, message: str, identity: Mapping[str, Any]
    ) -> tuple[str, str | AskPause]:
        raise _no_sessions()

    async def send(
        self, checkpoint: Checkpoint, message: str, identity: Mapping[str, Any]
    ) -> str | AskPause:
        raise _no_sessions()

    async def resume(self, checkpoint: Checkpoint, decision: Any) -> str | AskPause:
        out: str | AskPause = await self.served.resume(checkpoint, decision)
        return out


def _no_sessions() -> HttpProblem:
    return HttpProblem(
        400,
        ERR_BAD_REQUEST,
        "this server decides the asks of tools served over MCP (mcp_serve, "
        "mcp-proxy) or of an integration's Governance: "
        "their calls start over MCP or in their framework, not as sessions here",
    )


class Service:
    """The API's operations on one store, one runner and one redaction policy."""

    def __init__(
        self,
        store: EventStore,
        runner: Runner,
        *,
        redact: RedactionPolicy | None = None,
        metrics: Metrics | None = None,
        ask_timeout_s: float | None = None,
    ) -> None:
        self.store = store
        self.runner = runner
        self.redact = redact
        self.metrics = metrics or Metrics()
        self.ask_timeout_s = ask_timeout_s
        # session id -> owning app; a cache of what the streams say (H2).
        self._owners: OrderedDict[str, str] = OrderedDict()
        # Issue 28: decided asks of every session, computed from the streams.
        self.history = DecisionHistory(store)
        self._cards: OrderedDict[tuple[str, int], AskCard] = OrderedDict()

    def served(self, value: Any) -> Any:
        """``value`` as the policy lets it be served (G86)."""
        return self.redact.served(value) if self.redact is not None else value

    # -- sessions -------------------------------------------------------------

    async def start(self, who: Principal, message: str) -> Outcome:
        """Start a session with its first message."""
        sid, out = await self._turn(self.runner.start(message, _identity(who)))
        self.metrics.inc("helmlog_sessions_started_total")
        return self._outcome(sid, out)

    async def send(self, who: Principal, session_id: str, message: str) -> Outcome:
        """Continue one of ``who``'s app's sessions by id from its last
        accepted checkpoint (R1); another app's is unknown to it (H2)."""
        events = await self._events(session_id)
        if not who.owns(self._owner_seen(session_id, events)):
            raise _unknown(session_id)
        state = fold(events)
        if state.pending is not None:
            raise NoConversationError("pending-question")
        cp = state.checkpoint
        if cp is None or cp.kind != "conversation":
            raise NoConversationError("last-input-refused")
        out = await self._turn(self.runner.send(cp, message, _identity(who)))
        return self._outcome(session_id, out)

    async def snapshot(self, who: Principal, session_id: str) -> SessionState:
        """The session's fold, served redacted, if ``who`` sees it (H2)."""
        events = await self._events(session_id)
        if not who.sees(self._owner_seen(session_id, events)):
            raise _unknown(session_id)
        state: SessionState = self.served(fold(events))
        return state

    async def check_sees(self, who: Principal, session_id: str) -> None:
        """Raise the unknown-session 404 unless the session exists and ``who``
        sees it (H2): out of scope answers exactly as unknown."""
        if not await self._in_scope(who, session_id, who.sees):
            raise _unknown(session_id)
        if not await self.exists(session_id):
            raise _unknown(session_id)

    async def owner(self, session_id: str) -> str | None:
        """The app ``session_id`` belongs to, from its stream (H2), cached."""
        known = self._owners.get(session_id)
        if known is not None:
            return known
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            records = await read_verified(self.store, session_id)
        return self._owner_seen(session_id, [r.decode() for r in records])

    def _owner_seen(self, session_id: str, events: Iterable[Any]) -> str | None:
        app = owner_of(events)
        if app is not None:
            self._owners[session_id] = app
            while len(self._owners) > OWNERS_CACHED:
                self._owners.popitem(last=False)
        return app

    async def _in_scope(
        self, who: Principal, session_id: str, test: Callable[[str | None], bool]
    ) -> bool:
        if who.can("approver") and ALL_APPS in who.apps:
            return True  # every app's: no read of the stream needed (R18)
        return test(await self.owner(session_id))

    async def facts(self, session_id: str, after_seq: int) -> list[tuple[int, bytes]]:
        """The decision facts after ``after_seq``: ``(seq, encoded fact)``."""
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            records = await self.store.read(session_id, after_seq)
        out: list[tuple[int, bytes]] = []
        for event in watched(r.decode() for r in records):
            if isinstance(event, MiddlewareDecisionEvent) and event.seq is not None:
                out.append((event.seq, encode_event(self.served(event))))
        return out

    async def exists(self, session_id: str) -> bool:
        """Whether the store holds the session."""
        with self.metrics.timed("helmlog_store_seconds", op="head"):
            seq, _ = await self.store.head(session_id)
        return seq > 0

    # -- asks -----------------------------------------------------------------

    async def asks(self, who: Principal) -> list[AskView]:
        """Pending pauses ``who`` decides for (H2), from the index, each with
        its arguments (served)."""
        return [view for view, _seq in await self._pending(who)]

    async def _pending(self, who: Principal) -> list[tuple[AskView, int]]:
        """``asks``, each with the seq of its ``pause.request``."""
        with self.metrics.timed("helmlog_store_seconds", op="pending_asks"):
            pending = await self.store.pending_asks()
        views: list[tuple[AskView, int]] = []
        for entry in sorted(pending, key=lambda a: (a.timestamp, a.session_id)):
            if not await self._in_scope(who, entry.session_id, who.decides_for):
                continue
            with self.metrics.timed("helmlog_store_seconds", op="read"):
                records = await self.store.read(entry.session_id, entry.seq - 1)
            events = [r.decode() for r in records]
            if not events or any(isinstance(e, PauseResumed) for e in events):
                continue  # the index is behind its stream: already answered
            ev = events[0]
            if not isinstance(ev, PauseRequested) or ev.seq != entry.seq:
                continue
            views.append((self.served(self._ask_view(entry.session_id, ev)), ev.seq))
        return views

    def _deadline(self, asked_at: int, timeout_ms: int | None) -> int | None:
        """When an ask is declined by timeout: its own deadline, else the
        server's default counted from when it paused, else never."""
        if timeout_ms is not None:
            return asked_at + timeout_ms
        if self.ask_timeout_s is not None:
            return asked_at + round(self.ask_timeout_s * 1000)
        return None

    def _ask_view(self, session_id: str, ev: PauseRequested) -> AskView:
        deadline = self._deadline(ev.timestamp, ev.timeout_ms)
        return AskView(
            session_id=session_id,
            tool_call_id=ev.tool_call_id,
            tool_name=ev.tool_name,
            kind=ev.kind,
            middleware=ev.middleware,
            question=ev.question,
            args=ev.args,
            detail=ev.detail,
            asked_at=ev.timestamp,
            deadline=deadline,
        )

    async def pending_count(self) -> int:
        """How many asks the index holds (for ``/metrics``)."""
        with self.metrics.timed("helmlog_store_seconds", op="pending_asks"):
            return len(await self.store.pending_asks())

    async def decide(
        self,
        by: str,
        session_id: str,
        call_id: str,
        *,
        approved: bool,
        note: str | None,
        scope: Principal | None,
    ) -> Outcome:
        """Approve or decline one pending ask as ``by`` (the authenticated one).

        ``scope`` is the approver whose apps bound the decision (H2), or
        ``None`` for the system's own (the deadline sweep).

        Raises:
            HttpProblem: 404 for an unknown session or one out of ``scope``;
                409 when the ask is not pending (answered, replaced; a
                concurrent decision won: who decided it and when, issue 28)
                or waits on an answer, not a decision.
        """
        if scope is not None and not await self._in_scope(
            scope, session_id, scope.decides_for
        ):
            raise _unknown(session_id)
        try:
            out = await decide_pending(
                self.store,
                session_id,
                lambda cp, decision: self._turn(self.runner.resume(cp, decision)),
                approved=approved,
                by=by,
                note=note,
                call_id=call_id,
                timed=lambda op: self.metrics.timed("helmlog_store_seconds", op=op),
            )
        except NoPendingAsk as exc:
            raise await self._not_pending(exc) from None
        except CheckpointError as exc:
            if exc.reason not in ("replayed", "stale"):
                raise
            raise await self._answered(session_id, call_id) from None
        verdict = "approved" if approved else "declined"
        self.metrics.inc("helmlog_decisions_total", decision=verdict)
        return self._outcome(session_id, out)

    async def _not_pending(self, exc: NoPendingAsk) -> HttpProblem:
        """What a decision on no pending ask answers: 404 or 409."""
        session_id, call_id = exc.session_id, exc.call_id or ""
        if exc.reason == "unknown" or (
            exc.reason == "unlisted" and not await self.exists(session_id)
        ):
            return _unknown(session_id)
        if exc.reason == "ask-human":
            return HttpProblem(
                409,
                ERR_NOT_AN_APPROVAL,
                f"tool '{exc.tool_name}' asked a question (ask_human): it waits "
                "on an answer, not on an approval",
                session_id=session_id,
            )
        return await self._answered(session_id, call_id)

    async def expire(self, now_ms: int | None = None) -> int:
        """Decline, as ``timeout``, every pending ask past its deadline.

        The deadline is the ask's own (``ask(..., timeout_s=...)``, kept in
        the pause and the asks index) or the server's default counted from
        when it paused. Returns how many were declined; an ask decided
        meanwhile by a person is skipped (its 409 is the expected race).
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        with self.metrics.timed("helmlog_store_seconds", op="pending_asks"):
            pending = await self.store.pending_asks()
        declined = 0
        for entry in pending:
            deadline = entry.deadline
            if deadline is None:
                deadline = self._deadline(entry.timestamp, None)
            if deadline is None or deadline > now or entry.kind == "ask-human":
                continue
            try:
                await self.decide(
                    TIMEOUT_BY,
                    entry.session_id,
                    entry.tool_call_id,
                    approved=False,
                    note=None,
                    scope=None,
                )
            except HttpProblem as exc:
                if exc.problem.status != 409:
                    raise
                continue
            except CheckpointError as exc:
                if exc.reason != "replayed":
                    raise
                continue
            declined += 1
        return declined

    async def _answered(self, session_id: str, call_id: str) -> HttpProblem:
        """The 409 of a decision that came too late: who answered the ask and
        when, in words (issue 28), else the plain conflict."""
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            records = await self.store.read(session_id)
        events = [e for e in decoded(records) if not isinstance(e, tuple)]
        found = [
            r for r in resolutions(session_id, events) if r.tool_call_id == call_id
        ]
        if not found:
            return _resolved(session_id, call_id)
        last = found[-1]
        return HttpProblem(
            409,
            ERR_ASK_RESOLVED,
            f"already {said(last)}",
            session_id=session_id,
            decided_by=last.by,
            decided_at=last.decided_at,
            approved=last.outcome == "approved",
        )

    # -- what the pages read (issue 28) -------------------------------------------

    async def cards(self, who: Principal) -> list[AskCard]:
        """``asks`` with what an approver reads beside each: the conversation
        up to the ask and the decisions of its turn, served."""
        out: list[AskCard] = []
        for view, seq in await self._pending(who):
            key = (view.session_id, seq)
            card = self._cards.get(key)
            if card is None:
                card = await self._card(view, seq)
                self._cards[key] = card
                while len(self._cards) > CARDS_CACHED:
                    self._cards.popitem(last=False)
            out.append(card)
        return out

    async def _card(self, view: AskView, seq: int) -> AskCard:
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            records = await self.store.read(view.session_id)
        upto = [r for r in records if r.seq < seq]
        try:
            verify_records(view.session_id, upto, self.store.chain_key)
        except StreamTamperedError as exc:
            return AskCard(ask=view, seq=seq, broken=exc.seq)
        events = [self.served(e) for e in decoded(upto)]
        messages, turn = card_context(events, seq)
        return AskCard(ask=view, seq=seq, messages=messages, turn=turn)

    async def resolution(
        self, session_id: str, call_id: str, from_seq: int
    ) -> Resolution | None:
        """How the ask ``call_id`` paused at ``from_seq`` was answered (served),
        or ``None`` while it is not."""
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            records = await self.store.read(session_id, max(0, from_seq - 1))
        events = [e for e in decoded(records) if not isinstance(e, tuple)]
        for r in resolutions(session_id, events):
            if r.tool_call_id == call_id:
                served: Resolution = self.served(r)
                return served
        return None

    async def recent(self, who: Principal, limit: int = RECENT) -> list[Resolution]:
        """The last ``limit`` decided asks ``who`` decides for (served)."""
        await self.history.refresh()
        out: list[Resolution] = []
        for owner, r in self.history.rows():
            if len(out) == limit:
                break
            if who.decides_for(owner):
                out.append(self.served(r))
        return out

    async def decisions(self, who: Principal, flt: HistoryFilter) -> HistoryPage:
        """A page of the decided asks ``who`` reads, filtered (issue 28)."""
        await self.history.refresh()
        seen = [r for owner, r in self.history.rows() if who.sees(owner)]
        rows = [r for r in seen if flt.admits(r)]
        pages = max(1, -(-len(rows) // flt.size))
        page = min(max(1, flt.page), pages)
        cut = rows[(page - 1) * flt.size : page * flt.size]
        broken = self.history.broken() if who.reads_everything else {}
        return HistoryPage(
            rows=tuple(self.served(r) for r in cut),
            total=len(rows),
            page=page,
            pages=pages,
            approvers=tuple(sorted({r.by for r in seen if r.by})),
            rules=tuple(sorted({r.rule for r in seen if r.rule})),
            tools=tuple(sorted({r.tool_name for r in seen if r.tool_name})),
            broken=tuple(sorted(broken.items())),
        )

    async def timeline(self, who: Principal, session_id: str) -> Timeline:
        """The session as its turns, served, with its chain's verdict (R18).

        Read even when broken (an auditor must see what is there), but then
        its recorded owner is not believed: only an every-app reader sees it.
        """
        events, verdict = await self._audited(who, session_id)
        return timeline_of(
            session_id,
            [e if isinstance(e, tuple) else self.served(e) for e in events],
            verdict.text(session_id),
            verdict.broken,
        )

    async def export(self, who: Principal, session_id: str) -> bytes:
        """The session's events as JSON lines, served (what an auditor keeps)."""
        events, _verdict = await self._audited(who, session_id)
        lines = [
            encode_event(self.served(e)) for e in events if not isinstance(e, tuple)
        ]
        return b"".join(line + b"\n" for line in lines)

    async def _audited(self, who: Principal, session_id: str) -> tuple[list[Any], Any]:
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            verdict = await verify_session(self.store, session_id, self.store.chain_key)
            records = await self.store.read(session_id)
        if not records:
            raise _unknown(session_id)
        events = decoded(records)
        if not who.reads_everything and (
            verdict.broken is not None
            or not who.sees(owner_of(e for e in events if not isinstance(e, tuple)))
        ):
            raise _unknown(session_id)
        return events, verdict

    # -- helpers ----------------------------------------------------------------

    async def _state(self, session_id: str) -> SessionState:
        return fold(await self._events(session_id))

    async def _events(self, session_id: str) -> list[Any]:
        with self.metrics.timed("helmlog_store_seconds", op="read"):
            records = await read_verified(self.store, session_id)
        if not records:
            raise _unknown(session_id)
        return [r.decode() for r in records]

    async def _turn(self, work: Any) -> Any:
        started = time.perf_counter()
        try:
            out = await work
        except BaseException:
            self.metrics.inc("helmlog_turns_total", outcome="failed")
            raise
        finally:
            self.metrics.observe("helmlog_turn_seconds", time.perf_counter() - started)
        result = out[1] if isinstance(out, tuple) else out
        outcome = "paused" if isinstance(result, AskPause) else "answered"
        self.metrics.inc("helmlog_turns_total", outcome=outcome)
        return out

    def _outcome(self, session_id: str, out: str | AskPause) -> Outcome:
        if isinstance(out, AskPause):
            view = AskView(
                session_id=session_id,
                tool_call_id=out.tool_call_id,
                tool_name=out.tool_name,
                kind=out.kind,
                middleware=out.ask.middleware,
                question=out.ask.question,
                detail=out.ask.detail,
            )
            return Outcome(
                session_id=session_id, status="paused", ask=self.served(view)
            )
        return Outcome(session_id=session_id, status="answered", answer=out)


class AskCard(msgspec.Struct, frozen=True, kw_only=True):
    """A pending ask as the approvals page shows it (issue 28 item 1): the
    ask, the last messages up to it, the decisions of its turn before it;
    ``broken``: the seq where its stream fails verification (nothing shown)."""

    ask: AskView
    seq: int = 0
    messages: tuple[Entry, ...] = ()
    turn: tuple[Entry, ...] = ()
    broken: int | None = None


def _identity(who: Principal) -> dict[str, Any]:
    # H2: the first turn's identity is the session's record of its owner.
    return {"principal": who.identity, OWNER_KEY: who.own_app}


def _unknown(session_id: str) -> HttpProblem:
    return HttpProblem(
        404, ERR_UNKNOWN_SESSION, f"no session '{session_id}'", session_id=session_id
    )


def _resolved(session_id: str, call_id: str) -> HttpProblem:
    return HttpProblem(
        409,
        ERR_ASK_RESOLVED,
        f"session '{session_id}' has no pending ask for call '{call_id}' "
        "(it was answered, or never asked)",
        session_id=session_id,
    )
