"""Raw JSON-RPC calls to the upstream, beside the SDK's ``ClientSession``, on its wire.

Pattern: a table of pending calls keyed by ids of our own (``hl-1``, ...; the
         SDK's are ints, so they never collide): our replies resolve their
         waiters, our progress goes to its call's callback, every other
         message goes on to the ``ClientSession`` unchanged.
Role:    gateway layer; ``Upstream.call_raw`` for stdio and in-process
         upstreams; ``RoutedReads`` fronts an in-process transport.
Emits:   nothing.

Laws: P25 (a cancelled raw call is cancelled upstream; its progress reaches
its callback), issue 10 item 8, H4 (``went_away`` withholds label and cause).

Why the SDK's error shapes are kept (``McpError``; 408 on a timeout): callers
treat ``request`` and ``call_raw`` alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from mcp.shared.session import ProgressFnT

from .._withheld import withheld

PREFIX = "hl-"
Send = Callable[[dict[str, Any]], Awaitable[None]]


class RawCaller(Protocol):
    """What each transport offers ``Upstream.call_raw``."""

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None,
        timeout_s: float | None = None,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]: ...


def went_away(label: str, cause: str) -> McpError:
    """The error of a call whose upstream connection failed or died under it.

    H4: the client is told that it went away and an error id; the upstream's
    label (a URL or command line may hold a token) and the cause are logged.
    """
    return withheld("the upstream MCP server went away", detail=f"{label}: {cause}")


def timed_out(method: str, timeout_s: float) -> McpError:
    """The error ``send_request`` raises when its read timeout passes."""
    return McpError(
        types.ErrorData(
            code=408,
            message=f"Timed out while waiting for response to {method}. "
            f"Waited {timeout_s} seconds.",
        )
    )


def error_of(error: Any) -> McpError:
    """The upstream's own error object (a dict off the wire) as an ``McpError``."""
    if isinstance(error, types.ErrorData):
        return McpError(error)
    try:
        return McpError(types.ErrorData.model_validate(error))
    except ValueError:
        return McpError(
            types.ErrorData(
                code=types.INTERNAL_ERROR,
                message=f"the upstream sent a malformed error: {error!r}",
            )
        )


def request_of(
    rid: str, method: str, params: dict[str, Any] | None, progress: bool
) -> dict[str, Any]:
    """The JSON-RPC request; with ``progress``, ``_meta.progressToken`` is the id."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if progress:
        params = dict(params or {})
        params["_meta"] = {**(params.get("_meta") or {}), "progressToken": rid}
    if params is not None:
        message["params"] = params
    return message


def cancel_of(rid: str) -> dict[str, Any]:
    """The ``notifications/cancelled`` naming our request ``rid`` (P25)."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": rid, "reason": "cancelled by client"},
    }


class Waiter:
    """One pending raw call: its outcome, and progress not yet relayed."""

    __slots__ = ("done", "error", "notes", "progress", "result", "wake")

    def __init__(self, progress: ProgressFnT | None) -> None:
        self.progress = progress
        self.wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done = False
        self.result: dict[str, Any] | None = None
        self.error: McpError | None = None
        self.notes: list[tuple[float, float | None, str | None]] = []

    def _wake(self) -> None:
        if not self.wake.done():
            self.wake.set_result(None)

    def resolve(self, result: Any, error: McpError | None) -> None:
        if not self.done:
            self.done, self.error = True, error
            self.result = result if isinstance(result, dict) else {}
            self._wake()

    def note(self, progress: Any, total: Any, message: Any) -> None:
        self.notes.append((progress, total, message))
        self._wake()

    async def outcome(self) -> dict[str, Any]:
        while True:
            await self.wake
            if self.notes:
                # a fresh future first: a note or the reply may land meanwhile
                self.wake = asyncio.get_running_loop().create_future()
                notes, self.notes = self.notes, []
                assert self.progress is not None
                for note in notes:
                    await self.progress(*note)
            if self.done:
                if self.error is not None:
                    raise self.error
                assert self.result is not None
                return self.result


