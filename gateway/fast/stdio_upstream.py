"""The fast path of a plain ``tools/call`` to a stdio upstream: raw on its pipes.

Pattern: ``open_pipes`` spawns the child as the SDK's ``stdio_client`` does
         (environment, process group, shutdown) and reads its stdout: a line
         with one of our ids (``"hl-``) is decoded by msgspec for its waiter;
         every other line goes to the SDK's ``ClientSession`` as the SDK's
         transport parses it. ``RawCalls.call`` stamps a request with the
         session's own stamp (either era), checks it as ``send_request`` does.
Role:    gateway layer; ``Upstream`` opens it for a command upstream when its
         ``fast`` is on; everything but a plain call is the SDK's.
Emits:   nothing; a cancelled call sends ``notifications/cancelled``.

Laws: P25 (answers, errors, cancels, progress and a dying upstream are the
SDK path's: test_upstream_raw.py, test_proxy_fast.py compare them), H4.
Why: the SDK's client costs pipe tasks, stream hops, pydantic both ways:
0.3–0.6 ms off a 5 ms stdio call (bench/proxy.py). The SDK's steps are
called, not copied (``_stamp``, ``_clamp_inbound_ttl``,
``_later_revision_fields``: private in mcp 2.3; the differential tests
catch a change).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client import session as _session
from mcp.client.stdio import get_default_environment
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    jsonrpc_message_adapter,
)

from .._withheld import withheld
from .upstream import check_result

PREFIX = "hl-"
MARK = b'"hl-'
TERMINATION_S = 2.0  # as the SDK's stdio_client waits, before each escalation
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
Stamp = Callable[[dict[str, Any], CallOptions], None]


def went_away(label: str, cause: str) -> MCPError:
    """The SDK path's error when the connection closes under a call (H4:
    the label and the cause only in the log; ``Upstream.request`` says it)."""
    return withheld("the upstream MCP server went away", detail=f"{label}: {cause}")


class Waiter:
    """One pending raw call: its outcome, and progress not yet relayed."""

    __slots__ = ("done", "error", "notes", "progress", "result", "wake")

    def __init__(self, progress: ProgressFnT | None) -> None:
        self.progress = progress
        self.wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done = False
        self.result: Any = None
        self.error: MCPError | None = None
        self.notes: list[tuple[Any, Any, Any]] = []

    def _wake(self) -> None:
        if not self.wake.done():
            self.wake.set_result(None)

    def resolve(self, result: Any, error: MCPError | None) -> None:
        if not self.done:
            self.done, self.result, self.error = True, result, error
            self._wake()

    def note(self, progress: Any, total: Any, message: Any) -> None:
        self.notes.append((progress, total, message))
        self._wake()

    async def outcome(self) -> Any:
        while True:
            await self.wake
            if self.notes:  # a fresh future first: more may land meanwhile
                self.wake = asyncio.get_running_loop().create_future()
                notes, self.notes = self.notes, []
                assert self.progress is not None
                for note in notes:
                    await self.progress(*note)
            if self.done:
                if self.error is not None:
                    raise self.error
                return self.result


def _error_of(error: Any) -> MCPError:
    """The upstream's error object as the dispatcher raises it."""
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        message = error.get("message")
        return MCPError(
            error["code"],
            message if isinstance(message, str) else "",
            error.get("data"),
        )
    return MCPError(INTERNAL_ERROR, f"the upstream sent a malformed error: {error!r}")


