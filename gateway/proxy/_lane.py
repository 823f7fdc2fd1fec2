"""A proxy session's fast lane: ``tools/call`` answered without the SDK session.

Pattern: a per-session router over decoded JSON-RPC dicts: ``admit`` takes a
         lane call (``_routing.lane_call``) once the client is initialized,
         ``answer`` runs the session's one tool route and returns the JSON-RPC
         response; ``saw`` watches the rest (initialized, cancels).
Role:    gateway layer; each ``ProxySession`` holds one (``session.calls``);
         stdio, in-memory ``run`` and the HTTP app hand it their messages.
Emits:   nothing of its own; the route records and tells.

Laws: P25 (the answer is the SDK session's, H4 errors included; a cancel
answers code 0 and cancels upstream), P5, P8–P16, P20 (``_routing``'s same-route rule).

Why a lane beside the SDK session: the SDK spends a call's time on memory
streams, a task per request and pydantic both ways; a plain call needs none.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp.types as types
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from .._withheld import withheld
from ._routing import lane_call

Answer = Callable[[Any, Any, Any], Awaitable[dict[str, Any]]]
"""``(request_id, params, headers) -> result``: the session's lane call."""

log = logging.getLogger("helmlog.proxy")

CANCELLED: dict[str, Any] = {"code": 0, "message": "Request cancelled"}
INVALID_PARAMS: dict[str, Any] = {
    "code": types.INVALID_PARAMS,
    "message": "Invalid request parameters",
    "data": "",
}
# Content blocks normalized without the model: their fields, each a string.
_PLAIN_BLOCKS: dict[Any, tuple[str, ...]] = {
    "text": ("text",),
    "image": ("data", "mimeType"),
    "audio": ("data", "mimeType"),
}
_RESULT_FIELDS = (("isError", bool), ("structuredContent", dict), ("_meta", dict))


def checked_result(raw: Any) -> dict[str, Any]:
    """An upstream ``tools/call`` result as ``CallToolResult`` would dump it.

    A plain result — text, image and audio blocks whose every field is the
    string the model requires, and top-level fields of the model's types —
    is normalized in place of a round trip through the model (``None``
    fields dropped, ``isError`` defaulted); anything else goes through the
    model, so an invalid one raises the ``ValidationError`` the SDK path
    raises and no malformed field reaches the client.
    """
    content = raw.get("content") if isinstance(raw, dict) else None
    if not (
        isinstance(content, list)
        and all(_plain_block(b) for b in content)
        and _plain_fields(raw)
    ):
        model = types.CallToolResult.model_validate(raw)
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert isinstance(raw, dict)
    out: dict[str, Any] = raw
    if any(None in b.values() for b in content):
        content = [{k: v for k, v in b.items() if v is not None} for b in content]
        out = {**out, "content": content}
    if None in out.values():
        out = {k: v for k, v in out.items() if v is not None}
    if "isError" not in out:
        out = {**out, "isError": False}
    return out


def _plain_block(block: Any) -> bool:
    """A content block of a plain type whose fields are all required strings."""
    if not isinstance(block, dict):
        return False
    fields = _PLAIN_BLOCKS.get(block.get("type"))
    if fields is None:
        return False
    for key, value in block.items():
        if key != "type" and value is not None and key not in fields:
            return False  # annotations, _meta, ...: the model checks them
    return all(isinstance(block.get(name), str) for name in fields)


def _plain_fields(raw: dict[str, Any]) -> bool:
    """The result's own fields, where present, of the model's types."""
    return all(
        raw.get(name) is None or isinstance(raw[name], kind)
        for name, kind in _RESULT_FIELDS
    )


def error_of(exc: McpError) -> dict[str, Any]:
    """An ``McpError`` as the SDK session writes it in a JSON-RPC error."""
    return exc.error.model_dump(mode="json", by_alias=True, exclude_none=True)


