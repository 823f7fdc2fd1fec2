"""Serve governed tools over MCP: the chain goes to the served surface.

Pattern: a thin MCP adapter (the SDK's low-level ``Server``) over the
         runtime's one tool-call pipeline under the ``SERVED`` rules.
Role:    gateway layer; ``mcp_serve(tools, ...)`` returns a ``ServedTools``
         served over stdio, Streamable HTTP or any pair of MCP streams.
Emits:   ``middleware.decision`` rows and facts, one stream per MCP session.

Laws: S1, S2, S3 (``tool.dispatched`` before ``execute``, R7), S4, S5, S6
(a failed append refuses with LEDGER_UNAVAILABLE), G7, G24, G25, G55, G57,
R4, R5.

Why the handlers build whole results (the v2 SDK's ``on_*`` handlers): S3
validates after before-tool, S4 answers every refusal as ``is_error=True`` and
S6 answers an unrecorded call with an MCP error; nothing is left to the SDK.
Why a serving session is keyed on the connection's channel: v2 builds a
fresh ``ServerSession`` per request. A handshake-era connection (stdio, a
Streamable HTTP ``Mcp-Session-Id``) and a 2026-07-28 duplex stream (stdio)
keep one channel for their life; a 2026-07-28 Streamable HTTP request has no
session at all (the protocol has none), so each is its own serving session.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.shared.exceptions import MCPError

from helmlog.events import (
    EventStore,
    LedgerAppendError,
    MemoryEventStore,
    ToolDispatched,
)
from helmlog.runtime import Tool, wall_clock_ms
from helmlog.runtime.lowlevel import (
    SERVED,
    CallSite,
    CredentialResolver,
    Entry,
    Journal,
    Link,
    Listeners,
    Ran,
    Refused,
    ToolPipeline,
    as_tool_link,
    tool_link_problem,
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
        async with self.lock:
            try:
                if self.journal.broken:
                    self.journal = await self.journal.reopened()
                self.journal.add(
                    ToolDispatched(
                        tool_name=tool.name,
                        tool_call_id=tool_call_id,
                        args=args,
                        attempt=attempt,
                    )
                )
                await self.journal.flush()
            except Exception as exc:
                self.journal.broken = True
                self.journal.discard()
                raise _ledger_error(str(exc) or type(exc).__name__) from exc


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
        links = list(tool_middleware)
        for obj in links:
            problem = tool_link_problem(obj)
            if problem is not None:
                raise ValueError(f"mcp_serve: {problem}")
        self.links: tuple[Link, ...] = tuple(as_tool_link(obj) for obj in links)
        self.store: EventStore = store if store is not None else MemoryEventStore()
        self.credentials = credentials
        self.clock = clock
        self.pipeline = ToolPipeline(
            self.tools, self.links, SERVED, credentials=credentials, clock=clock
        )
        self.listeners = Listeners()
        self._counter = itertools.count(1)
        self._sessions: weakref.WeakKeyDictionary[Any, _Session] = (
            weakref.WeakKeyDictionary()
        )
        self.session_ids: list[str] = []
        self.server: Server[Any] = Server(
            name, on_list_tools=self._list_tools, on_call_tool=self._handle_call
        )

    def __repr__(self) -> str:
        return f"ServedTools(name={self.name!r}, tools={list(self.tools)!r})"

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
            session_id = f"mcp-{self.name}-{uuid.uuid4().hex}"
            session = _Session(
                Journal(self.store, session_id, self.listeners, self.clock)
            )
            if key is not None:
                self._sessions[key] = session
            self.session_ids.append(session_id)
        return session

    # -- calls ------------------------------------------------------------

    def _identity(self) -> Mapping[str, Any] | None:
        """S2: the caller identity the transport resolved, else ``None``."""
        token = get_access_token()
        if token is None:
            return None
        return {"client_id": token.client_id, "scopes": list(token.scopes)}

    async def _handle_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args: Any = params.arguments if params.arguments is not None else {}
        text, is_error = await self.call(params.name, args, ctx)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            is_error=is_error,
        )

    async def call(
        self,
        tool_name: str,
        args: Any,
        ctx: ServerRequestContext[Any] | None = None,
    ) -> tuple[str, bool]:
        """Serve one call (S3); return what the client receives and whether it
        is a tool error (S4). ``ctx`` names the MCP connection whose serving
        session records it; without one the call gets a session of its own."""
        t = self.pipeline.lookup(tool_name)
        if isinstance(t, Refused):
            return t.text, True
        session = self._session(ctx)
        site = CallSite(
            tool_name=t.name,
            tool_source=t.source,
            tool_call_id=f"mcp-{self.name}-{next(self._counter)}",
            iteration=0,
            history=(),
            identity=self._identity(),
        )
        out = await self.pipeline.run(t, site, Entry.fresh(args), session)
        if isinstance(out, Ran):
            return out.text, out.error or out.denied
        # Under SERVED nothing pauses: an ask is a denial, ask_human an error (S5).
        assert isinstance(out, Refused)
        return out.text, True


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
