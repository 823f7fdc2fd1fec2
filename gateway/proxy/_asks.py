"""A governance link's ``ask`` in the proxy: a durable pause, a task, a decision.

Pattern: the proxy's side of S10 on ``_tasks``' machinery: the asking call's
         rows and ``pause.request`` move to a stream of its own; the client
         gets a task or S4's tool error; ``resume`` carries a decision out
         against the upstream and records the call's end in that stream.
Role:    gateway layer; ``McpProxy`` makes one (``proxy.asks``); governance,
         the session's ``tasks/*`` handlers and ``McpProxy.resume`` call it.
Emits:   ``pause.request``, ``pause.resume``, rows, ``tool.dispatched``,
         ``stream.tool_end`` and the audit's call events in the pause's stream.

Laws: P14 (the proxy's governance has S2–S4 and S10), S4, S10, R1, R7, R9.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import require_client_extension

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    MiddlewareDecision,
    SequenceConflictError,
    ToolEnded,
)
from helmlog.runtime import Tool
from helmlog.runtime.lowlevel import CallSite, Paused

from .._tasks import (
    TASKS_EXTENSION,
    TaskParams,
    TaskView,
    check_pause,
    decision_event,
    not_found,
    pause_event,
    pending_text,
    read_task,
    task_id,
    tool_error,
)
from ._calls import CallState
from ._layers import ProxyContext
from ._outputs import judge

if TYPE_CHECKING:
    from ._audit import ProxyLedger, _Recorder, _Stream


class ProxyParts(Protocol):
    """What of its proxy an asks holder uses (``McpProxy`` is one; typed
    structurally so this module imports neither it nor governance)."""

    name: str
    version: str
    records: ProxyLedger
    governance: Any
    routing: Any
    upstream: Any
    accounting: Any


class Asked:
    """Where governance leaves the task of a call that paused (one per call)."""

    __slots__ = ("view",)

    def __init__(self) -> None:
        self.view: TaskView | None = None


#: Set by the session around one ``tools/call``: a paused call's task goes
#: here, and the session answers a task-declaring client with it (S10).
ASKED: contextvars.ContextVar[Asked | None] = contextvars.ContextVar(
    "helmlog_proxy_asked", default=None
)


def caller(identity: Any) -> dict[str, Any] | None:
    """A session's identity as a pause records it (a mapping; S2).

    The proxy's resolver may return any value; one that is not a mapping
    (or is one of the key ``"identity"`` alone) is recorded under
    ``"identity"``.
    """
    if identity is None:
        return None
    if isinstance(identity, Mapping) and set(identity) != {"identity"}:
        return dict(identity)
    return {"identity": identity}  # ``uncaller`` gives it back


def uncaller(recorded: Any) -> Any:
    """The session's identity from what ``caller`` recorded (a resume's, S10)."""
    if isinstance(recorded, Mapping) and set(recorded) == {"identity"}:
        return recorded["identity"]
    return recorded


class DivertingRecorder:
    """A governed call's recorder that moves to the pause's own stream when
    the before-tool walk asks, before those rows are filed (R1: a session
    has one pending pause; the proxy session goes on)."""

    __slots__ = ("_open", "inner")

    def __init__(self, inner: _Recorder, open_stream: Callable[[], _Stream]) -> None:
        self.inner = inner
        self._open: Callable[[], _Stream] | None = open_stream

    @property
    def stream(self) -> _Stream:
        return self.inner.stream

    @property
    def refused_by(self) -> str | None:
        return self.inner.refused_by

    @property
    def changed_by(self) -> str | None:
        return self.inner.changed_by

    @property
    def value(self) -> Any:
        return self.inner.value

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        if self._open is not None and any(
            r.outcome == "ask" and r.moment == "before-tool" for r in rows
        ):
            self.inner.stream, self._open = self._open(), None
        await self.inner.file(rows)

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        await self.inner.dispatched(tool, tool_call_id, args, attempt)

    async def release(self) -> None:
        await self.inner.release()


class ProxyAsks:
    """The asks of one proxy's governance: recorded, read back, decided."""

    def __init__(self, proxy: ProxyParts) -> None:
        self.proxy = proxy
        self.prefix = f"mcp-{proxy.name}-"
        self._resuming = asyncio.Lock()

    @property
    def ledger(self) -> ProxyLedger:
        return self.proxy.records

    def open_stream(self) -> _Stream:
        """A new stream for one asking call (``mcp-<proxy name>-<hex>``)."""
        stream: _Stream = self.ledger.stream(f"{self.prefix}{uuid.uuid4().hex}")
        return stream

    # -- the asking call ---------------------------------------------------

    async def paused(
        self, stream: _Stream, site: CallSite, out: Paused
    ) -> types.CallToolResult:
        """Record the pause (flushed before the task exists) and answer S4.

        The call's task is left in ``ASKED`` for the session, which hands
        it to a client that declared the tasks extension (S10).
        """
        site = CallSite(
            tool_name=site.tool_name,
            tool_source=site.tool_source,
            tool_call_id=site.tool_call_id,
            iteration=site.iteration,
            history=site.history,
            identity=caller(site.identity),
        )
        await stream.append([pause_event(stream.journal, site, out)])
        ask = task_id(stream.journal.session_id, site.tool_call_id)
        view = await read_task(self.ledger.store, ask, self.prefix)
        self.ledger.forget(stream.journal.session_id)
        holder = ASKED.get()
        if holder is not None:
            holder.view = view
        return tool_error(pending_text(ask, out.ask.question, out.ask.middleware))

    async def outcome(
        self, ask_id: str, tool_name: str, identity: Any
    ) -> types.CallToolResult:
        """S4's read-back: what the stream recorded for the asking call.

        Never forwards the call upstream.

        Raises:
            MCPError: ``INVALID_PARAMS`` for an id that names no ask here.
        """
        view = await read_task(self.ledger.store, ask_id, self.prefix)
        if view.tool_name != tool_name:
            return tool_error(
                f"ask '{ask_id}' was made for another call: it is read back "
                f"by a call of tool '{view.tool_name}'"
            )
        if view.identity != caller(identity):
            return tool_error(f"ask '{ask_id}' was made by another caller")
        if view.status == "completed" and view.result is not None:
            return types.CallToolResult.model_validate(view.result)
        if view.decided is None:
            return tool_error(f"ask '{ask_id}' is not decided yet: {view.message}")
        return tool_error(
            f"ask '{ask_id}' is decided; its call has not ended: {view.message}"
        )

    # -- tasks/get, tasks/update, tasks/cancel (S10) -----------------------

    async def task_get(
        self, ctx: ServerRequestContext[Any], params: TaskParams, identity: Any
    ) -> dict[str, Any]:
        require_client_extension(ctx, TASKS_EXTENSION)
        view = await read_task(self.ledger.store, params.task_id, self.prefix)
        if view.identity != caller(identity):
            raise not_found(params.task_id)  # S2: another caller's task
        return view.wire(result_type="complete")

    async def task_ack(
        self, ctx: ServerRequestContext[Any], params: TaskParams
    ) -> dict[str, Any]:
        """Acknowledged, as ``mcp_serve`` does: the question is a person's."""
        require_client_extension(ctx, TASKS_EXTENSION)
        await read_task(self.ledger.store, params.task_id, self.prefix)
        return {}

    # -- the decision --------------------------------------------------------

    async def resume(self, checkpoint: Checkpoint | str, decision: Any) -> str:
        """Decide a proxied call's pause and carry it out against the upstream.

        The proxy is started (its upstream connected). The pause is checked
        against the verified stream (R9), ``pause.resume`` recorded, the
        chain walks on from the link after the asker (G62) or refuses
        (G64), the upstream tool runs once, and what the client receives
        (P27-judged) is recorded as ``stream.tool_end``; the audit records
        the call as any governed call. Returns that text.

        Raises:
            CheckpointError: not this stream's pending pause (``stale``,
                ``replayed``, ``tampered``).
            DecisionRequiredError: ``decision`` is not a ``CheckInDecision``.
            MCPError: ``LEDGER_UNAVAILABLE``: the decision was not recorded.
        """
        cp = Checkpoint.coerce(checkpoint)
        if not cp.session_id.startswith(self.prefix):
            raise CheckpointError("tampered", "the pause is not this proxy's")
        async with self._resuming:
            stream = self.ledger.stream(cp.session_id)
            try:
                async with stream.lock:
                    pending = await self._decided(stream, cp, decision)
            except BaseException:
                self.ledger.forget(cp.session_id)
                raise
        proxy = self.proxy
        governance = proxy.governance
        assert governance is not None
        tool = governance.tool(pending.tool_name)
        identity = uncaller(stream.journal.folder.identity)
        site = CallSite(
            tool_name=tool.name,
            tool_source=tool.source,
            tool_call_id=pending.tool_call_id,
            iteration=pending.iteration,
            history=(),
            identity=identity,  # S10: the caller the pause recorded (S2)
        )
        ctx = ProxyContext(
            transport="resume",
            session_id=cp.session_id,
            identity=identity,
            server_name=proxy.name,
            server_version=proxy.version,
        )
        said: list[str] = []

        async def route(state: CallState) -> types.CallToolResult:
            recorder = self.ledger.recorder(cp.session_id)
            out = await governance.resumed(
                tool, site, pending, decision, recorder, state
            )
            if isinstance(out, Paused):
                # A later link asks again: the task waits on that question.
                await stream.append([pause_event(stream.journal, site, out)])
                said.append(out.ask.question)
                return tool_error(out.ask.question)
            schema = await proxy.routing.outputs.schema(tool.name, proxy.upstream)
            answer: types.CallToolResult = judge(out, schema, tool.name, state)  # P27
            await stream.append(
                [
                    ToolEnded(
                        tool_name=tool.name,
                        tool_call_id=site.tool_call_id,
                        result=answer.model_dump(
                            by_alias=True, mode="json", exclude_none=True
                        ),
                        error=bool(answer.is_error),
                        duration_ms=0,
                    )
                ]
            )
            said.append(_text(answer))
            return answer

        try:
            await proxy.accounting.run(
                cp.session_id, ctx, tool.name, pending.args, None, route
            )
        finally:
            self.ledger.forget(cp.session_id)
        return said[0] if said else ""

    async def _decided(self, stream: _Stream, cp: Checkpoint, decision: Any) -> Any:
        """Check the pause and record ``pause.resume`` (under the stream's lock)."""
        journal = stream.journal
        if journal.broken:
            journal = stream.journal = await journal.reopened()
        else:
            await journal.activate()
        pending = check_pause(journal, cp, self.ledger.store.chain_key)
        journal.add(decision_event(pending, decision, journal.clock()))
        try:
            await journal.flush()
        except SequenceConflictError as exc:
            journal.broken = True
            journal.discard()
            # Another process decided this pause first (R9).
            raise CheckpointError(
                "replayed", "a concurrent decision on this pause was recorded"
            ) from exc
        except Exception:
            journal.broken = True
            journal.discard()
            raise
        return pending


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
