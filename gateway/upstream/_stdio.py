"""The proxy's stdio link to its upstream: the child's pipes, read and written directly.

Pattern: an ``asyncio.SubprocessProtocol`` over the child's pipes: a line
         holding one of our ids (``"hl-``) is taken by the raw calls' table
         (msgspec, resolved in the read callback); every other line is parsed
         for the SDK's ``ClientSession``; all writes are whole stdin lines.
Role:    gateway layer; ``Upstream`` opens it for a command upstream.
Emits:   nothing; the child's stderr is passed through to ours.

Laws: P25 (a command that does not start or answer is an ``UpstreamError``;
an upstream that exits fails every pending call at once), issue 10 item 8.

Why not the SDK's ``stdio_client``: two memory streams, two tasks and a
pydantic parse per line; its environment, process group, stderr and shutdown
(close stdin, SIGTERM after 2 s, SIGKILL) are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import anyio
import mcp.types as types
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ._raw import RawCalls

TERMINATION_S = 2.0  # as the SDK's stdio_client waits, before each escalation
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
MARK = b'"hl-'


class _Pipes(asyncio.SubprocessProtocol):
    """The child's pipes: lines out to their readers, flow control on stdin."""

    def __init__(
        self, calls: RawCalls, to_session: MemoryObjectSendStream[Any]
    ) -> None:
        self.calls = calls
        self.to_session = to_session
        self.tail = b""
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stdin: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Duck-typed: uvloop's subprocess and pipe transports do not subclass
        # asyncio's, though they speak the same protocol.
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
        try:
            if MARK in line:
                decoded = _decode(line)
                if self.calls.take(decoded):
                    return
                message = types.JSONRPCMessage.model_validate(decoded)
            else:
                message = types.JSONRPCMessage.model_validate_json(line)
        except (msgspec.DecodeError, ValidationError) as exc:
            self.deliver(exc)  # as the SDK's transport hands a bad line on
            return
        self.deliver(SessionMessage(message))

    def deliver(self, item: SessionMessage | Exception) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.to_session.send_nowait(item)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:  # stdout ended: every reply that will come has come
            if self.tail:
                self.line(self.tail)
                self.tail = b""
            self.calls.fail_all("its output closed (the process ended)")
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
    """The ``ClientSession``'s write stream: each message one line on stdin."""

    def __init__(self, pipes: _Pipes) -> None:
        self.pipes = pipes

    async def send(self, message: SessionMessage) -> None:
        body = message.message.model_dump_json(by_alias=True, exclude_none=True)
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
async def upstream_stdio(
    command: Sequence[str], label: str
) -> AsyncIterator[tuple[Any, Any, RawCalls]]:
    """``(read, write, raw)`` for a ``ClientSession`` to the child ``command``."""
    if not command:
        raise ValueError("an upstream command needs at least a program")
    to_session: MemoryObjectSendStream[SessionMessage | Exception]
    read: MemoryObjectReceiveStream[SessionMessage | Exception]
    # Unbounded: lines are handed over from the pipe's read callback, which
    # cannot wait; the session only parses and dispatches, so it holds a burst.
    to_session, read = anyio.create_memory_object_stream(math.inf)
    pipes: _Pipes | None = None

    async def send(message: dict[str, Any]) -> None:
        assert pipes is not None
        await pipes.write(_encode(message) + b"\n")

    calls = RawCalls(label, send)
    pipes = _Pipes(calls, to_session)
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
        yield read, _SessionWrites(pipes), calls
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(transport, pipes)
        calls.fail_all("the connection closed")
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