class FastCalls:
    """The fast lane of one session (see the module docstring)."""

    __slots__ = ("answered", "call", "closed", "enabled", "in_flight", "ready")

    def __init__(self, call: Answer, *, enabled: bool = True) -> None:
        self.call = call
        self.enabled = enabled
        self.ready = False  # the client has sent notifications/initialized
        self.closed = False
        self.answered = 0  # lane calls answered (a diagnostic; tests read it)
        self.in_flight: dict[Any, anyio.CancelScope] = {}

    def admit(self, message: Any) -> bool:
        """Whether the lane answers this decoded message; if so, it is in flight.

        It is in flight from here, before its task starts, so a cancel read
        right after it finds it (as the SDK session registers a request
        before reading the next message).
        """
        if not (self.enabled and self.ready and not self.closed):
            return False
        # the progress rule (``_routing.py``): progress stays on SDK
        if not lane_call(message):
            return False
        self.in_flight[message["id"]] = anyio.CancelScope()
        return True

    def saw(self, message: Any) -> None:
        """Note a message going to the SDK session: initialized, or a cancel."""
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method == "notifications/initialized":
            self.ready = True
        elif method == "notifications/cancelled" and "id" not in message:
            params = message.get("params")
            rid = params.get("requestId") if isinstance(params, dict) else None
            scope = self.in_flight.get(rid) if isinstance(rid, (int, str)) else None
            if scope is not None:
                scope.cancel()

    def close(self) -> None:
        """The session ended: cancel every lane call; none is answered."""
        self.closed = True
        for scope in list(self.in_flight.values()):
            scope.cancel()

    async def answer(
        self, message: dict[str, Any], headers: Any = None
    ) -> dict[str, Any] | None:
        """The JSON-RPC response to one lane call, or ``None`` if the session ended.

        ``headers`` are the HTTP request's raw ``(name, value)`` byte pairs.
        """
        rid = message["id"]
        self.answered += 1
        scope = self.in_flight.get(rid)
        if scope is None:  # answered without ``admit``
            scope = self.in_flight[rid] = anyio.CancelScope()
        try:
            with scope:
                try:
                    result = await self.call(rid, message.get("params"), headers)
                except McpError as exc:
                    return {"jsonrpc": "2.0", "id": rid, "error": error_of(exc)}
                except Exception as exc:  # noqa: BLE001 — H4: withheld, logged
                    failed = withheld("the proxy could not answer this call", exc)
                    return {"jsonrpc": "2.0", "id": rid, "error": error_of(failed)}
                return {"jsonrpc": "2.0", "id": rid, "result": result}
        finally:
            self.in_flight.pop(rid, None)
        if self.closed:
            return None
        return {"jsonrpc": "2.0", "id": rid, "error": CANCELLED}


def invalid_params() -> McpError:
    """The SDK session's answer to params its request model rejects."""
    return McpError(types.ErrorData(**INVALID_PARAMS))


def validated(request_id: Any, params: Any) -> types.CallToolRequest:
    """The call as the SDK session parses it (envelope kept), or invalid params."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
    if params is not None:
        message["params"] = params
    try:
        return types.CallToolRequest.model_validate(message)
    except ValidationError as exc:
        raise invalid_params() from exc


@contextlib.asynccontextmanager
async def memory_lane(
    calls: FastCalls, read_stream: Any, write_stream: Any
) -> AsyncIterator[Any]:
    """``read_stream`` with the lane's calls taken out (``McpProxy.run``).

    For SDK stream pairs (in memory, or a transport of the SDK's): lane
    calls are answered onto ``write_stream``; every other message goes on to
    the returned read stream. At its end the lane's calls finish before the
    session's read stream ends, as the SDK session's own requests do.
    """
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def answer(message: dict[str, Any]) -> None:
        response = await calls.answer(message)
        if response is not None:
            out = SessionMessage(types.JSONRPCMessage.model_validate(response))
            with contextlib.suppress(
                anyio.ClosedResourceError, anyio.BrokenResourceError
            ):
                await write_stream.send(out)

    async def pump() -> None:
        async with send, anyio.create_task_group() as lane:
            async for item in read_stream:
                if isinstance(item, SessionMessage):
                    message = item.message.model_dump(
                        by_alias=True, mode="json", exclude_none=True
                    )
                    if calls.admit(message):
                        lane.start_soon(answer, message)
                        continue
                    calls.saw(message)
                await send.send(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield receive
        finally:
            calls.close()
            tg.cancel_scope.cancel()
