"""The proxy's one connection to the MCP server it stands in front of.

Pattern: an async context manager over the SDK's ``ClientSession`` (the
         ``initialize`` handshake, else 2026-07-28 ``server/discover``) on a
         command (``_stdio``), a URL (``_http``) or a server in this process;
         to a dual-era URL, a 2026-07-28 session beside it (``_open_modern``).
Role:    gateway layer; ``McpProxy`` opens one for its life.
Emits:   nothing; notifications go to ``on_notification`` (list_changed; on a
         2026-era link, from its ``subscriptions/listen`` stream).

Laws: P25 (no start on an unreachable upstream; cancel, progress relayed; a
call in its client's era; a lost listen stream or HTTP session made again), S7, H4.

Why the second session: a 2026-era client's call goes as the request of no
session the upstream answers most cheaply (bench/proxy.py), and it holds the
one ``subscriptions/listen`` stream (a tool's ``notify_tools_changed``
reaches nothing else). Why ``call_raw`` beside ``request``: the SDK's request
path with the result kept as the JSON it was; a plain ``tools/call`` (no
timeout) takes a fast path of ``gateway.fast`` when one is ready: the raw
POST (HTTP) or the raw call on a stdio child's pipes.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
import httpx2
import mcp.types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    SubscriptionLost,
    ToolsListChanged,
    listen,
)
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import HEADER_MISMATCH
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, TypeAdapter

from helmlog.events import HelmlogError

from .._withheld import withheld
from ..fast import FastPosts, HttpLink
from ..fast.stdio_upstream import RawCalls
from ..fast.upstream import handshake_shape
from ._credentials import HttpUpstream
from ._http import HttpClientFactory
from ._pacing import RestartPacing

log = logging.getLogger("helmlog.proxy")

_T = TypeVar("_T")
Notify = Callable[[Any], Awaitable[None]]
Connected = types.InitializeResult | types.DiscoverResult
"""What the upstream said at connect: its capabilities and instructions."""

LISTEN_WAIT_S = 5.0  # how long open waits for an HTTP upstream's GET stream
_RAW: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])

CALL_ERA: ContextVar[str | None] = ContextVar("helmlog_upstream_call_era", default=None)
"""The protocol version of the client whose call is in hand (the proxy sets
it per ``tools/call``): a 2026-era one's call goes to a dual-era upstream as
a 2026-07-28 request; unset, or any other, in the handshake session."""

_NOTES: dict[type[Any], Callable[[], Any]] = {
    ToolsListChanged: types.ToolListChangedNotification,
    PromptsListChanged: types.PromptListChangedNotification,
    ResourcesListChanged: types.ResourceListChangedNotification,
}
_MISSED: dict[str, Callable[[], Any]] = {
    "tools": types.ToolListChangedNotification,
    "prompts": types.PromptListChangedNotification,
    "resources": types.ResourceListChangedNotification,
}

# A listen stream lost is opened again after a wait doubling from the first
# to the cap (P25); a stream held the cap's length resets the wait.
LISTEN_RETRY_S = 0.1
LISTEN_RETRY_CAP_S = 5.0
_LISTEN_LOST = (
    MCPError,
    SubscriptionLost,
    RuntimeError,  # the SDK's transport gone, or its session closed
    TimeoutError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    httpx2.HTTPError,
)


class _RawParams(types.RequestParams):
    """Any method's params, kept whole (``_meta`` parsed as the SDK's)."""

    model_config = ConfigDict(extra="allow")


class _RawRequest(types.Request[_RawParams | None, str]):
    """A request of any method, sent on the SDK's request path."""

    method: str
    params: _RawParams | None = None


class UpstreamError(HelmlogError):
    """The upstream MCP server could not be started or initialized (P25).

    Attributes:
        upstream: what was given (the command, the URL or the object's name).
    """

    code = "ERR_UPSTREAM"
    retryable = True

    def __init__(self, upstream: str, cause: str) -> None:
        super().__init__(
            f"upstream MCP server {upstream} could not be started: {cause}"
        )
        self.upstream = upstream


