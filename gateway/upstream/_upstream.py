"""The proxy's one connection to the MCP server it stands in front of.

Pattern: an async context manager over the SDK's ``ClientSession`` with one
         of three transports (a command, a URL, or an in-process server);
         ``call_raw`` sends a dict with an id of our own (``_raw``).
Role:    gateway layer; ``McpProxy`` opens one for its life.
Emits:   nothing; notifications go to ``on_notification`` (list_changed).

Laws: P25 (no start against an upstream that does not initialize:
``UpstreamError``; cancel and progress relayed), S7, H4 (a client hears
neither the label nor the cause; both are logged under the error id).

Why requests are sent raw (``send_request``, ``call_raw``): a proxy forwards
what the client sent and returns what the upstream answered, and cheaply.
"""

from __future__ import annotations

import contextlib
import contextvars
import shlex
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, cast

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from mcp.shared.session import ProgressFnT

from helmlog.events import HelmlogError

from .._withheld import withheld
from ._raw import RawCaller, RawCalls, RoutedReads

Notify = Callable[[types.ServerNotification], Awaitable[None]]


class _Sending:
    """The request being sent from this task, and the id it went out with."""

    __slots__ = ("id",)

    def __init__(self) -> None:
        self.id: types.RequestId | None = None


_SENDING: contextvars.ContextVar[_Sending | None] = contextvars.ContextVar(
    "helmlog_proxy_sending", default=None
)