class RawCalls:
    """The pending raw calls of one upstream connection.

    Args:
        label: the upstream's name, for error messages.
        send: writes one JSON-RPC message (a dict) upstream.
    """

    def __init__(self, label: str, send: Send) -> None:
        self.label = label
        self.send = send
        self.pending: dict[str, Waiter] = {}
        self.gone: str | None = None  # why the connection ended, once it has
        self._n = 0

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None,
        timeout_s: float | None = None,
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its ``result``; see ``Upstream.call_raw``."""
        if self.gone is not None:
            raise went_away(self.label, self.gone)
        self._n += 1
        rid = f"{PREFIX}{self._n}"
        waiter = Waiter(progress)
        self.pending[rid] = waiter
        sent = False
        try:
            await self.send(request_of(rid, method, params, progress is not None))
            sent = True
            if timeout_s:
                with anyio.fail_after(timeout_s):
                    return await waiter.outcome()
            return await waiter.outcome()
        except TimeoutError:
            raise timed_out(method, timeout_s or 0) from None
        except asyncio.CancelledError:
            if sent and not waiter.done:  # it reached the upstream: cancel it there
                with anyio.CancelScope(shield=True):
                    await self._send_quietly(cancel_of(rid))
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise went_away(self.label, str(exc) or type(exc).__name__) from exc
        finally:
            self.pending.pop(rid, None)

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return  # the connection is gone, and with it the call

    def take(self, message: Any) -> bool:
        """Route one decoded message (a dict) if it is ours; whether it was."""
        if type(message) is not dict:
            return False
        rid = message.get("id")
        if type(rid) is str:
            if "method" in message:
                return False  # a server request that happens to use a string id
            waiter = self.pending.get(rid)
            if waiter is None:
                return rid.startswith(PREFIX)  # a late reply to a forgotten call
            if "error" in message:
                waiter.resolve(None, error_of(message["error"]))
            else:
                waiter.resolve(message.get("result"), None)
            return True
        if rid is None and message.get("method") == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if type(params) is dict else None
            waiter = self.pending.get(token) if type(token) is str else None
            if waiter is not None and waiter.progress is not None:
                assert params is not None
                waiter.note(
                    params.get("progress"), params.get("total"), params.get("message")
                )
                return True
        return False

    def take_message(self, message: SessionMessage) -> bool:
        """``take`` for a parsed ``SessionMessage`` (the in-process transport)."""
        root = message.message.root
        if isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
            if type(root.id) is not str:
                return False
            waiter = self.pending.get(root.id)
            if waiter is None:
                return root.id.startswith(PREFIX)
            if isinstance(root, types.JSONRPCError):
                waiter.resolve(None, McpError(root.error))
            else:
                waiter.resolve(root.result, None)
            return True
        if (
            isinstance(root, types.JSONRPCNotification)
            and root.method == "notifications/progress"
        ):
            return self.take(root.model_dump(by_alias=True, exclude_none=True))
        return False

    def fail_all(self, cause: str) -> None:
        """The connection ended: every pending call fails now, and later ones too."""
        if self.gone is None:
            self.gone = cause
        for waiter in list(self.pending.values()):
            waiter.resolve(None, went_away(self.label, cause))


class RoutedReads:
    """A ``ClientSession`` read stream with the raw calls' messages taken out.

    It wraps the transport's receive stream; the ``ClientSession`` reads
    through it (``async for``, ``receive``, ``async with``), so a reply to
    one of our ids is resolved in the session's own receive loop and never
    reaches the session.
    """

    def __init__(self, inner: Any, calls: RawCalls) -> None:
        self.inner = inner
        self.calls = calls

    def __aiter__(self) -> RoutedReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def receive(self) -> Any:
        while True:
            try:
                message = await self.inner.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                self.calls.fail_all("the connection closed")
                raise
            if isinstance(message, SessionMessage) and self.calls.take_message(message):
                continue
            return message

    async def aclose(self) -> None:
        self.calls.fail_all("the connection closed")
        await self.inner.aclose()

    def close(self) -> None:
        self.calls.fail_all("the connection closed")
        self.inner.close()

    async def __aenter__(self) -> RoutedReads:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