def describe(upstream: Any) -> str:
    """A short name for error messages and ``tool_source``."""
    if isinstance(upstream, str):
        return upstream
    if isinstance(upstream, (list, tuple)):
        return shlex.join(str(x) for x in upstream)
    name = getattr(upstream, "name", None)
    return name if isinstance(name, str) and name else type(upstream).__name__


def _low_level(server: Any) -> Any:
    """The SDK low-level ``Server`` inside an ``MCPServer``, a FastMCP 4 server
    or an ``mcp_serve`` result."""
    for attr in ("_lowlevel_server", "_mcp_server", "server"):
        inner = getattr(server, attr, None)
        if inner is not None and hasattr(inner, "run"):
            return inner
    return server


@contextlib.asynccontextmanager
async def _in_process(server: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A transport to a server in this process: JSON-RPC over memory streams."""
    low = _low_level(server)
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(
            lambda: low.run(*server_streams, low.create_initialization_options())
        )
        try:
            yield client_streams
        finally:
            tg.cancel_scope.cancel()


class Upstream:
    """One connected client session to the upstream server.

    Args:
        target: a URL (``http://``/``https://``), an ``HttpUpstream`` (a URL
            with headers, credentials and TLS settings), a command as a
            sequence of strings, or an in-process server object.
        on_notification: receives every server notification.
        http_client: makes the ``httpx2.AsyncClient`` of a URL upstream (its
            headers, auth, TLS and proxy settings); the SDK's by default.
        mode: ``"auto"`` (the handshake, else discover), ``"legacy"``, or
            a 2026-era protocol version (discover only).
    """

    def __init__(
        self,
        target: Any,
        on_notification: Notify | None = None,
        *,
        http_client: HttpClientFactory | None = None,
        mode: str = "auto",
    ) -> None:
        self._settings: HttpUpstream | None = None
        if isinstance(target, HttpUpstream):  # a URL with how to reach it (P26)
            if http_client is None:
                self._settings = target
            http_client = http_client or target.client
            target = target.url
        if isinstance(target, str) and not target.startswith(("http://", "https://")):
            raise ValueError(
                "an upstream str is a URL; give a command as a list of strings"
            )
        if isinstance(target, (list, tuple)) and not target:
            raise ValueError("an upstream command needs at least a program")
        self.target = target
        self.label = describe(target)
        self.on_notification = on_notification
        self.http_client = http_client
        self.mode = mode
        self.session: ClientSession | None = None
        self.init: Connected | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        # The fast path of a plain tools/call to an HTTP upstream (``gateway.fast``);
        # tests turn it off to compare it with the SDK path.
        self.fast = True
        self._link: HttpLink | None = None
        self._posts: FastPosts | None = None
        # Its POSTs on ``gateway.fast.wire`` where the wire carries the
        # client's settings whole; off (before ``open``): on httpx2.
        self.wire = True
        # The fast path of a plain tools/call to a stdio upstream (its pipes,
        # ``gateway.fast.stdio_upstream``): opened with ``fast`` on at ``open``.
        self._raw: RawCalls | None = None
        # A dual-era HTTP upstream's 2026-07-28 session (see the module), its
        # fast path, and whether its listen stream is held (acknowledged).
        self.modern: ClientSession | None = None
        self._modern_posts: FastPosts | None = None
        self.listening = False
        # Connections made so far (``open`` counts them), and one heal at a
        # time: callers that saw the same lost session wait for one handshake.
        self.generation = 0
        self._healing = anyio.Lock()
        self._keeper: TaskGroup | None = None
        self._asked = anyio.Event()  # set: ``_keep`` connects again
        self._healed = anyio.Event()  # set by ``_keep`` once it has
        self._heal_error: UpstreamError | None = None
        self._closing = False
        # A command's child (stdio): its end, seen by the SDK path, asks the
        # next request to start it again (the fast path's pipes say ``gone``).
        self._child = isinstance(target, (list, tuple))
        self._ended = False
        # Restarts after an exit or a failed attempt, paced (a crash loop is
        # not started again by every request).
        self._pacing = RestartPacing()
        # Called after a heal (outside its lock): what the old session held
        # that the new one must hold again (the proxy's resource subscriptions).
        self.on_healed: Callable[[], Awaitable[None]] | None = None

    def _transport(self) -> Any:
        target = self.target
        if isinstance(target, str):
            from ._http import upstream_http

            verify, on_status = self._wire_settings()
            self._link = HttpLink(target, self.label, verify, on_status)
            return upstream_http(target, self.label, self.http_client, self._link)
        if isinstance(target, (list, tuple)):
            from ._stdio import upstream_stdio

            return upstream_stdio(target, self.label, fast=self.fast)
        return _in_process(target)

    def _wire_settings(
        self,
    ) -> tuple[ssl.SSLContext | bool | None, Callable[[int, str], None] | None]:
        """P26: the TLS setting of the client the proxy builds (``HttpUpstream``'s,
        or the SDK's default: the system's store), for the fast path's wire;
        ``None`` for a caller's own client factory (its settings are its own)."""
        if not (self.fast and self.wire):
            return None, None
        if self._settings is not None:
            return self._settings._wire_settings()
        if self.http_client is None:
            return True, None
        return None, None

    async def open(self) -> Connected:
        """Start (or connect to) the upstream and negotiate with it.

        The connection lives in a task of its own (``_keep``), entered in the
        caller's task and left by ``close`` in it: a heal closes and opens
        the connection's task groups in the task that entered them (anyio's
        rule), whichever request found the session lost.

        Raises:
            UpstreamError: it did not start or did not answer.
        """
        if self._keeper is not None:
            raise RuntimeError(f"the upstream {self.label} is open already")
        self._heal_error = None
        self._asked, self._healed = anyio.Event(), anyio.Event()
        keeper = anyio.create_task_group()
        await keeper.__aenter__()
        try:
            init: Connected = await keeper.start(self._keep)
        except BaseException:
            keeper.cancel_scope.cancel()
            await keeper.__aexit__(None, None, None)
            raise
        self._keeper = keeper
        return init

    async def close(self) -> None:
        """Close the session and stop the upstream (a subprocess is ended)."""
        keeper, self._keeper = self._keeper, None
        if keeper is None:
            return
        self._closing = True  # ``_keep`` disconnects and returns
        self._asked.set()
        try:
            await keeper.__aexit__(None, None, None)
        finally:
            self._closing = False

    async def _keep(self, *, task_status: TaskStatus[Connected]) -> None:
        """Hold the connection: make it, then make it again each time a heal
        asks (``_heal``), until ``close`` asks it to end. Its task groups are
        left in this task with no scope of ours around them (anyio's rule)."""
        task_status.started(await self._connect())
        try:
            while True:
                await self._asked.wait()
                self._asked = anyio.Event()
                if self._closing:
                    return
                await self._disconnect()
                try:
                    await self._connect()
                    self._heal_error = None
                except UpstreamError as exc:
                    self._heal_error = exc
                self._healed.set()
        finally:
            await self._disconnect()
            if not self._healed.is_set():  # a heal waits: it will not come
                self._heal_error = UpstreamError(self.label, "the proxy closed")
                self._healed.set()

    async def _connect(self) -> Connected:
        """``open``'s connection, made in ``_keep``'s task.

        Raises:
            UpstreamError: it did not start or did not answer.
        """
        try:
            async with contextlib.AsyncExitStack() as opening:
                streams = await opening.enter_async_context(self._transport())
                read, write, raw = (*streams, None)[:3]
                session = await opening.enter_async_context(
                    ClientSession(read, write, message_handler=self._incoming)
                )
                with anyio.fail_after(30):
                    init = await _negotiate(session, self.mode)
                stack = opening.pop_all()
        except Exception as exc:
            # Raised out of the exits (not caught inside them), so a task
            # group the transport opened settles the cancel it sent this
            # task instead of leaving it pending for the caller's next await.
            raise UpstreamError(self.label, _cause(exc)) from exc
        self._stack, self.session, self.init = stack, session, init
        self.generation += 1
        if isinstance(raw, RawCalls):
            # the session's own stamp: the raw request is stamped as its are
            raw.bind(session._stamp, session.protocol_version)
            self._raw = raw
        if self._link is not None:
            if session.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
                # Settled once the SDK's client has its standalone GET stream:
                # a notification sent before it is lost (on either path).
                with anyio.move_on_after(LISTEN_WAIT_S):
                    await self._link.listening.wait()
            self._posts = FastPosts(
                self._link, session.protocol_version, self._incoming
            )
        try:
            if isinstance(init, types.DiscoverResult):  # a 2026-era link: listen on it
                await self._listen_on(stack, session, init.capabilities)
            elif self._link is not None and self.mode == "auto":
                await self._open_modern(stack)
        except Exception as exc:
            await self._disconnect()
            raise UpstreamError(self.label, _cause(exc)) from exc
        return init

    async def _open_modern(self, stack: contextlib.AsyncExitStack) -> None:
        """Reach a dual-era upstream in the 2026 era too: a second session on
        the same client, and its listen stream. An upstream that speaks only
        the handshake (its ``server/discover`` refused) keeps the one session."""
        link = self._link
        assert link is not None and link.client is not None
        async with contextlib.AsyncExitStack() as opening:
            try:
                streams = await opening.enter_async_context(
                    streamable_http_client(str(self.target), http_client=link.client)
                )
                modern = await opening.enter_async_context(ClientSession(*streams))
                with anyio.fail_after(LISTEN_WAIT_S):
                    found = await modern.discover()
            except (MCPError, RuntimeError, TimeoutError, httpx2.HTTPError) as exc:
                log.info(
                    "proxy: upstream %s is reached in the handshake era only (%s)",
                    self.label,
                    _cause(exc),
                )
                return
            await self._listen_on(opening, modern, found.capabilities)
            stack.push_async_callback(opening.pop_all().aclose)
        self.modern = modern
        if self.fast:
            self._modern_posts = FastPosts(
                link, modern.protocol_version, self._incoming, stamp=modern._stamp
            )

    async def _listen_on(
        self,
        stack: contextlib.AsyncExitStack,
        session: ClientSession,
        caps: types.ServerCapabilities,
    ) -> None:
        """Open the ``subscriptions/listen`` stream of the list_changed kinds
        ``caps`` announces on ``session``, held until ``stack`` closes."""
        kinds = _list_changed_kinds(caps)
        if kinds:
            group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(group.cancel_scope.cancel)  # first out: the stream
            self.listening = await group.start(self._listen, session, kinds)

    async def _listen(
        self,
        session: ClientSession,
        kinds: dict[str, bool],
        *,
        task_status: TaskStatus[bool] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hold the ``subscriptions/listen`` stream; each change event goes to
        ``on_notification`` as the handshake era's notification of it.

        A stream that ends (the upstream restarts, the connection breaks) is
        opened again after a wait doubling from ``LISTEN_RETRY_S`` to
        ``LISTEN_RETRY_CAP_S`` (back to the first after a stream held
        ``LISTEN_RETRY_CAP_S``); the loss is logged once (WARNING), the
        recovery once (INFO). Changes may have been missed meanwhile, so a
        re-opened stream counts as one change of each kind (``_missed``). A
        first stream that does not open is not retried (``listening`` False).
        Cancelled when the upstream closes (its task group's scope)."""
        wait = LISTEN_RETRY_S
        opened = False  # a stream was acknowledged once: retry from now on
        while True:
            held: float | None = None
            try:
                async with listen(
                    session,
                    tools_list_changed=kinds.get("tools", False),
                    prompts_list_changed=kinds.get("prompts", False),
                    resources_list_changed=kinds.get("resources", False),
                ) as events:
                    held = anyio.current_time()
                    self.listening = True
                    if opened:
                        log.info(
                            "proxy: upstream %s's listen stream is open again",
                            self.label,
                        )
                        await self._missed(kinds)
                    else:
                        opened = True
                        task_status.started(True)
                    async for event in events:
                        await self._event(event)
                cause = "closed by the upstream"
            except _LISTEN_LOST as exc:
                cause = _cause(exc)
            if not opened:
                log.warning(
                    "proxy: upstream %s's listen stream did not open: %s",
                    self.label,
                    cause,
                )
                task_status.started(False)
                return
            if held is not None:  # a stream was held, and is lost
                self.listening = False
                log.warning(
                    "proxy: upstream %s's listen stream ended (%s); opening it again",
                    self.label,
                    cause,
                )
                if anyio.current_time() - held >= LISTEN_RETRY_CAP_S:
                    wait = LISTEN_RETRY_S
            else:
                log.debug(
                    "proxy: upstream %s's listen stream is not open yet: %s",
                    self.label,
                    cause,
                )
            await anyio.sleep(wait)
            wait = min(wait * 2, LISTEN_RETRY_CAP_S)

    async def _missed(self, kinds: dict[str, bool]) -> None:
        """A re-opened stream: one list_changed of each kind listened for (the
        cached schemas cleared, every live session told; a client re-lists)."""
        for kind in kinds:
            await self._incoming(_MISSED[kind]())

    async def _event(self, event: ServerEvent) -> None:
        make = _NOTES.get(type(event))
        if make is not None:
            await self._incoming(make())

    async def _disconnect(self) -> None:
        """Close the session and stop the upstream, in ``_keep``'s task."""
        stack, self._stack, self.session = self._stack, None, None
        self._ended = False
        self._posts = self._modern_posts = self.modern = None
        self.listening = False
        if self._link is not None and self._link.wire is not None:
            await self._link.wire.aclose()
        if self._raw is not None:  # as the session's closing fails its own calls
            self._raw.fail_all("Connection closed")
        self._raw = None
        if stack is None:
            return
        try:
            await stack.aclose()
        except* (
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            httpx2.TransportError,
        ) as group:
            # The SDK's HTTP client may still be handing a reply (a JSON body
            # of a call abandoned by timeout or cancel) to the session it just
            # closed, or report the POST of an upstream that died; its pending
            # calls have failed already, and the connection is closed.
            log.info("proxy: upstream %s closed with %s", self.label, _cause(group))

    @property
    def server_name(self) -> str:
        """The upstream's own name (its ``serverInfo``), else its label (S2)."""
        info = None if self.session is None else self.session.server_info
        return info.name if info is not None and info.name else self.label

    @property
    def protocol_version(self) -> str | None:
        """The protocol version negotiated with the upstream."""
        return None if self.session is None else self.session.protocol_version

    async def _incoming(self, message: Any) -> None:
        if isinstance(message, Exception) or self.on_notification is None:
            return
        if _on_a_listen_stream(message):
            return  # the session's copy of a listen frame: ``_event`` relays it
        await self.on_notification(message)

    def _live(self) -> ClientSession:
        if self.session is None:
            raise withheld(  # H4: the label may hold a token
                "the upstream MCP server is not connected", detail=self.label
            )
        return self.session

    async def request(
        self,
        request: Any,
        result_type: Any,
        progress: ProgressFnT | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Send one client request upstream and return its typed result.

        Cancelling the caller relays ``notifications/cancelled`` upstream (the
        SDK's dispatcher does, for a request it wrote). An HTTP upstream that
        no longer knows the proxy's session is shaken hands with again and
        the request sent once more (``_healing_once``).

        Raises:
            MCPError: the upstream's own error, unchanged, or a transport
                failure (connection closed, timeout) as the SDK reports it.
        """
        return await self._healing_once(
            lambda: self._request(request, result_type, progress, timeout_s)
        )

    async def _request(
        self,
        request: Any,
        result_type: Any,
        progress: ProgressFnT | None,
        timeout_s: float | None,
    ) -> Any:
        session = self._live()
        if (
            self.modern is not None
            and isinstance(request, types.CallToolRequest)
            and CALL_ERA.get() in MODERN_PROTOCOL_VERSIONS
        ):
            params = request.params.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            raw = await self._modern_call(params, progress, timeout_s)
            return _validated(result_type, raw)
        posts = self._posts
        if (
            posts is not None
            and self.fast
            and isinstance(request, types.CallToolRequest)
            and result_type is types.CallToolResult
            and progress is None
            and timeout_s is None
            and posts.ready
        ):
            params = request.params.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            raw = await posts.call(params)
            return types.CallToolResult.model_validate(raw, by_name=False)
        piped = self._raw
        if (
            piped is not None
            and self.fast
            and isinstance(request, types.CallToolRequest)
            and result_type is types.CallToolResult
            and timeout_s is None
            and piped.ready
        ):
            params = request.params.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            out = await piped.call(params, progress)
            return types.CallToolResult.model_validate(out, by_name=False)
        return await self._sent(session, request, result_type, progress, timeout_s)

    async def _sent(
        self,
        session: ClientSession,
        request: Any,
        result_type: Any,
        progress: ProgressFnT | None,
        timeout_s: float | None,
    ) -> Any:
        """``session.send_request``, its going-away failures withheld (H4)."""
        try:
            return await session.send_request(
                request,
                result_type,
                request_read_timeout_seconds=timeout_s,
                progress_callback=progress,
            )
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED and exc.data is None:
                self._ended = self._child  # a child's pipes closed: it ended
                raise withheld(  # H4: the label and the cause only in the log
                    "the upstream MCP server went away",
                    detail=f"{self.label}: {exc.message}",
                ) from exc
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._ended = self._child
            raise withheld(  # H4: the label and the cause only in the log
                "the upstream MCP server went away",
                detail=f"{self.label}: {_cause(exc)}",
            ) from exc

    async def call_raw(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout_s: float | None = None,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one request upstream as is; return its ``result`` as JSON.

        The SDK's own request path (its stamping, its per-version result
        check), with no params or result model of the method built: the
        proxy hands on what it was given and what came back.

        Raises:
            MCPError: as ``request`` (the upstream judges the params).
        """
        # ``_healing_once`` inline: this is every call's path (no closure)
        generation = self.generation
        raw = self._raw
        if (
            self._heal_error is not None
            or self._healing.locked()
            or self._ended
            or (raw is not None and raw.gone is not None)
        ):
            generation = await self._healthy()
        try:
            return await self._call_raw(method, params, timeout_s, progress)
        except MCPError:
            if not self._lost(generation):
                raise
        await self._heal(generation)
        return await self._call_raw(method, params, timeout_s, progress)

    async def _call_raw(
        self,
        method: str,
        params: dict[str, Any] | None,
        timeout_s: float | None,
        progress: ProgressFnT | None,
    ) -> dict[str, Any]:
        if (
            self.modern is not None
            and method == "tools/call"
            and isinstance(params, dict)
            and CALL_ERA.get() in MODERN_PROTOCOL_VERSIONS
        ):
            return await self._modern_call(params, progress, timeout_s)
        posts = self._posts
        if (
            posts is not None
            and self.fast
            and method == "tools/call"
            and isinstance(params, dict)
            and progress is None
            and timeout_s is None
            and posts.ready
        ):
            return await posts.call(params)
        piped = self._raw
        if (
            piped is not None
            and self.fast
            and method == "tools/call"
            and isinstance(params, dict)
            and timeout_s is None
            and piped.ready
        ):
            return await piped.call(params, progress)
        raw = (
            None if params is None else _RawParams.model_validate(params, by_name=False)
        )
        request = _RawRequest(method=method, params=raw)
        out: dict[str, Any] = await self._request(request, _RAW, progress, timeout_s)
        return out

    async def _healing_once(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """``attempt()``; where it failed because an HTTP upstream answered
        404 to the proxy's session id, a new session and ``attempt()`` once
        more. Why a second send is safe: a server answers 404 to a request
        of a session it does not know without running it, and the MCP spec
        asks a client to start a new session then (Streamable HTTP, session
        management). A heal that failed is tried again by the next request."""
        generation = await self._healthy()
        try:
            return await attempt()
        except MCPError:
            if not self._lost(generation):
                raise
        await self._heal(generation)
        return await attempt()

    async def _healthy(self) -> int:
        """The connection's generation, once a heal under way has ended (a
        request during it would find no session), and after one more where
        the last failed (the upstream was down)."""
        if self._healing.locked():
            async with self._healing:
                pass
        if self._keeper is not None and (
            self._heal_error is not None or self._exited()
        ):
            await self._heal(self.generation)
        return self.generation

    def _exited(self) -> bool:
        """Whether a stdio upstream's child has ended (its pipes closed): the
        next request starts it again; the calls it had are not sent again
        (each failed as the upstream gone: one may have run)."""
        raw = self._raw
        return self._ended or (raw is not None and raw.gone is not None)

    def _lost(self, generation: int) -> bool:
        """Whether the upstream answered 404 to this connection's session
        (and no heal has made another since ``generation``)."""
        link = self._link
        return (
            link is not None
            and link.lost is not None
            and (self.generation == generation)
        )

    async def _heal(self, generation: int) -> None:
        """Connect again (a new handshake, its fast paths, the 2026-era
        session and its listen stream), unless another caller already did
        since ``generation``; then tell every live session that each list
        may have changed (the upstream may be another build).

        Raises:
            MCPError: the upstream could not be reached again (withheld, H4).
        """
        async with self._healing:
            if self.generation != generation:
                return  # healed meanwhile
            if self._keeper is None:
                raise withheld(  # H4: the label only in the log
                    "the upstream MCP server is not connected", detail=self.label
                )
            exited = self._exited()
            if exited or self._heal_error is not None:
                self._paced()
            if exited:
                log.warning("proxy: upstream %s exited; starting it again", self.label)
            elif self._heal_error is not None:
                log.warning(
                    "proxy: upstream %s could not be reached at the last attempt "
                    "(%s); trying again",
                    self.label,
                    self._heal_error,
                )
            else:
                log.warning(
                    "proxy: upstream %s no longer knows the proxy's session "
                    "(HTTP 404); starting a new one",
                    self.label,
                )
            self._healed = anyio.Event()
            self._asked.set()
            await self._healed.wait()
            failed, init = self._heal_error, self.init
            if failed is not None or init is None:
                raise withheld(  # H4: the label and the cause only in the log
                    "the upstream MCP server went away", detail=str(failed)
                ) from failed
            log.info("proxy: upstream %s has a new session", self.label)
        kinds = _list_changed_kinds(init.capabilities)
        if init.capabilities.tools is not None:
            kinds["tools"] = True  # the cached schemas go (P27) in any case
        if self.on_healed is not None:
            await self.on_healed()
        await self._missed(kinds)

    def _paced(self) -> None:
        """A restart of an upstream that failed begins now, or the request
        is refused while its wait lasts (``_pacing``).

        Raises:
            MCPError: withheld (H4): the upstream is not started again yet.
        """
        wait_s = self._pacing.wait_s()
        if wait_s > 0:
            raise withheld(  # H4: the label and the wait only in the log
                "the upstream MCP server went away",
                detail=f"{self.label}: it failed again soon after its last "
                f"start; starting it again in {wait_s:.1f} s",
            )
        self._pacing.started()

    async def _modern_call(
        self,
        params: dict[str, Any],
        progress: ProgressFnT | None,
        timeout_s: float | None,
    ) -> dict[str, Any]:
        """A 2026-era client's ``tools/call`` as a 2026-07-28 request: the raw
        POST where it is plain, else the 2026-era session's; its result in the
        handshake era's shape. A tool whose ``Mcp-Param-*`` headers the session
        did not know (``HEADER_MISMATCH``) is listed again and the call sent
        once more, as the SDK's ``Client.call_tool`` recovers."""
        try:
            return await self._modern_once(params, progress, timeout_s)
        except MCPError as exc:
            if exc.code != HEADER_MISMATCH or self.modern is None:
                raise
            await self._relist(params.get("name"))
            return await self._modern_once(params, progress, timeout_s)

    async def _modern_once(
        self,
        params: dict[str, Any],
        progress: ProgressFnT | None,
        timeout_s: float | None,
    ) -> dict[str, Any]:
        posts, modern = self._modern_posts, self.modern
        assert modern is not None
        if posts is not None and progress is None and timeout_s is None:
            return await posts.call(params)
        raw = _RawParams.model_validate(params, by_name=False)
        request = _RawRequest(method="tools/call", params=raw)
        out = await self._sent(modern, request, _RAW, progress, timeout_s)
        return handshake_shape(out)

    async def _relist(self, name: Any) -> None:
        """List the 2026-era session's tools until ``name`` (its header map)."""
        modern = self.modern
        assert modern is not None
        cursor: str | None = None
        while True:
            asked = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await modern.list_tools(params=asked)
            cursor = page.next_cursor
            if cursor is None or any(t.name == name for t in page.tools):
                return

    async def notify(self, notification: Any) -> None:
        """Forward a client notification upstream (best effort)."""
        await self._live().send_notification(notification)


def _validated(result_type: Any, raw: dict[str, Any]) -> Any:
    if isinstance(result_type, TypeAdapter):
        return result_type.validate_python(raw, by_name=False)
    return result_type.model_validate(raw, by_name=False)


async def _negotiate(session: ClientSession, mode: str) -> Connected:
    """Connect in the era the upstream speaks: ``"auto"`` shakes hands
    (``initialize``) and, if the upstream refuses the handshake (a
    2026-only server), discovers; ``"legacy"`` only shakes hands; a 2026-era
    version only discovers.

    Why the handshake first where both are spoken: the capabilities the
    proxy mirrors, and a 2025-era client's calls, are that session's; a
    2026-era client's calls and the listen stream go on a second session
    (``Upstream._open_modern``).
    """
    if mode == "legacy":
        return await session.initialize()
    if mode != "auto":
        return await session.discover()
    try:
        return await session.initialize()
    except MCPError:  # a 2026-only server: no handshake
        return await session.discover()


def _on_a_listen_stream(message: Any) -> bool:
    """Whether a notification is a listen stream's frame (its subscription id
    in ``_meta``), which the session also hands its message handler."""
    meta = getattr(getattr(message, "params", None), "meta", None)
    return isinstance(meta, dict) and SUBSCRIPTION_ID_META_KEY in meta


def _list_changed_kinds(caps: types.ServerCapabilities) -> dict[str, bool]:
    """The ``listen`` filter of the list_changed kinds the upstream announces."""
    kinds = {
        "tools": caps.tools is not None and bool(caps.tools.list_changed),
        "prompts": caps.prompts is not None and bool(caps.prompts.list_changed),
        "resources": caps.resources is not None and bool(caps.resources.list_changed),
    }
    return {k: True for k, on in kinds.items() if on}


def _cause(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _cause(exc.exceptions[0])
    return str(exc) or type(exc).__name__


def command_of(spec: str | Sequence[str]) -> list[str]:
    """A command line (``"python server.py"``) as an argument list."""
    if isinstance(spec, str):
        return shlex.split(spec)
    return [str(x) for x in spec]
