"""One HTTP session over two SDK transports: SSE where it is needed, JSON elsewhere.

Pattern: a router between one ``ServerSession`` and two transports of the
         same session id, SSE (initialize, GET, DELETE, resumption, progress)
         and JSON (every other request); requests of both merge into one read
         stream, each reply goes back where its request came in.
Role:    gateway layer; ``ProxyHttpApp`` makes one per session; which
         transport a POST takes is ``_routing.wants_sse``; ``answer_lane``
         writes a fast-lane answer as the JSON transport would.
Emits:   nothing.

Laws: P19, P25 (progress needs SSE; a lane answer is the JSON transport's).

Why two transports: the SDK answers every request over SSE (a task group,
pings, stored events) or every one as JSON; only progress must precede a reply.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp.types as types
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.message import SessionMessage

from ._lane import FastCalls

log = logging.getLogger("helmlog.proxy")
_encode = msgspec.json.Encoder().encode


async def answer_lane(
    calls: FastCalls, message: Any, sid: str, scope: Any, send: Any
) -> None:
    """A lane call's JSON answer, as the SDK's JSON transport writes it (P25)."""
    response = await calls.answer(message, scope["headers"])
    status = 200
    if response is None:  # the session ended under it: the SDK transport's 500
        status = 500
        response = {
            "jsonrpc": "2.0",
            "id": None,  # H6: as ``_http`` rewrites the SDK's
            "error": {
                "code": types.INTERNAL_ERROR,
                "message": "Error processing request",
            },
        }
    data = _encode(response)
    headers = [
        (b"content-length", str(len(data)).encode()),
        (b"content-type", b"application/json"),
        (MCP_SESSION_ID_HEADER.encode(), sid.encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class DualRoute:
    """The merged streams of one session's two transports (see the docstring)."""

    def __init__(self) -> None:
        self.json_ids: set[types.RequestId] = set()

    @contextlib.asynccontextmanager
    async def merged(
        self, sse: tuple[Any, Any], fast: tuple[Any, Any]
    ) -> AsyncIterator[tuple[Any, Any]]:
        """``(read, write)`` for the ``ServerSession`` over both transports."""
        read_send: MemoryObjectSendStream[SessionMessage | Exception]
        read: MemoryObjectReceiveStream[SessionMessage | Exception]
        read_send, read = anyio.create_memory_object_stream(0)
        write: MemoryObjectSendStream[SessionMessage]
        outgoing: MemoryObjectReceiveStream[SessionMessage]
        write, outgoing = anyio.create_memory_object_stream(0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump_sse, sse[0], read_send)
            tg.start_soon(self._pump_json, fast[0], read_send)
            tg.start_soon(self._route, outgoing, sse[1], fast[1])
            try:
                yield read, write
            finally:
                tg.cancel_scope.cancel()

    async def _pump_sse(self, source: Any, sink: Any) -> None:
        # The SSE transport's read stream ending (DELETE, termination) ends
        # the session: the merged read stream closes with it.
        async with sink:
            try:
                async for message in source:
                    await sink.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the session has ended

    async def _pump_json(self, source: Any, sink: Any) -> None:
        try:
            async for message in source:
                if isinstance(message, SessionMessage):
                    root = message.message.root
                    if isinstance(root, types.JSONRPCRequest):
                        self.json_ids.add(root.id)
                await sink.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the session has ended

    async def _route(self, outgoing: Any, sse: Any, fast: Any) -> None:
        async with outgoing:
            async for message in outgoing:
                target = sse
                root = message.message.root
                is_reply = isinstance(root, (types.JSONRPCResponse, types.JSONRPCError))
                if is_reply and root.id in self.json_ids:
                    self.json_ids.discard(root.id)
                    target = fast
                try:
                    await target.send(message)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    log.debug("proxy: a message for a closed transport was dropped")
