"""What one proxied tool call comes to: its telemetry, its state, its refusals.

Pattern: plain values and constructors shared by the session's routes, the
         governance link and the ledger, and ``accounted``: the one wrapper
         every route of a tool call runs inside (audit, telemetry, errors).
Role:    gateway layer; ``ProxySession`` (its SDK path and its fast lane)
         runs each tool call through ``accounted``, which fills a
         ``CallState`` and emits one ``ToolCallTelemetry``; the rejection
         constructors build the MCP errors every route answers with.
Emits:   one ``ToolCallTelemetry`` per call; the ledger's audit events.

Laws: P9 (a hidden tool or resource is not found, with a reason), P11
(every refusal carries a ``RejectionReason`` in ``data``; H6: only that
closed set, from an upstream's error too, makes a call ``rejected``), P15 (one
telemetry event per tool call, on every route: its fields), P20 (the ledger
records every route, around everything: ``call_started`` before the route,
``call_finished`` before the response leaves; a call cancelled mid-route (a
client's cancel, its session's DELETE or TTL) records a ``call_finished``
with outcome ``"cut_off"``, shielded, and no telemetry, on either path, so
no start is left without its finish, P18).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import mcp.types as types
from mcp.shared.exceptions import McpError

from ._proxy_errors import withheld
from ._proxy_layers import ProxyContext, RejectionReason

if TYPE_CHECKING:
    from ._proxy_session import ProxySession

log = logging.getLogger("helmlog.proxy")


@dataclass(frozen=True, slots=True)
class ToolCallTelemetry:
    """One tool call's telemetry, on every route, once its outcome is known (P15).

    ``outcome`` is ``"success"`` (an ``is_error`` result included),
    ``"error"`` or ``"rejected"`` (then ``rejection_reason`` says why).
    """

    request_id: str
    session_id: str | None
    tool: str
    forwarded_tool: str | None
    duration_ms: float
    outcome: str
    rejection_reason: str | None
    identity: Any
    route: str
    server_name: str | None = None
    server_version: str | None = None
    type: str = "tool_call"


class CallState:
    """What one tool call came to, filled in as it is routed (P10, P15, P20)."""

    __slots__ = ("forwarded", "forwarded_args", "middleware", "reason", "route")

    def __init__(self, requested: str, args: Any) -> None:
        self.route = "pipeline"
        self.forwarded: str | None = None
        self.forwarded_args: Any = args
        self.reason: str | None = None
        self.middleware: str | None = None


def rejection(code: int, message: str, reason: str) -> McpError:
    """An MCP error carrying a ``RejectionReason`` in ``data`` (P11)."""
    return McpError(
        types.ErrorData(
            code=code, message=message, data={"rejection_reason": str(reason)}
        )
    )


def tool_hidden(name: str) -> McpError:
    """P9: a hidden tool is not found, with a reason."""
    return rejection(
        types.METHOD_NOT_FOUND, f"Tool not found: {name}", RejectionReason.TOOL_HIDDEN
    )


def resource_hidden(uri: str) -> McpError:
    """P9: a hidden resource is not found, with a reason."""
    return rejection(
        types.INVALID_REQUEST,
        f"Resource not found: {uri}",
        RejectionReason.RESOURCE_HIDDEN,
    )


_REASONS = frozenset(r.value for r in RejectionReason)


def reason_of(exc: McpError) -> str | None:
    """The ``data.rejection_reason`` an MCP error carries, if it is one of
    the closed set (P11, H6); any other string makes it a plain error."""
    data = exc.error.data
    if isinstance(data, dict):
        reason = data.get("rejection_reason")
        return reason if isinstance(reason, str) and reason in _REASONS else None
    return None


async def accounted(
    session: ProxySession,
    ctx: ProxyContext,
    requested: str,
    args: Any,
    meta: Any,
    route: Callable[[CallState], Awaitable[Any]],
) -> Any:
    """P15, P20: one tool call's audit and telemetry around its ``route``.

    ``meta`` is the caller's ``_meta`` (the SDK model or its JSON dict);
    a layer's failure becomes an ``INTERNAL_ERROR`` with a fixed message and
    an error id, its text logged under that id (H4); the route's result
    (a ``CallToolResult`` or its JSON dict) is returned as it came.
    """
    proxy = session.proxy
    started = time.perf_counter()
    state = CallState(requested, args)
    ledger = proxy.ledger
    entry = None
    if ledger is not None:
        if meta is not None and not isinstance(meta, dict):
            meta = meta.model_dump(mode="json", exclude_none=True)
        entry = await ledger.started(session, ctx, requested, args, meta, state)
    result: Any = None
    error: McpError | None = None
    try:
        result = await route(state)
    except anyio.get_cancelled_exc_class():
        if ledger is not None and entry is not None:
            with anyio.CancelScope(shield=True):
                await _cut_off(session, ctx)
        raise
    except McpError as exc:
        error = exc
        state.reason = state.reason or reason_of(exc)
    except Exception as exc:  # noqa: BLE001 — a layer failed: H4, withheld
        error = withheld(
            "the proxy could not complete this tool call", exc, detail=requested
        )
    duration_ms = (time.perf_counter() - started) * 1000.0
    if state.reason is not None:
        outcome = "rejected"
    else:
        outcome = "error" if error is not None else "success"
    if ledger is not None and entry is not None:
        await ledger.finished(
            session, ctx, entry, requested, state, outcome, result, error, duration_ms
        )
    await proxy.telemetry(
        ToolCallTelemetry(
            request_id=ctx.request_id,
            session_id=ctx.session_id,
            tool=requested,
            forwarded_tool=state.forwarded,
            duration_ms=duration_ms,
            outcome=outcome,
            rejection_reason=state.reason,
            identity=ctx.identity,
            route=state.route,
            server_name=proxy.name,
            server_version=proxy.version,
        )
    )
    if error is not None:
        raise error
    return result


async def _cut_off(session: ProxySession, ctx: ProxyContext) -> None:
    """P18, P20: record a cancelled call as cut off; a failure is logged, for
    the cancellation, not the ledger, is what the caller must see."""
    ledger = session.proxy.ledger
    assert ledger is not None
    try:
        await ledger.cut_off(session, ctx)
    except McpError:
        log.error("proxy: the cut-off of call %s was not recorded", ctx.request_id)
