"""What a client of the gateway is told when something of the operator's fails.

Pattern: a constructor of withheld errors: a fixed message and a fresh error
         id go to the client as an MCP error; the exception's own text goes
         only to the log (``helmlog.proxy``), under the same id.
Role:    gateway layer; shared by the proxy (ledger, accounting, handlers,
         fast lane) and the upstream links.
Emits:   one ERROR log record per withheld error, carrying its id.

Laws: H4 (an exception's text never reaches a client).

Why withheld, not cleaned: the text is written by code the gateway does not
own (a KMS URL with a token, a host, a path); no filter knows what is secret.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError

log = logging.getLogger("helmlog.proxy")


def error_id() -> str:
    """A fresh id naming one withheld error in the log (128 random bits)."""
    return uuid.uuid4().hex


def withheld(
    message: str,
    exc: BaseException | None = None,
    *,
    code: int = types.INTERNAL_ERROR,
    reason: str | None = None,
    detail: str | None = None,
) -> MCPError:
    """An MCP error with a fixed ``message`` and an id; the detail is logged.

    ``exc`` (its text and traceback) and ``detail`` go to the log record
    only. ``reason`` is a ``RejectionReason`` for ``data.rejection_reason``.
    """
    eid = error_id()
    data: dict[str, Any] = {"error_id": eid}
    if reason is not None:
        data["rejection_reason"] = str(reason)
    cause = "" if exc is None else f"{type(exc).__name__}: {exc}"
    log.error(
        "proxy: %s (error id %s)%s%s",
        message,
        eid,
        f": {cause}" if cause else "",
        f" [{detail}]" if detail else "",
        exc_info=exc,
    )
    return MCPError(code, f"{message} (error id {eid})", data)
