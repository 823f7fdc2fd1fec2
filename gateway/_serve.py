"""Serve governed tools over MCP: the chain goes to the served surface.

Pattern: a thin MCP adapter (the SDK's low-level ``Server``) over the
         runtime's one tool-call pipeline under ``TASK_RULES`` (``SERVED``
         whose asks pause: the pause is recorded, the tool waits).
Role:    gateway layer; ``mcp_serve(tools, ...)`` returns a ``ServedTools``
         served over stdio, Streamable HTTP or any pair of MCP streams.
Emits:   ``middleware.decision`` rows and facts, one stream per MCP session;
         an asking call's pause in a stream of its own.

Laws: S1–S6 (S4: an ask is a tool error naming the pending ask; S6:
LEDGER_UNAVAILABLE), S9 (valid structured content or a recorded refusal),
S10 (an ask waits as a task), G7, G24, G25, G55, G57, R1, R4, R5, R7.

Why the handlers build whole results: S3 validates after before-tool, S4
answers refusals as ``is_error=True``, S6 an unrecorded call as an MCP error.
Why a serving session is keyed on the connection's channel: v2 rebuilds
``ServerSession`` per request; a handshake session or a 2026-07-28 duplex
stream keeps one channel, and a 2026-07-28 HTTP request (no session in that
revision) stands alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, cast

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    Event,
    EventStore,
    LedgerAppendError,
    MemoryEventStore,
    MiddlewareDecision,
    SequenceConflictError,
    ToolDispatched,
    ToolEnded,
)
from helmlog.events.lowlevel import compact_json
from helmlog.runtime import (
    Tool,
    wall_clock_ms,
)
from helmlog.runtime.lowlevel import (
    CallSite,
    CredentialResolver,
    Entry,
    Journal,
    Link,
    Listeners,
    Outcome,
    Paused,
    Ran,
    Refused,
    ToolPipeline,
    as_tool_link,
    tool_link_problem,
)

from ._structured import OUTPUT_SCHEMA_RULE, OutputSchema, judge
from ._tasks import (
    ASK_META,
    TASK_RULES,
    TASKS_EXTENSION,
    TaskParams,
    TaskView,
    check_pause,
    decision_event,
    declared,
    not_found,
    pause_event,
    pending_text,
    read_task,
    task_id,
    tool_error,
)

LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE"


class _Session:
    """One MCP session's ledger: its journal and the lock that orders appends.

    The pipeline's ``CallRecorder`` for the calls served on it.
    """

    __slots__ = ("journal", "lock")

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.lock = asyncio.Lock()

    async def file(self, rows: list[Any]) -> None:
        """Append rows and their facts before anything follows from them (S6, R5).

        Raises:
            MCPError: the append failed; ``data.rejection_reason`` is
                ``LEDGER_UNAVAILABLE`` and nothing after this point happens.
        """
        if not rows:
            return
        async with self.lock:
            try:
                if self.journal.broken:
                    self.journal = await self.journal.reopened()
                self.journal.file(rows)
                await self.journal.flush()
            except LedgerAppendError as exc:
                raise _ledger_error(str(exc)) from exc
            except Exception as exc:
                # The store failed while re-reading the stream: still unrecorded.
                self.journal.broken = True
                self.journal.discard()
                raise _ledger_error(str(exc) or type(exc).__name__) from exc

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        """Append ``tool.dispatched`` immediately before ``execute`` (R7).

        Raises:
            MCPError: the append failed (``LEDGER_UNAVAILABLE``); the tool
                does not run.
        """
        await self.append(
            ToolDispatched(
                tool_name=tool.name,
                tool_call_id=tool_call_id,
                args=args,
                attempt=attempt,
            )
        )

    async def append(self, event: Event) -> None:
        """Append one event and flush it before anything follows from it (R5).

        Raises:
            MCPError: the append failed (``LEDGER_UNAVAILABLE``).
        """
        async with self.lock:
            try:
                if self.journal.broken:
                    self.journal = await self.journal.reopened()
                self.journal.add(event)
                await self.journal.flush()
            except Exception as exc:
                self.journal.broken = True
                self.journal.discard()
                raise _ledger_error(str(exc) or type(exc).__name__) from exc


class _Recorder:
    """One call's recorder: files into its session and remembers the last
    after-tool transform (its link and value), which S9 judges.

    With ``divert``, a call whose before-tool walk asks moves, before its
    rows are filed, to the session ``divert`` opens: a session has one
    pending pause at a time (R1), so an asking call's pause is a session of
    its own (S4, S10), and the connection's session goes on.
    """

    __slots__ = ("changed_by", "divert", "session", "value")

    def __init__(
        self, session: _Session, divert: Callable[[], _Session] | None = None
    ) -> None:
        self.session = session
        self.divert = divert
        self.changed_by: str | None = None
        self.value: Any = None

    def diverted(self) -> _Session:
        """The asking call's own session (opened now if not yet)."""
        if self.divert is not None:
            self.session, self.divert = self.divert(), None
        return self.session

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        if self.divert is not None and any(
            r.outcome == "ask" and r.moment == "before-tool" for r in rows
        ):
            self.diverted()
        await self.session.file(rows)
        for row in rows:
            if row.moment == "after-tool" and row.changed:
                self.changed_by, self.value = row.middleware, row.after

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        await self.session.dispatched(tool, tool_call_id, args, attempt)


