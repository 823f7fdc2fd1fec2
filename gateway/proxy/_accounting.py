"""The one wrapper every route of a tool call runs inside: audit, telemetry, errors.

Pattern: an object holding the ledger (or none), the observers and the
         proxy's name; ``run`` fills a ``CallState`` around a route and
         emits one ``ToolCallTelemetry``.
Role:    gateway layer; ``McpProxy`` makes one; each ``ProxySession`` runs
         its tool calls (model path and JSON path alike) through it.
Emits:   ``proxy.call_started``/``call_finished`` through the ledger; one
         ``ToolCallTelemetry`` per call through the observers.

Laws: P15 (one telemetry event per tool call, on every route), P20 (the
ledger records every route, around everything; a call cancelled mid-route
records ``call_finished`` with outcome ``"cut_off"``, shielded, and no
telemetry, so no start is left without its finish, P18), H4 (a layer's
failure is answered with a fixed message and an error id).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError

from .._withheld import withheld
from ._audit import ProxyLedger
from ._calls import CallState, ToolCallTelemetry, reason_of
from ._layers import ProxyContext
from ._observers import Observers

log = logging.getLogger("helmlog.proxy")


class Accounting:
    """What every tool call is wrapped in (P15, P20); one per proxy."""

    __slots__ = ("ledger", "name", "observers", "version")

    def __init__(
        self,
        ledger: ProxyLedger | None,
        observers: Observers,
        *,
        name: str,
        version: str,
    ) -> None:
        self.ledger = ledger  # with an audit only: it records calls (P20)
        self.observers = observers
        self.name = name
        self.version = version

    async def run(
        self,
        audit_session: str,
        ctx: ProxyContext,
        requested: str,
        args: Any,
        meta: Any,
        route: Callable[[CallState], Awaitable[Any]],
    ) -> Any:
        """P15, P20: one tool call's audit and telemetry around its ``route``.

        ``meta`` is the caller's ``_meta`` (the SDK model or its JSON dict);
        a layer's failure becomes an ``INTERNAL_ERROR`` with a fixed message
        and an error id, its text logged under that id (H4); the route's
        result (a ``CallToolResult`` or its JSON dict) is returned as it came.
        """
        started = time.perf_counter()
        state = CallState(requested, args)
        ledger = self.ledger
        entry = None
        if ledger is not None:
            if meta is not None and not isinstance(meta, dict):
                meta = meta.model_dump(mode="json", exclude_none=True)
            entry = await ledger.started(
                audit_session, ctx, requested, args, meta, state
            )
        result: Any = None
        error: MCPError | None = None
        try:
            result = await route(state)
        except anyio.get_cancelled_exc_class():
            if ledger is not None and entry is not None:
                with anyio.CancelScope(shield=True):
                    await _cut_off(ledger, audit_session, ctx)
            raise
        except MCPError as exc:
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
                audit_session,
                ctx,
                entry,
                requested,
                state,
                outcome,
                result,
                error,
                duration_ms,
            )
        await self.observers.telemetry(
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
                server_name=self.name,
                server_version=self.version,
            )
        )
        if error is not None:
            raise error
        return result


async def _cut_off(ledger: ProxyLedger, audit_session: str, ctx: ProxyContext) -> None:
    """P18, P20: record a cancelled call as cut off; a failure is logged, for
    the cancellation, not the ledger, is what the caller must see."""
    try:
        await ledger.cut_off(audit_session, ctx)
    except MCPError:
        log.error("proxy: the cut-off of call %s was not recorded", ctx.request_id)
