"""What a client of the proxy is told when something of the operator's fails.

Pattern: a constructor of withheld errors: a fixed message and a fresh error
         id go to the client as an MCP error; the exception's own text goes
         only to the log (``helmlog.proxy``), under the same id.
Role:    gateway layer; the ledger (a key provider or store that raised), the
         call wrapper (a layer that raised), the session's handlers, the fast
         lane and the upstream links build their errors with ``withheld``.
Emits:   one ERROR log record per withheld error, carrying its id.

Laws: H4 (errors carry no secrets: an exception's text never reaches a client;
the client gets a fixed message and an ``error_id`` in ``data`` and in the
message, and the log record holds the text under that id).

Why the text is withheld, not cleaned: a key provider's, a store's or a
transport's message is written by code the proxy does not own (a KMS URL
with a token in it, a host, a path); no filter knows what in it is secret.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import McpError

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
) -> McpError:
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
    return McpError(
        types.ErrorData(code=code, message=f"{message} (error id {eid})", data=data)
    )