class ServedTools:
    """Governed tools served over MCP (what ``mcp_serve`` returns).

    Attributes:
        name: the server's name (``tool_call_id`` is ``mcp-<name>-<n>``).
        server: the SDK's low-level ``Server``.
        store: the event store every serving session's stream lives in.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        name: str,
        tool_middleware: Iterable[Any] = (),
        store: EventStore | None = None,
        credentials: CredentialResolver | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("mcp_serve needs a non-empty name")
        self.name = name
        self.tools: dict[str, Tool] = {}
        self.output_schemas: dict[str, OutputSchema] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise ValueError(f"mcp_serve serves Tool objects (got {t!r})")
            if t.check_in is not None:
                raise ValueError(
                    f"mcp_serve cannot serve tool '{t.name}': it declares check_in, "
                    "and MCP has no pause to carry its question"
                )
            if t.name in self.tools:
                raise ValueError(f"mcp_serve was given two tools named '{t.name}'")
            self.tools[t.name] = t
            if t.output_schema is not None:
                self.output_schemas[t.name] = OutputSchema(t.output_schema, t.name)
        links = list(tool_middleware)
        for obj in links:
            problem = tool_link_problem(obj)
            if problem is not None:
                raise ValueError(f"mcp_serve: {problem}")
        self.links: tuple[Link, ...] = tuple(as_tool_link(obj) for obj in links)
        self.store: EventStore = store if store is not None else MemoryEventStore()
        self.credentials = credentials
        self.clock = clock
        self.task_pipeline = ToolPipeline(
            self.tools, self.links, TASK_RULES, credentials=credentials, clock=clock
        )
        self.listeners = Listeners()
        self._counter = itertools.count(1)
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = (
            weakref.WeakKeyDictionary()
        )
        self._resuming: dict[str, asyncio.Lock] = {}
        self.session_ids: list[str] = []
        self.server: Server[Any] = Server(
            name,
            on_list_tools=self._list_tools,
            on_call_tool=cast(Any, self._handle_call),
        )
        # S10: the 2026-07-28 tasks extension, advertised on server/discover.
        self.server.extensions[TASKS_EXTENSION] = {}
        self.server.add_request_handler("tasks/get", TaskParams, self._task_get)
        self.server.add_request_handler("tasks/update", TaskParams, self._task_ack)
        self.server.add_request_handler("tasks/cancel", TaskParams, self._task_ack)

    def __repr__(self) -> str:
        return f"ServedTools(name={self.name!r}, tools={list(self.tools)!r})"

    def on_store(self, store: EventStore) -> ServedTools:
        """The same tools, chain, name and credentials, serving on ``store``.

        What ``--agent module:attr`` makes of an ``mcp_serve`` result
        (``helmlog serve``, ``helmlog approve``): the command opens the
        store, and the served tools decide their asks on it (S10).
        """
        return ServedTools(
            self.tools.values(),
            name=self.name,
            tool_middleware=[link.source for link in self.links],
            store=store,
            credentials=self.credentials,
            clock=self.clock,
        )

    # -- transports -------------------------------------------------------

    async def run(self, read_stream: Any, write_stream: Any) -> None:
        """Serve one MCP session over a pair of SDK streams until it closes."""
        await self.server.run(
            read_stream, write_stream, self.server.create_initialization_options()
        )

    @contextlib.asynccontextmanager
    async def memory_streams(self) -> AsyncIterator[tuple[Any, Any]]:
        """The client's ends of one in-memory MCP connection to these tools.

        A transport for the SDK's ``Client`` (and ``mcp_client(server=...)``):
        real JSON-RPC over memory streams, so the connection is one serving
        session in either protocol era (S6). Leaving the block ends it.
        """
        from mcp.shared.memory import create_client_server_memory_streams

        async with (
            create_client_server_memory_streams() as (client, server),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self.run, *server)
            try:
                yield client
            finally:
                tg.cancel_scope.cancel()

    async def serve_stdio(self) -> None:
        """Serve one MCP session over this process's stdin/stdout (S6: one stream)."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await self.run(read_stream, write_stream)

    def http_app(self, *, json_response: bool = False) -> Any:
        """A Starlette ASGI app serving these tools at ``/mcp`` (Streamable HTTP).

        Each MCP session it holds is a serving session with its own stream
        (S6). Its lifespan runs the SDK's session manager.
        """
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from starlette.applications import Starlette
        from starlette.routing import Mount

        manager = StreamableHTTPSessionManager(self.server, json_response=json_response)

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[None]:
            async with manager.run():
                yield

        return Starlette(
            routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan
        )

    @contextlib.asynccontextmanager
    async def http_server(
        self, host: str = "127.0.0.1", port: int = 0
    ) -> AsyncIterator[str]:
        """Serve over Streamable HTTP inside the block; yields the endpoint URL."""
        from ._uvicorn import Server, server_config, serving

        server = Server(server_config(self.http_app(), host=host, port=port))
        async with serving(server, name="mcp_serve") as bound:
            yield f"http://{host}:{bound}/mcp/"

    async def serve_http(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        """Serve over Streamable HTTP on ``host:port`` until cancelled."""
        async with self.http_server(host, port):
            await anyio.sleep_forever()

    def on(self, event_type: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        """Listen to the serving sessions' recorded events (``"*"`` for all)."""
        return self.listeners.on(event_type, fn)

    # -- listing ----------------------------------------------------------

    async def _list_tools(
        self,
        ctx: ServerRequestContext[Any],
        params: types.PaginatedRequestParams | None,
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=dict(t.input_schema),
                    output_schema=(
                        dict(t.output_schema) if t.output_schema is not None else None
                    ),
                )
                for t in self.tools.values()
            ]
        )

    # -- the ledger -------------------------------------------------------

    def _session(self, ctx: ServerRequestContext[Any] | None) -> _Session:
        """The serving session of the MCP connection this request arrived on."""
        key = _connection_key(ctx)
        session = self._sessions.get(key) if key is not None else None
        if session is None:
            session = self._new_session()
            if key is not None:
                self._sessions[key] = session
        return session

    def _new_session(self) -> _Session:
        session_id = f"mcp-{self.name}-{uuid.uuid4().hex}"
        self.session_ids.append(session_id)
        return _Session(Journal(self.store, session_id, self.listeners, self.clock))

    # -- calls ------------------------------------------------------------

    def _identity(self) -> Mapping[str, Any] | None:
        """S2: the caller identity the transport resolved, else ``None``."""
        token = get_access_token()
        if token is None:
            return None
        return {"client_id": token.client_id, "scopes": list(token.scopes)}

    def _site(self, t: Tool) -> CallSite:
        return CallSite(
            tool_name=t.name,
            tool_source=t.source,
            tool_call_id=f"mcp-{self.name}-{next(self._counter)}",
            iteration=0,
            history=(),
            identity=self._identity(),
        )

    async def _handle_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        args: Any = params.arguments if params.arguments is not None else {}
        ask_id = _ask_of(params.meta)
        if ask_id is not None:
            return await self.outcome(ask_id, params.name, args)
        return await self.call(params.name, args, ctx, as_task=declared(ctx))

    async def call(
        self,
        tool_name: str,
        args: Any,
        ctx: ServerRequestContext[Any] | None = None,
        *,
        as_task: bool = False,
    ) -> types.CallToolResult | dict[str, Any]:
        """Serve one call (S3); return what the client receives (S4, S9, S10).

        ``ctx`` names the MCP connection whose serving session records it;
        without one the call gets a session of its own. Where a rule asks,
        the pause is recorded in a session of the call's own (R1) and the
        client gets a task (``as_task``: it declared the extension, S10) or
        a tool error naming the pending ask (S4).
        """
        t = self.task_pipeline.lookup(tool_name)
        if isinstance(t, Refused):
            return tool_error(t.text)
        recorder = _Recorder(self._session(ctx), divert=self._new_session)
        site = self._site(t)
        out = await self.task_pipeline.run(t, site, Entry.fresh(args), recorder)
        if isinstance(out, Paused):
            view = await self._paused(recorder.diverted(), site, out)
            if as_task:
                return view.wire(result_type="task")
            return tool_error(
                pending_text(view.task_id, out.ask.question, out.ask.middleware)
            )
        return await self._answer(t, site, out, recorder)

    async def call_as_task(
        self,
        tool_name: str,
        args: Any,
        ctx: ServerRequestContext[Any] | None = None,
    ) -> types.CallToolResult | dict[str, Any]:
        """``call`` for a client that takes tasks (S10): an ask is a task."""
        return await self.call(tool_name, args, ctx, as_task=True)

    async def _paused(self, session: _Session, site: CallSite, out: Paused) -> TaskView:
        event = pause_event(session.journal, site, out)
        await session.append(event)
        return await read_task(
            self.store,
            task_id(session.journal.session_id, site.tool_call_id),
            self._prefix,
        )

    async def outcome(
        self, ask_id: str, tool_name: str, args: Any
    ) -> types.CallToolResult:
        """A call that names a pending or decided ask (``_meta`` ``ASK_META``, S4).

        Never runs the tool: the answer is what the stream recorded for the
        asking call once a person decided it (``stream.tool_end``), else a
        tool error saying it still waits. The call must name the asking
        call's tool and come from its caller (S2); its arguments are not
        compared, as the pause holds them as the chain left them (G60),
        which may not be what the client sent.

        Raises:
            MCPError: ``INVALID_PARAMS`` for an id that names no ask here.
        """
        view = await read_task(self.store, ask_id, self._prefix)
        del args  # the id names the call; its arguments are the pause's (G60)
        if view.tool_name != tool_name:
            return tool_error(
                f"ask '{ask_id}' was made for another call: it is read back "
                f"by a call of tool '{view.tool_name}'"
            )
        if not _same_caller(view.identity, self._identity()):
            return tool_error(f"ask '{ask_id}' was made by another caller")
        if view.status == "completed" and view.result is not None:
            return types.CallToolResult.model_validate(view.result)
        if view.decided is None:
            return tool_error(f"ask '{ask_id}' is not decided yet: {view.message}")
        return tool_error(
            f"ask '{ask_id}' is decided; its call has not ended: {view.message}"
        )

    async def _answer(
        self, t: Tool, site: CallSite, out: Outcome, recorder: _Recorder
    ) -> types.CallToolResult:
        """What the client receives for a finished call (S4), judged by S9."""
        if isinstance(out, Refused):
            return tool_error(out.text)
        assert isinstance(out, Ran)
        if out.error or out.denied:
            return tool_error(out.text)
        schema = self.output_schemas.get(t.name)
        if schema is None:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=out.text)]
            )
        value = recorder.value if recorder.changed_by is not None else out.result
        structured, refusal = judge(schema, value, recorder.changed_by)
        if refusal is not None:
            # S9: a result that breaks the advertised schema is withheld, and
            # the refusal is a row of the call's session (fails closed, S6).
            await recorder.session.file(
                [
                    MiddlewareDecision(
                        middleware=OUTPUT_SCHEMA_RULE,
                        moment="after-tool",
                        at="tool",
                        iteration=0,
                        outcome="deny",
                        changed=False,
                        tool_name=t.name,
                        tool_call_id=site.tool_call_id,
                        why=refusal,
                    )
                ]
            )
            return tool_error(refusal)
        # The text block is the structured value's JSON (the spec's SHOULD),
        # however the tool's own value would render.
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=compact_json(structured))],
            structured_content=structured,
        )

    # -- tasks (S10) --------------------------------------------------------

    @property
    def _prefix(self) -> str:
        return f"mcp-{self.name}-"

    async def _task_get(
        self, ctx: ServerRequestContext[Any], params: TaskParams
    ) -> dict[str, Any]:
        require_client_extension(ctx, TASKS_EXTENSION)
        view = await read_task(self.store, params.task_id, self._prefix)
        if not _same_caller(view.identity, self._identity()):
            raise not_found(params.task_id)  # S2: another caller's task
        return view.wire(result_type="complete")

    async def _task_ack(
        self, ctx: ServerRequestContext[Any], params: TaskParams
    ) -> dict[str, Any]:
        """``tasks/update`` and ``tasks/cancel``: acknowledged (SEP-2663).

        A served task asks the client nothing (its question is for a
        person, on the approvals page), so an update has nothing to
        answer; a cancel is cooperative and the pause stays for the person
        to decide (a client does not withdraw an ask it is not the judge of).
        """
        require_client_extension(ctx, TASKS_EXTENSION)
        await read_task(self.store, params.task_id, self._prefix)
        return {}

    async def resume(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str:
        """Decide a served call's pause and carry the call out (S10).

        What ``decide_pending`` hands a resumer (``helmlog approve``'s
        ``--agent`` function may return an ``mcp_serve`` result): the pause
        is checked against the verified stream (R9), ``pause.resume`` is
        recorded, the call walks on from the link after the asker (G62) or
        is refused (G64), and what the client receives is recorded as the
        task's end (``stream.tool_end``). Returns that text.

        Raises:
            CheckpointError: the checkpoint is not this session's pending
                pause (``stale``, ``replayed``, ``tampered``).
            DecisionRequiredError: ``decision`` is not a ``CheckInDecision``.
            LedgerAppendError: the decision could not be recorded (R5).
        """
        del traceparent, tracestate  # a served session has no turn to trace
        cp = Checkpoint.coerce(checkpoint)
        lock = self._resuming.setdefault(cp.session_id, asyncio.Lock())
        try:
            async with lock:
                return await self._resume(cp, decision)
        finally:
            if not lock.locked():
                self._resuming.pop(cp.session_id, None)

    async def _resume(self, cp: Checkpoint, decision: Any) -> str:
        """``resume`` under its session's lock."""
        journal = Journal(self.store, cp.session_id, self.listeners, self.clock)
        await journal.activate()
        pending = check_pause(journal, cp, self.store.chain_key)
        t = self.task_pipeline.lookup(pending.tool_name)
        if isinstance(t, Refused):
            raise CheckpointError(
                "tampered", f"no tool '{pending.tool_name}' is served here"
            )
        journal.add(decision_event(pending, decision, self.clock()))
        try:
            await journal.flush()
        except SequenceConflictError as exc:
            # Another process decided this pause first (R9).
            raise CheckpointError(
                "replayed", "a concurrent decision on this pause was recorded"
            ) from exc
        session = _Session(journal)
        site = CallSite(
            tool_name=t.name,
            tool_source=t.source,
            tool_call_id=pending.tool_call_id,
            iteration=pending.iteration,
            history=(),
            # S10: the caller the pause recorded (S2), as the asker's link saw it.
            identity=journal.folder.identity,
        )
        recorder = _Recorder(session)
        out = await self.task_pipeline.resume(t, site, pending, decision, recorder)
        if isinstance(out, Paused):
            # A later link asks again: the task waits on that question.
            await session.append(pause_event(journal, site, out))
            return out.ask.question
        answer = await self._answer(t, site, out, recorder)
        await session.append(
            ToolEnded(
                tool_name=t.name,
                tool_call_id=site.tool_call_id,
                result=answer.model_dump(by_alias=True, mode="json", exclude_none=True),
                error=bool(answer.is_error),
                duration_ms=out.duration_ms if isinstance(out, Ran) else 0,
            )
        )
        return _text(answer)


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _ask_of(meta: Mapping[str, Any] | None) -> str | None:
    """The ask a call names in its ``_meta`` (``ASK_META``), if any.

    Raises:
        MCPError: ``INVALID_PARAMS`` when the value is not a non-empty string.
    """
    if not meta or ASK_META not in meta:
        return None
    value = meta[ASK_META]
    if not isinstance(value, str) or not value:
        raise MCPError(
            types.INVALID_PARAMS,
            f"_meta '{ASK_META}' names an ask by its id (a non-empty string)",
        )
    return value


def _same_caller(recorded: Any, now: Mapping[str, Any] | None) -> bool:
    """Whether the caller now is the one a pause recorded (S2's client id)."""
    if recorded is None:
        return True
    if now is None or not isinstance(recorded, Mapping):
        return False
    return bool(recorded.get("client_id") == now.get("client_id"))


def _connection_key(ctx: ServerRequestContext[Any] | None) -> object | None:
    """What stays the same for every request of one MCP connection, or ``None``.

    The SDK names no public handle for the connection behind a request
    (``ServerSession`` is rebuilt per request; ``Connection`` is reached
    through it). A connection with a standing channel (handshake era; a
    2026-07-28 duplex stream) is keyed on that channel; a born-ready
    single-exchange connection (2026-07-28 Streamable HTTP, in-process
    direct dispatch) has none, and each of its requests stands alone.
    """
    if ctx is None:
        return None
    connection = getattr(ctx.session, "_connection", None)
    if connection is None or not connection.has_standalone_channel:
        return None
    outbound: object = connection.outbound
    return outbound


def _ledger_error(cause: str) -> MCPError:
    return MCPError(
        types.INTERNAL_ERROR,
        f"the serving ledger could not record this call: {cause}",
        {"rejection_reason": LEDGER_UNAVAILABLE},
    )


def mcp_serve(
    tools: Iterable[Tool],
    *,
    name: str,
    tool_middleware: Iterable[Any] = (),
    store: EventStore | None = None,
    credentials: CredentialResolver | None = None,
) -> ServedTools:
    """Serve ``tools`` over MCP with ``tool_middleware`` as their chain (S1–S6).

    Args:
        tools: the tools to serve; none may declare ``check_in`` (S5).
        name: the server's name, also in each ``tool_call_id``.
        tool_middleware: tool links, walked exactly as an agent walks them.
        store: where the serving sessions' streams go (a ``MemoryEventStore``
            by default).
        credentials: resolves the secrets a tool declares (G57).

    Raises:
        ValueError: a tool declares ``check_in``, two tools share a name, or a
            link has no name or no tool hook.
    """
    return ServedTools(
        tools,
        name=name,
        tool_middleware=tool_middleware,
        store=store,
        credentials=credentials,
    )