class RawCalls:
    """The pending raw ``tools/call`` of one stdio upstream (see the module).

    Args:
        label: the upstream's name, for the log (H4).
        write: writes bytes (whole lines) on the child's stdin.
    """

    def __init__(self, label: str, write: Callable[[bytes], Awaitable[None]]) -> None:
        self.label = label
        self.write = write
        self.pending: dict[str, Waiter] = {}
        self.gone: str | None = None  # why the connection ended, once it has
        self.stamp: Stamp | None = None  # the ClientSession's, once negotiated
        self.version: str | None = None
        self.taken = 0  # calls this path took (the differential tests)
        self._n = 0

    def bind(self, stamp: Stamp, version: str | None) -> None:
        """The session's stamp and negotiated version: the path is ready."""
        self.stamp, self.version = stamp, version

    @property
    def ready(self) -> bool:
        return self.stamp is not None and self.version is not None

    async def call(
        self, params: dict[str, Any], progress: ProgressFnT | None = None
    ) -> dict[str, Any]:
        """One ``tools/call``: its result, checked as ``send_request`` checks it.

        Raises:
            MCPError: the upstream's error, unchanged; the connection closed
                (the SDK path's "went away", H4); ``pydantic.ValidationError``
                for a result the negotiated version does not allow.
        """
        assert self.stamp is not None and self.version is not None
        if self.gone is not None:
            raise went_away(self.label, self.gone)
        self._n += 1
        rid = f"{PREFIX}{self._n}"
        self.taken += 1
        data: dict[str, Any] = {"method": "tools/call", "params": dict(params)}
        self.stamp(data, {})
        if progress is not None:
            meta = data["params"].get("_meta")
            data["params"]["_meta"] = {**(meta or {}), "progressToken": rid}
        waiter = Waiter(progress)
        self.pending[rid] = waiter
        sent = False
        try:
            await self.write(_encode({"jsonrpc": "2.0", "id": rid, **data}) + b"\n")
            sent = True
            raw = await waiter.outcome()
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED and exc.data is None:
                # as ``Upstream.request`` says the SDK path's (H4)
                raise went_away(self.label, exc.message) from exc
            raise
        except anyio.get_cancelled_exc_class():
            if sent and not waiter.done:  # it reached the upstream: cancel it there
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await self._cancel(rid)
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise went_away(self.label, str(exc) or type(exc).__name__) from exc
        finally:
            self.pending.pop(rid, None)
        if not isinstance(raw, dict):
            raise MCPError(INTERNAL_ERROR, "the upstream answered no result")
        return self._checked(raw)

    def _checked(self, raw: dict[str, Any]) -> dict[str, Any]:
        """``send_request``'s own steps on a result (its helpers, its order)."""
        assert self.version is not None
        _session._clamp_inbound_ttl(raw)
        with contextlib.suppress(KeyError):  # a method unknown at this version
            check_result(self.version, raw)
        foreign = _session._later_revision_fields("tools/call", self.version)
        if not foreign.isdisjoint(raw):
            raw = {key: value for key, value in raw.items() if key not in foreign}
        return raw

    async def _cancel(self, rid: str) -> None:
        note: dict[str, Any] = {
            "method": "notifications/cancelled",
            "params": {"requestId": rid, "reason": "caller cancelled"},
        }
        assert self.stamp is not None
        self.stamp(note, {})
        try:
            await self.write(_encode({"jsonrpc": "2.0", **note}) + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return  # the connection is gone, and with it the call

    def take(self, message: Any) -> bool:
        """Route one decoded message if it is ours; whether it was."""
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
                waiter.resolve(None, _error_of(message["error"]))
            else:
                waiter.resolve(message.get("result"), None)
            return True
        if rid is None and message.get("method") == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if type(params) is dict else None
            waiter = self.pending.get(token) if type(token) is str else None
            if waiter is not None and waiter.progress is not None:
                assert isinstance(params, dict)
                waiter.note(
                    params.get("progress"), params.get("total"), params.get("message")
                )
                return True
        return False

    def fail_all(self, cause: str) -> None:
        """The connection ended: every pending call fails now, later ones too."""
        if self.gone is None:
            self.gone = cause
        for waiter in list(self.pending.values()):
            waiter.resolve(None, went_away(self.label, cause))


def _parsed(line: bytes | str) -> SessionMessage | Exception:
    """A line for the session, parsed as the SDK's stdio transport parses it."""
    try:
        return SessionMessage(
            jsonrpc_message_adapter.validate_json(line, by_name=False)
        )
    except ValueError as exc:
        return exc


class _Pipes(asyncio.SubprocessProtocol):
    """The child's pipes: lines out to their readers, flow control on stdin."""

    def __init__(self, to_session: MemoryObjectSendStream[Any], label: str) -> None:
        self.calls = RawCalls(label, self.write)
        self.to_session = to_session
        self.tail = b""
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stdin: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stdin = cast(asyncio.SubprocessTransport, transport).get_pipe_transport(0)
        self.stdin = cast(asyncio.WriteTransport, stdin)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        if self.tail:
            data = self.tail + data
        lines = data.split(b"\n")
        self.tail = lines.pop()
        for line in lines:
            self.line(line)

    def line(self, line: bytes) -> None:
        if not line.strip():
            return
        if MARK in line:
            try:
                decoded = _decode(line)
            except msgspec.DecodeError:
                decoded = None
            if self.calls.take(decoded):
                return
        self.deliver(_parsed(line))

    def deliver(self, item: SessionMessage | Exception) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.to_session.send_nowait(item)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:  # stdout ended: every reply that will come has come
            if self.tail:
                self.line(self.tail)
                self.tail = b""
            self.calls.fail_all("Connection closed")
            self.to_session.close()
        elif fd == 0:
            self.resume_writing()

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.drained = None

    async def write(self, data: bytes) -> None:
        stdin = self.stdin
        if stdin is None or stdin.is_closing():
            raise anyio.BrokenResourceError("the upstream's stdin is closed")
        stdin.write(data)
        if self.paused:
            if self.drained is None:
                self.drained = asyncio.get_running_loop().create_future()
            await self.drained


class _SessionWrites:
    """The ``ClientSession``'s write stream: each message one line on stdin,
    serialized as the SDK's stdio transport serializes it."""

    def __init__(self, pipes: _Pipes) -> None:
        self.pipes = pipes

    async def send(self, message: SessionMessage) -> None:
        body = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        await self.pipes.write(body.encode() + b"\n")

    async def aclose(self) -> None:
        return  # stdin is closed by the link's shutdown, after the session

    def close(self) -> None:
        return

    async def __aenter__(self) -> _SessionWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return


def _errlog() -> Any:
    """Our stderr for the child's, when it is a real file; else inherited."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return sys.stderr


@contextlib.asynccontextmanager
async def open_pipes(
    command: Sequence[str], label: str
) -> AsyncIterator[tuple[Any, Any, RawCalls]]:
    """``(read, write, raw)``: streams for a ``ClientSession`` and the raw calls."""
    if not command:
        raise ValueError("an upstream command needs at least a program")
    # Unbounded: lines are handed over from the pipe's read callback, which
    # cannot wait; the session only parses and dispatches, so it holds a burst.
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](
        math.inf
    )
    pipes = _Pipes(to_session, label)
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.subprocess_exec(
            lambda: pipes,
            str(command[0]),
            *[str(a) for a in command[1:]],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=_errlog(),
            env=get_default_environment(),
            start_new_session=True,
        )
    except BaseException:
        to_session.close()
        read.close()
        raise
    try:
        yield read, _SessionWrites(pipes), pipes.calls
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(transport, pipes)
        pipes.calls.fail_all("Connection closed")
        to_session.close()
        read.close()


async def _stop(transport: asyncio.SubprocessTransport, pipes: _Pipes) -> None:
    """Close stdin, then SIGTERM the group, then SIGKILL it (the SDK's order)."""
    try:
        stdin = transport.get_pipe_transport(0)
        if stdin is not None:
            stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(transport.get_pid(), sig)
            with anyio.move_on_after(TERMINATION_S):
                await asyncio.shield(pipes.exited)
                return
    finally:
        transport.close()


__all__ = ["RawCalls", "open_pipes", "went_away"]
