"""The proxy's stdio transport: JSON-RPC lines on the event loop's own pipes.

Pattern: an async context manager yielding the SDK session's stream pair
         (``SessionMessage`` in, ``SessionMessage`` out), reading and writing
         stdin/stdout on the asyncio event loop (``connect_read_pipe``/
         ``connect_write_pipe``), parsed and dumped as the SDK's
         ``stdio_server`` does.
Role:    gateway layer; ``McpProxy.serve_stdio`` when both are pipes, sockets
         or terminals on asyncio (the SDK's transport otherwise).
         Each line is decoded once (msgspec) and offered to the session's
         serving lane (``fast.ServingLane``) first: a plain ``tools/call`` it
         claims never enters the SDK's dispatcher.
Emits:   nothing; a malformed line reaches the session as the SDK's error.

Laws: P25 (each line one message, as the SDK reads and writes it; a lane
answer is the SDK path's).

Why not the SDK's ``stdio_server``: its file wrappers cost three worker-thread
hops per call (bench/proxy.py); the descriptors are set blocking at close.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
import sniffio
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from ..fast import ServingLane

CHUNK = 1 << 16
_decode = msgspec.json.Decoder().decode


def loop_pipes_usable() -> bool:
    """Whether stdin and stdout can be watched by the asyncio event loop."""
    try:
        if sniffio.current_async_library() != "asyncio":
            return False
        for stream in (sys.stdin, sys.stdout):
            mode = os.fstat(stream.fileno()).st_mode
            if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
                return False
    except (OSError, ValueError, AttributeError):
        return False
    return True


class _Writer(asyncio.Protocol):
    """A write-pipe protocol with flow control (``drain`` waits while paused)."""

    def __init__(self) -> None:
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.lost = asyncio.Event()

    def pause_writing(self) -> None:
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.resumed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        self.resumed.set()


async def _lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Each complete line of ``reader`` (any length), then a last unterminated one."""
    pending = b""
    while True:
        chunk = await reader.read(CHUNK)
        if not chunk:
            if pending.strip():
                yield pending
            return
        pending += chunk
        if b"\n" not in chunk:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line


@contextlib.asynccontextmanager
async def loop_stdio() -> AsyncIterator[tuple[Any, Any, ServingLane]]:
    """This process's stdin/stdout as the SDK's (read, write) stream pair, and
    the serving lane that sees each line first (``attach`` it to the session)."""
    loop = asyncio.get_running_loop()
    stdin_fd, stdout_fd = sys.stdin.fileno(), sys.stdout.fileno()
    reader = asyncio.StreamReader(limit=CHUNK)
    read_pipe = os.fdopen(stdin_fd, "rb", buffering=0, closefd=False)
    write_pipe = os.fdopen(stdout_fd, "wb", buffering=0, closefd=False)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), read_pipe
    )
    write_transport, writer = await loop.connect_write_pipe(_Writer, write_pipe)
    read_send, read_stream = anyio.create_memory_object_stream[
        SessionMessage | Exception
    ](0)
    write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def write_line(data: bytes) -> None:
        if writer.lost.is_set():
            raise anyio.BrokenResourceError
        write_transport.write(data + b"\n")
        await writer.resumed.wait()

    lane = ServingLane(write_line)

    async def read_lines() -> None:
        async with read_send:
            async for line in _lines(reader):
                try:
                    decoded = _decode(line)
                except (msgspec.DecodeError, RecursionError):
                    decoded = None  # the SDK's parser answers it
                if decoded is not None and lane.take(decoded):
                    continue
                try:
                    message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:  # the SDK's contract: the session answers
                    await read_send.send(exc)
                    continue
                await read_send.send(SessionMessage(message))
            lane.close()  # EOF: the SDK cancels its calls, the lane its own

    async def write_lines(done: anyio.Event) -> None:
        try:
            async with write_receive:
                async for session_message in write_receive:
                    if writer.lost.is_set():
                        return
                    data = session_message.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    write_transport.write(data.encode() + b"\n")
                    await writer.resumed.wait()
        finally:
            done.set()

    try:
        async with anyio.create_task_group() as tg:
            lane.start(tg)
            written = anyio.Event()
            tg.start_soon(read_lines)
            tg.start_soon(write_lines, written)
            try:
                yield read_stream, write_stream, lane
            finally:
                # What the session wrote last still goes out; then stop reading.
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await write_stream.aclose()
                    await written.wait()
                tg.cancel_scope.cancel()
    finally:
        read_transport.close()
        write_transport.close()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await writer.lost.wait()  # the transport's buffer is flushed
        for fd in (stdin_fd, stdout_fd):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, True)
