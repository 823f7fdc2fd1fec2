"""The cluster's agent: a client view with the in-process agent's shape.

Pattern: a client-side proxy — each call becomes one ``Op`` routed to the
         session's host by ``host_for`` and queued on that host's
         ``HostLink`` (which batches it with whatever else became ready); the
         ``Result`` is turned back into what ``Agent`` returns or raises.
Role:    actors layer; ``Cluster.agent(factory)`` returns one, and
         ``client()`` gives more views of the same hosts. Code written against
         ``Agent`` (``run``, ``follow_up``, ``resume``, ``recover``,
         ``snapshot``, ``checkpoint``, ``last_snapshot``, and the watchers:
         ``on``, ``attach``, ``watch``, ``idle``) runs unchanged on it.
Emits:   nothing itself; hosts append to the shared store. Its watchers hear
         its own sessions' events (``_cluster_watch``), rows as facts (G95).

Laws: R17 (the same answers, pauses and typed errors as in process, and the
same ``follow_up`` refusals: ``never-run``, ``last-input-refused``,
``pending-question``, G36, G38), R8 (a session's operations go to the host
``host_for`` names), R22 (an error raised because a host died carries the
session id, and ``session_id`` never names another session: it is set before
the call is sent), R9 (a resume is single-use, so resending one to a
restarting host is safe: a second attempt of one that ran is ``replayed``),
G82–G84 and G95 (watchers: a program that moves from ``Agent`` to
``Cluster.agent`` keeps them; every view of one agent shares them).

Why each view keeps its own last call: views of one agent are used by many
callers at once (one per request, one per task); the "last call" is the
caller's, as an ``Agent``'s is its caller's, and must not be another caller's
session.

Why only reads, recovers and resumes are resent to a restarting host: each is
safe to send twice (a read changes nothing, a recover finds nothing left, a
resume is single-use); a ``run`` is not — a turn that started before the host
died is finished by failover (R22), and sending it again would start a second.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Self

import msgspec

from helmlog.events import (
    Checkpoint,
    HostUnavailableError,
    MessageDeniedError,
    NoConversationError,
    SessionState,
)
from helmlog.runtime import AskPause

from ._batch import HostLink
from ._cluster_watch import ClusterWatch
from ._placement import host_for
from ._wire import (
    NIL,
    Op,
    OpKind,
    Result,
    decode_state,
    encode_decision,
    output_of,
)

if TYPE_CHECKING:
    from ._cluster import Cluster

# How long a retried call (a read, a recover, a resume) waits for a
# restarting host before it gives up and raises HostUnavailableError.
RESTART_WAIT_S: Final = 60.0
# The operations that append to a session: its watchers follow it.
_APPENDING: Final = frozenset({"run", "resume", "recover"})


class ClusterAgent:
    """An agent whose sessions run on the cluster's hosts (``Agent``'s shape).

    Each view remembers its own last call (session id, checkpoint, state);
    ``client()`` gives another view of the same hosts, and of the same
    watchers.
    """

    def __init__(
        self,
        cluster: Cluster,
        links: list[HostLink],
        watch: ClusterWatch | None = None,
    ) -> None:
        self._cluster = cluster
        self._links = links
        self._watching = watch  # made on first use: most views never watch
        self._session_id: str | None = None
        self._checkpoint: Checkpoint | None = None
        self._state: SessionState | msgspec.Raw | None = None
        # What ``follow_up`` says when there is no checkpoint, as ``Agent``
        # says it: whether a run of this view passed input admission, and
        # whether the last run's input was refused.
        self._admitted_once = False
        self._last_input_refused = False

    def client(self) -> ClusterAgent:
        """Another client view of the same hosts, with its own last call; it
        shares this view's watchers."""
        return ClusterAgent(self._cluster, self._links, self._watch)

    # -- watchers (Agent's shape: G82-G84, G95) -------------------------------

    @property
    def _watch(self) -> ClusterWatch:
        watch = self._watching
        if watch is None:
            cluster = self._cluster
            watch = ClusterWatch(cluster.store_url, cluster.chain_key)
            self._watching = watch
        return watch

    def on(self, event_type: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        """Subscribe ``fn`` to one event type of this agent's sessions (``"*"``
        for all); returns unsubscribe."""
        return self._watch.on(event_type, fn)

    def attach(self, watcher: Any) -> Callable[[], None]:
        """Attach a watcher to this agent's sessions; returns unsubscribe.

        It hears the facts and documented events of every session this
        agent's views run, continue, resume or recover from now on, each
        session's in stream order and once, rows as ``middleware.decision``
        facts, in the served form of the factory's agent; all that a call
        left by the time it returns. Not ``stream.token``: it is not stored.
        """
        return self._watch.attach(watcher)

    def watch(self, *watchers: Any) -> Self:
        """Attach watchers (as the builder's ``.watch()``); returns this view."""
        for watcher in self._watch.listeners.check_watchers(list(watchers)):
            self._watch.attach(watcher)
        return self

    async def idle(self) -> None:
        """Wait until async watchers have seen every event delivered so far."""
        await self._watch.idle()

    async def close(self) -> None:
        """Stop the watchers' reader and release its store connections (every
        view of this agent shares them); ``Cluster.shutdown`` does it too."""
        await self._watch.close()

    @property
    def session_id(self) -> str | None:
        """The id of the last call's session (set before the call is sent)."""
        return self._session_id

    async def _op(
        self, kind: OpKind, session_id: str, *, retry: bool = False, **fields: Any
    ) -> str | AskPause | None:
        """Send one operation to the session's host; keep what it left; hand
        the watchers what it appended before handing back."""
        self._session_id = session_id
        watched = False
        watch = self._watching
        if kind in _APPENDING and watch is not None and watch.listeners:
            cp = fields.get("checkpoint")
            start = cp.seq if cp is not None else (0 if kind == "run" else None)
            watched = await watch.begin(session_id, start)
        try:
            result = await self._send(kind, session_id, retry, fields)
        finally:
            if watched:
                assert watch is not None
                await watch.end(session_id)
        self._keep(kind, result)
        return output_of(result)

    async def _send(
        self, kind: OpKind, session_id: str, retry: bool, fields: dict[str, Any]
    ) -> Result:
        link = self._links[host_for(session_id, len(self._links))]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESTART_WAIT_S
        while True:
            op = Op(id=link.next_id(), kind=kind, session_id=session_id, **fields)
            try:
                return await link.submit(op)
            except HostUnavailableError:
                # A restarting host: this operation is safe to send again.
                if not retry or loop.time() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    def _keep(self, kind: OpKind, result: Result) -> None:
        error = result.error
        if kind == "snapshot":
            pass  # a read leaves the last call's checkpoint as it was
        elif (
            kind == "run"
            and error is not None
            and error.code == MessageDeniedError.code
            and error.data.get("phase") == "input"
        ):
            # As in process: a refused input starts no conversation, so
            # there is none to follow up (G38, "last-input-refused").
            self._checkpoint = None
            self._last_input_refused = True
        elif error is None or result.checkpoint is not None:
            self._checkpoint = result.checkpoint
            if kind == "run":
                self._admitted_once = True
                self._last_input_refused = False
        if result.state != NIL:
            self._state = result.state

    async def run(
        self,
        message: str,
        *,
        continue_from: Checkpoint | str | None = None,
        identity: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Run one turn on the host of its session (a new one when fresh).

        ``traceparent``/``tracestate``: the caller's W3C trace context, as
        ``Agent.run`` takes it (recorded on the turn's start by the host).

        Raises:
            HostUnavailableError: the host died or is restarting (it carries
                this session's id; a turn it started is finished by failover).
        """
        if not isinstance(message, str):
            raise TypeError(f"run() takes the message as a str, got {type(message)}")
        cp: Checkpoint | None = None
        if continue_from is None:
            sid = uuid.uuid4().hex
        else:
            cp = Checkpoint.coerce(continue_from)
            sid = cp.session_id
        ident = dict(identity) if identity is not None else None
        out = await self._op(
            "run",
            sid,
            message=message,
            checkpoint=cp,
            identity=ident,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        assert out is not None
        return out

    async def follow_up(
        self,
        message: str,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Continue the last conversation: ``run(m, continue_from=checkpoint())``.

        Raises:
            NoConversationError: ``"never-run"``, ``"last-input-refused"`` or
                ``"pending-question"``, as ``Agent.follow_up`` does.
        """
        cp = self._checkpoint
        if cp is None:
            refused = self._last_input_refused and self._admitted_once
            raise NoConversationError("last-input-refused" if refused else "never-run")
        if cp.kind == "pause":
            raise NoConversationError("pending-question")
        return await self.run(
            message, continue_from=cp, traceparent=traceparent, tracestate=tracestate
        )

    async def resume(
        self,
        checkpoint: Checkpoint | str,
        decision: Any = None,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Answer a pause on the host of its session.

        A restarting host is waited for: a resume is single-use (R9), so a
        second attempt of one that ran is refused as ``replayed``.
        ``traceparent``/``tracestate``: the resuming caller's trace context,
        as ``Agent.resume`` takes it.
        """
        cp = Checkpoint.coerce(checkpoint)
        check_in, answer = encode_decision(decision)
        out = await self._op(
            "resume",
            cp.session_id,
            retry=True,
            checkpoint=cp,
            check_in=check_in,
            answer=answer,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        assert out is not None
        return out

    async def recover(self, session_id: str) -> str | AskPause | None:
        """Finish a turn its previous host left unfinished (R7); ``None`` when
        there was nothing to finish. Waits for a restarting host."""
        return await self._op("recover", session_id, retry=True)

    async def snapshot(self, session_id: str) -> SessionState:
        """A session's state as its host serves it, folded from its stream."""
        await self._op("snapshot", session_id, retry=True)
        return self.last_snapshot()

    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint the last call left."""
        return self._checkpoint

    def last_snapshot(self) -> SessionState:
        """The state of the last call's session, as its host served it."""
        state = self._state
        if state is None:
            return SessionState()
        if isinstance(state, msgspec.Raw):
            # Decoded on first use: most callers never ask (see _wire).
            state = self._state = decode_state(state)
        return state
