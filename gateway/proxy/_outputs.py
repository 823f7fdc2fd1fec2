"""The upstream tools' advertised output schemas, and the check every answer passes.

Pattern: ``Outputs`` keeps each tool's ``outputSchema`` as the proxy listed
         it (``gateway/_structured.OutputSchema``, compiled once), lists the
         upstream once when a call names a tool it has not seen, and
         ``judge``s a result: unchanged when valid, else a refusal.
Role:    gateway layer; ``Routing`` holds one; ``ProxySession`` judges every
         ``tools/call`` answer inside its accounting (both paths, all routes).
Emits:   nothing; the caller's ``CallState`` carries the reason to the audit.

Laws: P27 (a result never breaks the schema the proxy advertises: it is
refused, ``OUTPUT_SCHEMA``, and recorded), S9, G43 (the refusal names paths
and expectations, never a value).

Why at the end of every route: layers, governance links and the upstream
itself can each break the schema; the client checks it (the ``mcp`` 2.x and
FastMCP 4 clients, the Inspector) and fails the whole call otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import mcp.types as types

from .._structured import OUTPUT_SCHEMA_RULE, OutputSchema, refusal_text
from ..upstream import Upstream
from ._calls import CallState
from ._layers import RejectionReason

log = logging.getLogger("helmlog.proxy")


class Outputs:
    """Output schemas by tool name, as last listed (``None``: the tool has none)."""

    def __init__(self) -> None:
        self._schemas: dict[str, OutputSchema | None] = {}
        self._complete = False  # a whole listing has been seen
        self._listing = asyncio.Lock()  # one listing at a time (P27)

    def listed(self, result: types.ListToolsResult, *, whole: bool = False) -> None:
        """Keep the output schemas of an upstream ``tools/list`` answer."""
        for tool in result.tools:
            self._schemas[tool.name] = _compiled(tool)
        if whole and result.next_cursor is None:
            self._complete = True

    def forget(self) -> None:
        """The upstream's tools changed: their schemas are unknown again."""
        self._schemas.clear()
        self._complete = False

    async def schema(self, name: str, upstream: Upstream) -> OutputSchema | None:
        """``name``'s output schema; an unseen tool's is listed first (once:
        calls that arrive while a listing is under way wait for it, so a
        burst of first calls lists the upstream once, not once each)."""
        if name not in self._schemas and not self._complete:
            async with self._listing:
                if name not in self._schemas and not self._complete:
                    await self._list_all(upstream)
        return self._schemas.get(name)

    async def _list_all(self, upstream: Upstream) -> None:
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page: types.ListToolsResult = await upstream.request(
                types.ListToolsRequest(params=params), types.ListToolsResult
            )
            self.listed(page)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._complete = True

    def known(self, name: str) -> bool:
        """Whether ``name``'s schema (or its absence) is known without a listing."""
        return name in self._schemas or self._complete


def _compiled(tool: types.Tool) -> OutputSchema | None:
    if tool.output_schema is None:
        return None
    try:
        return OutputSchema(tool.output_schema, tool.name)
    except ValueError:  # the upstream advertises a schema no one can check
        log.warning("proxy: tool %r advertises an unusable output schema", tool.name)
        return None


def refusal(tool: str, changed_by: str | None, problem: str) -> types.CallToolResult:
    """P27: the tool error a client receives instead of a result that breaks
    the schema (its ``_meta`` names the reason, as a governance refusal's)."""
    meta: dict[str, Any] = {"rejection_reason": RejectionReason.OUTPUT_SCHEMA.value}
    if changed_by is not None:
        meta["middleware"] = changed_by
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text=refusal_text(tool, changed_by, problem))
        ],
        is_error=True,
        _meta=meta,
    )


def judge(result: Any, schema: OutputSchema | None, tool: str, state: CallState) -> Any:
    """``result`` (a ``CallToolResult`` or its JSON) if it keeps ``schema``,
    else the refusal in the same form, with the reason put on ``state``."""
    if schema is None:
        return result
    if isinstance(result, dict):
        if result.get("isError") is True:
            return result  # a tool error carries no structured content
        structured = result.get("structuredContent")
    else:
        if result.is_error:
            return result
        structured = result.structured_content
    problem = schema.problem(structured)
    if problem is None:
        return result
    state.reason = RejectionReason.OUTPUT_SCHEMA
    state.middleware = state.changed_by or OUTPUT_SCHEMA_RULE
    refused = refusal(tool, state.changed_by, problem)
    if isinstance(result, dict):
        return refused.model_dump(mode="json", by_alias=True, exclude_none=True)
    return refused
