"""What one proxied tool call comes to: its telemetry, its state, its refusals.

Pattern: plain values and constructors shared by the routes, the governance
         link, the ledger and the accounting.
Role:    gateway layer; ``CallState`` is filled in as a call is routed,
         ``ToolCallTelemetry`` is told once per call, the rejection
         constructors build the MCP errors every route answers with.
Emits:   nothing.

Laws: P9 (hidden is not found, with a reason), P11 (only the closed set of
``RejectionReason`` makes a call ``rejected``, H6), P15 (the fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError

from ._layers import RejectionReason


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

    __slots__ = (
        "changed_by",
        "forwarded",
        "forwarded_args",
        "middleware",
        "reason",
        "route",
    )

    def __init__(self, requested: str, args: Any) -> None:
        self.route = "pipeline"
        self.forwarded: str | None = None
        self.forwarded_args: Any = args
        self.reason: str | None = None
        self.middleware: str | None = None
        self.changed_by: str | None = None  # the governance link that transformed


def rejection(code: int, message: str, reason: str) -> MCPError:
    """An MCP error carrying a ``RejectionReason`` in ``data`` (P11)."""
    return MCPError(code, message, {"rejection_reason": str(reason)})


def tool_hidden(name: str) -> MCPError:
    """P9: a hidden tool is not found, with a reason."""
    return rejection(
        types.METHOD_NOT_FOUND, f"Tool not found: {name}", RejectionReason.TOOL_HIDDEN
    )


def resource_hidden(uri: str) -> MCPError:
    """P9: a hidden resource is not found, with a reason."""
    return rejection(
        types.INVALID_REQUEST,
        f"Resource not found: {uri}",
        RejectionReason.RESOURCE_HIDDEN,
    )


_REASONS = frozenset(r.value for r in RejectionReason)


def reason_of(exc: MCPError) -> str | None:
    """The ``data.rejection_reason`` an MCP error carries, if it is one of
    the closed set (P11, H6); any other string makes it a plain error."""
    data = exc.error.data
    if isinstance(data, dict):
        reason = data.get("rejection_reason")
        return reason if isinstance(reason, str) and reason in _REASONS else None
    return None