class _NotingIds:
    """The upstream write stream; notes the JSON-RPC id each request went out with.

    ``ClientSession.send_request`` writes its request from the caller's own
    task, so the ``_Sending`` slot that task set receives the id the SDK
    chose; a cancel then names exactly that request upstream (P25), read off
    the wire rather than off the SDK's private counter.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def send(self, message: SessionMessage) -> None:
        await self.inner.send(message)
        root = message.message.root
        slot = _SENDING.get()
        if (
            slot is not None
            and slot.id is None
            and isinstance(root, types.JSONRPCRequest)
        ):
            slot.id = root.id

    async def aclose(self) -> None:
        await self.inner.aclose()

    def close(self) -> None:
        self.inner.close()

    async def __aenter__(self) -> _NotingIds:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _noting_ids(write: Any) -> MemoryObjectSendStream[SessionMessage]:
    # ClientSession uses only send, aclose and ``async with`` of its stream.
    return cast("MemoryObjectSendStream[SessionMessage]", _NotingIds(write))


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
    """The SDK low-level ``Server`` inside a FastMCP or ``mcp_serve`` object."""
    inner = getattr(server, "_mcp_server", None)  # FastMCP keeps it here
    if inner is not None:
        return inner
    inner = getattr(server, "server", None)  # ServedTools.server
    return inner if inner is not None else server


class Upstream:
    """One initialized client session to the upstream server.

    Args:
        target: a URL (``http://``/``https://``), a command as a sequence of
            strings, or an in-process server object.
        on_notification: receives every server notification.
    """

    def __init__(self, target: Any, on_notification: Notify | None = None) -> None:
        if isinstance(target, str) and not target.startswith(("http://", "https://")):
            raise ValueError(
                "an upstream str is a URL; give a command as a list of strings"
            )
        self.target = target
        self.label = describe(target)
        self.on_notification = on_notification
        self.session: ClientSession | None = None
        self.init: types.InitializeResult | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._raw: RawCaller | None = None

    async def open(self) -> types.InitializeResult:
        """Start (or connect to) the upstream and initialize it.

        Raises:
            UpstreamError: it did not start or did not answer initialize.
        """
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            read, write, raw = await self._streams(stack)
            if raw is None:  # a transport of SessionMessages: route on its reads
                raw = RawCalls(self.label, _sender(write))
                read = RoutedReads(read, raw)
            session = await stack.enter_async_context(
                ClientSession(
                    cast("Any", read),
                    _noting_ids(write),
                    message_handler=self._incoming,
                )
            )
            with anyio.fail_after(30):
                init = await session.initialize()
            ready = getattr(raw, "ready", None)
            if ready is not None:  # the transport settles after initialize
                await ready()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await _close_quietly(stack)
            if isinstance(exc, Exception):
                raise UpstreamError(self.label, _cause(exc)) from exc
            raise
        self._stack, self.session, self.init = stack, session, init
        self._raw = raw
        return init

    async def close(self) -> None:
        """Close the session and stop the upstream (a subprocess is ended)."""
        stack, self._stack, self.session = self._stack, None, None
        self._raw = None
        if stack is not None:
            await stack.aclose()

    async def _streams(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any, Any]:
        """``(read, write, raw)``: raw is ``None`` where ``RoutedReads`` routes."""
        target = self.target
        if isinstance(target, str):
            from ._http import upstream_http

            return await stack.enter_async_context(upstream_http(target, self.label))
        if isinstance(target, (list, tuple)):
            from ._stdio import upstream_stdio

            return await stack.enter_async_context(upstream_stdio(target, self.label))
        from mcp.shared.memory import create_client_server_memory_streams

        server = _low_level(target)
        client_streams, server_streams = await stack.enter_async_context(
            create_client_server_memory_streams()
        )
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)
        tg.start_soon(
            lambda: server.run(*server_streams, server.create_initialization_options())
        )
        return (*client_streams, None)

    async def _incoming(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and self.on_notification:
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
        result_type: type[Any],
        progress: ProgressFnT | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Send one client request upstream and return its typed result.

        Cancelling the caller relays ``notifications/cancelled`` upstream.

        Raises:
            McpError: the upstream's own error, unchanged, or a transport
                failure as ``INTERNAL_ERROR``.
        """
        session = self._live()
        # A request parsed from the wire keeps its envelope (``jsonrpc``,
        # ``id``) as extra fields; send only what the request says.
        request = type(request)(method=request.method, params=request.params)
        sending = _Sending()
        token = _SENDING.set(sending)
        try:
            return await session.send_request(
                types.ClientRequest(request),
                result_type,
                request_read_timeout_seconds=(
                    timedelta(seconds=timeout_s) if timeout_s else None
                ),
                progress_callback=progress,
            )
        except anyio.get_cancelled_exc_class():
            if sending.id is not None:  # it reached the upstream: cancel it there
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await session.send_notification(
                        types.ClientNotification(
                            types.CancelledNotification(
                                params=types.CancelledNotificationParams(
                                    requestId=sending.id, reason="cancelled by client"
                                )
                            )
                        )
                    )
            raise
        except McpError:
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise withheld(  # H4: the label and the cause only in the log
                "the upstream MCP server went away",
                detail=f"{self.label}: {_cause(exc)}",
            ) from exc
        finally:
            _SENDING.reset(token)

    async def call_raw(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout_s: float | None = None,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one JSON-RPC request upstream as is; return its raw ``result``.

        It goes on the connection the ``ClientSession`` uses, with an id of
        our own (``hl-N``), and its reply never reaches the session; nothing
        is validated with pydantic on the way (the result is JSON decoded
        with msgspec). With ``progress``, ``_meta.progressToken`` is set to
        the id and the upstream's progress for it reaches ``progress``.
        Cancelling the caller sends ``notifications/cancelled`` upstream.

        Raises:
            McpError: the upstream's own error (code, message, data); a
                transport failure or an upstream gone mid-call as
                ``INTERNAL_ERROR``; 408 once ``timeout_s`` has passed.
        """
        raw: RawCaller | None = self._raw
        if raw is None:
            self._live()
            raise AssertionError("unreachable: a live session has raw calls")
        return await raw.call(method, params, timeout_s, progress)

    async def notify(self, notification: Any) -> None:
        """Forward a client notification upstream (best effort)."""
        await self._live().send_notification(types.ClientNotification(notification))


def _sender(write: Any) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """Raw messages as ``SessionMessage`` objects on a transport's write stream."""

    async def send(message: dict[str, Any]) -> None:
        await write.send(SessionMessage(types.JSONRPCMessage.model_validate(message)))

    return send


def _cause(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _cause(exc.exceptions[0])
    return str(exc) or type(exc).__name__


async def _close_quietly(stack: contextlib.AsyncExitStack) -> None:
    try:
        await stack.aclose()
    except Exception:  # noqa: BLE001 — the open already failed; report that
        return
    except BaseExceptionGroup:
        return


def command_of(spec: str | Sequence[str]) -> list[str]:
    """A command line (``"python server.py"``) as an argument list."""
    if isinstance(spec, str):
        return shlex.split(spec)
    return [str(x) for x in spec]
