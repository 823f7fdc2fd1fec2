"""The cluster's agent: a client view with the in-process agent's shape.

Pattern: a client-side proxy: each call becomes one ``Op`` routed to the
         session's host (``host_for``) and queued on that host's ``HostLink``;
         the ``Result`` is turned back into what ``Agent`` returns or raises.
         Each view keeps its own last call in the runtime's conversation
         cursor (``lowlevel.Cursor``): views serve many callers at once.
Role:    actors layer; ``Cluster.agent(factory)`` returns one, ``client()``
         gives more views of the same hosts and watchers.

Laws: R17 (the same answers, pauses, errors and ``follow_up`` refusals as in
process, G36, G38), R8 (routing), R22 (``session_id`` is set before the call
is sent), R9 (only reads, recovers and single-use resumes are resent to a
restarting host; a ``run`` is not), G82–G84 and G95 (watchers).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, Self

import msgspec

from helmlog.events import Checkpoint, SessionState
from helmlog.runtime import AskPause, MessageDeniedError
from helmlog.runtime.lowlevel import Cursor

from ._batch import HostLink
from ._cluster_watch import ClusterWatch
from ._errors import HostUnavailableError
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

# How long a retried call (a read, a recover, a resume) waits for a
# restarting host before it gives up and raises HostUnavailableError.
RESTART_WAIT_S: Final = 60.0
# The operations that append to a session: its watchers follow it.
_APPENDING: Final = frozenset({"run", "resume", "recover"})


class WatchSource(Protocol):
    """Where a view's watchers read: the cluster's store (``Cluster``)."""

    store_url: str
    chain_key: bytes | None


class ClusterAgent:
    """An agent whose sessions run on the cluster's hosts (``Agent``'s shape).

    Each view remembers its own last call (session id, checkpoint, state);
    ``client()`` gives another view of the same hosts, and of the same
    watchers.
    """

    def __init__(
        self,
        cluster: WatchSource,
        links: list[HostLink],
        watch: ClusterWatch | None = None,
    ) -> None:
        self._cluster = cluster
        self._links = links
        self._watching = watch  # made on first use: most views never watch
        # This view's last call, as ``Agent`` keeps its own (R17).
        self._cursor = Cursor()
        self._state: SessionState | msgspec.Raw | None = None

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
        return self._cursor.session_id

    async def _op(
        self, kind: OpKind, session_id: str, *, retry: bool = False, **fields: Any
    ) -> str | AskPause | None:
        """Send one operation to the session's host; keep what it left; hand
        the watchers what it appended before handing back."""
        self._cursor.session_id = session_id
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
            self._cursor.refused()
        elif error is None or result.checkpoint is not None:
            self._cursor.checkpoint = result.checkpoint
            if kind == "run":
                self._cursor.admitted()
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
        cp = self._cursor.continuation()
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
        return self._cursor.checkpoint

    def last_snapshot(self) -> SessionState:
        """The state of the last call's session, as its host served it."""
        state = self._state
        if state is None:
            return SessionState()
        if isinstance(state, msgspec.Raw):
            # Decoded on first use: most callers never ask (see _wire).
            state = self._state = decode_state(state)
        return state
