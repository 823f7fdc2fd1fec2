"""Governance links in the proxy: the innermost layer, on the one pipeline.

Pattern: an adapter turning a forwarded ``tools/call`` into a run of the
         runtime's ``ToolPipeline`` under ``TASK_RULES`` (``SERVED`` whose
         asks pause, as ``mcp_serve``'s), whose ``execute`` is the session's
         upstream call (handed in per call); an ask goes to ``_asks``.
Role:    gateway layer; ``McpProxy(governance=[links])`` makes one; the tool
         terminal of ``_routing`` calls it after every rewrite and P10.
Emits:   rows and ``tool.dispatched`` into the session's stream (the ledger).

Laws: P14 (S2–S4 and S10 as ``mcp_serve``; a refusal carries POLICY_DENIED;
an upstream error is the tool's raise, S4 over P25, H6), R5, R7, P25.

Why the upstream's own answer goes back when no link changed it: the proxy is
transparent; only a transform or a refusal replaces what the upstream said.
"""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import mcp.types as types
from mcp.shared.exceptions import MCPError

from helmlog.events.lowlevel import compact_json
from helmlog.runtime import Tool, wall_clock_ms
from helmlog.runtime.lowlevel import (
    CallSite,
    Entry,
    Link,
    Outcome,
    Paused,
    Ran,
    Refused,
    ToolPipeline,
    as_tool_link,
    tool_link_problem,
)

from .._serve import _ask_of
from .._structured import structured
from .._tasks import TASK_RULES
from ..upstream import Upstream
from ._asks import DivertingRecorder, ProxyAsks
from ._audit import ProxyLedger
from ._calls import CallState
from ._layers import ProxyContext, RejectionReason

UpstreamCall = Callable[[types.CallToolRequest, Any], Awaitable[types.CallToolResult]]
"""``(request, progress) -> result``: the session's forward to the upstream."""

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


RawUpstreamCall = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""``(params) -> result``: the session's forward on the wire's JSON."""


class _Forward:
    """What the running call's ``execute`` forwards, and what came back:
    SDK models, or (``raw``) the call's params and the upstream's JSON."""

    __slots__ = ("error", "forward", "progress", "raw", "request", "result", "state")

    def __init__(
        self,
        forward: Any,
        request: Any,
        state: CallState,
        progress: Any,
        raw: bool = False,
    ) -> None:
        self.forward = forward
        self.request = request
        self.state = state
        self.progress = progress
        self.raw = raw
        self.result: Any = None  # a ``CallToolResult``, or its JSON (``raw``)
        self.error: MCPError | None = None


_current: contextvars.ContextVar[_Forward] = contextvars.ContextVar("helmlog_forward")


class UpstreamToolError(Exception):
    """The upstream answered with an error: the walk sees ``error=True`` (S4)."""


def content_text(result: types.CallToolResult) -> str:
    """A tool result's text blocks, joined; other blocks as JSON."""
    parts = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(block.model_dump_json(exclude_none=True))
    return "\n".join(parts)


async def _execute(**kwargs: Any) -> Any:
    fwd = _current.get()
    if fwd.raw:
        return await _execute_raw(fwd, kwargs)
    request = fwd.request
    if kwargs != (request.params.arguments or {}):
        params = request.params.model_copy(update={"arguments": kwargs})
        request = request.model_copy(update={"params": params})
    fwd.state.forwarded_args = kwargs
    try:
        result = await fwd.forward(request, fwd.progress)
    except MCPError as exc:
        fwd.error = exc
        raise UpstreamToolError(exc.error.message) from exc
    fwd.result = result
    if result.is_error:
        raise UpstreamToolError(content_text(result))
    structured = result.structured_content
    if structured is not None and not _wrapped(structured):
        # P27: a structured tool's value is its structured content: a link
        # sees the object and returns the new one, which the client receives
        return structured
    if structured is not None and not result.content:
        return structured
    return content_text(result)


async def _execute_raw(fwd: _Forward, kwargs: dict[str, Any]) -> Any:
    """``_execute`` on the wire's JSON: the same forward, raise and value,
    with no request or result model built (a plain call, the same-route rule)."""
    params: dict[str, Any] = fwd.request
    if kwargs != (params.get("arguments") or {}):
        params = {**params, "arguments": kwargs}
    fwd.state.forwarded_args = kwargs
    try:
        result = await fwd.forward(params)
    except MCPError as exc:
        fwd.error = exc
        raise UpstreamToolError(exc.error.message) from exc
    fwd.result = result
    if result.get("isError"):
        raise UpstreamToolError(_raw_text(result))
    structured = result.get("structuredContent")
    if structured is not None and not _wrapped(structured):
        return structured  # P27, as ``_execute``
    if structured is not None and not result.get("content"):
        return structured
    return _raw_text(result)


def _raw_text(result: dict[str, Any]) -> str:
    """``content_text`` of a result's JSON: its text blocks' texts joined; a
    result with any other block is read as the model path reads it."""
    parts = []
    for block in result.get("content") or ():
        text = block.get("text") if isinstance(block, dict) else None
        if not isinstance(text, str) or block.get("type") != "text":
            read = types.CallToolResult.model_validate(result, by_name=False)
            return content_text(read)
        parts.append(text)
    return "\n".join(parts)


def _structured_of(result: Any) -> Any:
    """A result's structured content, from its model or its JSON."""
    if isinstance(result, dict):
        return result.get("structuredContent")
    return result.structured_content if result is not None else None


def _wrapped(structured: Any) -> bool:
    """A primitive the server wrapped as ``{"result": <str>}`` (FastMCP, the
    SDK's MCPServer): its text is the value a link sees."""
    return (
        isinstance(structured, dict)
        and set(structured) == {"result"}
        and isinstance(structured["result"], str)
    )


def _refusal(text: str, middleware: str | None) -> types.CallToolResult:
    meta: dict[str, Any] = {"rejection_reason": RejectionReason.POLICY_DENIED.value}
    if middleware is not None:
        meta["middleware"] = middleware
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=True,
        _meta=meta,
    )


class Governance:
    """Helmlog tool links run as the proxy's innermost layer (P14)."""

    def __init__(
        self,
        links: Sequence[Any],
        *,
        name: str,
        upstream: Upstream,
        ledger: ProxyLedger,
    ) -> None:
        for obj in links:
            problem = tool_link_problem(obj)
            if problem is not None:
                raise ValueError(f"McpProxy governance: {problem}")
        self.name = name  # the proxy's: the tool_call_id prefix (S2)
        self.upstream = upstream
        self.ledger = ledger
        self.links: tuple[Link, ...] = tuple(as_tool_link(obj) for obj in links)
        self.pipeline = ToolPipeline({}, self.links, TASK_RULES, clock=wall_clock_ms)
        self._counter = itertools.count(1)
        self._tools: dict[str, Tool] = {}
        self.asks: ProxyAsks | None = None  # the proxy's (S10), set by McpProxy
        self.forward: UpstreamCall | None = None  # a resume's, set by McpProxy

    def tool(self, name: str) -> Tool:
        found = self._tools.get(name)
        if found is None:
            # The upstream judges its own schema; S3's validation here checks
            # that the arguments the walk produced are an object.
            init = self.upstream.init
            if init is None:
                raise RuntimeError("McpProxy is not started: use `async with proxy`")
            source = self.upstream.server_name  # S2: the upstream's
            found = Tool(name, "", _ANY_OBJECT, _execute, source)
            self._tools[name] = found
        return found

    async def call(
        self,
        audit_session: str,
        forward: types.CallToolRequest,
        ctx: ProxyContext,
        state: CallState,
        progress: Any,
        upstream_call: UpstreamCall,
    ) -> types.CallToolResult:
        """Walk one forwarded call; return what the client receives (S4, P14).

        A call whose ``_meta`` names an ask (``helmlog/ask``) reads its
        outcome back and is never forwarded (S4); a call whose rule asks is
        the durable pause ``_asks`` records (S10).
        """
        asks = self.asks
        ask_id = _ask_of(forward.params.meta)
        if ask_id is not None and asks is not None:
            return await asks.outcome(ask_id, forward.params.name, ctx.identity)
        fwd = _Forward(upstream_call, forward, state, progress)
        out = await self._walk(
            audit_session, forward.params.name, forward.params.arguments, ctx, fwd
        )
        return cast(types.CallToolResult, out)  # a model call's answer is one

    async def call_raw(
        self,
        audit_session: str,
        params: dict[str, Any],
        ctx: ProxyContext,
        state: CallState,
        upstream_call: RawUpstreamCall,
    ) -> Any:
        """``call`` for a plain call on the wire's JSON (no progress, no ask
        named in its ``_meta``: the caller's check): the same walk, rows and
        answer, the upstream's own JSON where no link changed it, else the
        model ``call`` returns."""
        fwd = _Forward(upstream_call, params, state, None, raw=True)
        return await self._walk(
            audit_session, params["name"], params.get("arguments"), ctx, fwd
        )

    async def _walk(
        self,
        audit_session: str,
        name: str,
        arguments: Any,
        ctx: ProxyContext,
        fwd: _Forward,
    ) -> types.CallToolResult | dict[str, Any]:
        """Walk one forwarded call (``call``'s body, models or JSON alike)."""
        asks = self.asks
        state = fwd.state
        tool = self.tool(name)
        args: Any = arguments if arguments is not None else {}
        site = CallSite(
            tool_name=tool.name,
            tool_source=tool.source,
            tool_call_id=f"mcp-{self.name}-{next(self._counter)}",
            iteration=0,
            history=(),
            identity=ctx.identity,
        )
        inner = self.ledger.recorder(audit_session)
        recorder: Any = (
            inner if asks is None else DivertingRecorder(inner, asks.open_stream)
        )
        token = _current.set(fwd)
        try:
            out = await self.pipeline.run(tool, site, Entry.fresh(args), recorder)
        except Exception:
            await recorder.release()  # rows a failing step left held: recorded
            raise
        finally:
            _current.reset(token)
        await recorder.release()  # rows a later step refused on (S3)
        if isinstance(out, Paused):
            if asks is None:
                raise RuntimeError("McpProxy governance asked with no asks to hold it")
            state.middleware = out.ask.middleware
            return await asks.paused(recorder.stream, site, out)
        return self._answer(out, fwd, recorder, state)

    async def resumed(
        self,
        tool: Tool,
        site: CallSite,
        pending: Any,
        decision: Any,
        recorder: Any,
        state: CallState,
    ) -> types.CallToolResult | Paused:
        """A decided pause's call (S10): the chain from the asker on, the
        upstream's tool once if approved; what the client receives (P14)."""
        upstream_call = self.forward
        if upstream_call is None:
            raise RuntimeError("McpProxy governance has no upstream to resume on")
        params = types.CallToolRequestParams(name=tool.name, arguments=pending.args)
        fwd = _Forward(upstream_call, types.CallToolRequest(params=params), state, None)
        token = _current.set(fwd)
        try:
            out = await self.pipeline.resume(tool, site, pending, decision, recorder)
        except Exception:
            await recorder.release()  # rows a failing step left held: recorded
            raise
        finally:
            _current.reset(token)
        await recorder.release()  # rows a later step refused on (S3)
        if isinstance(out, Paused):
            return out
        return cast(types.CallToolResult, self._answer(out, fwd, recorder, state))

    def _answer(
        self, out: Outcome, fwd: _Forward, recorder: Any, state: CallState
    ) -> types.CallToolResult | dict[str, Any]:
        """What the client receives for a walked call (S4, P14, P27)."""
        if isinstance(out, Refused) or (isinstance(out, Ran) and out.denied):
            state.reason = RejectionReason.POLICY_DENIED
            state.middleware = recorder.refused_by
            return _refusal(out.text, recorder.refused_by)
        assert isinstance(out, Ran)
        if fwd.error is not None:
            # S4 wins over P25 here (docs/laws.md, H6): the upstream's error
            # is the tool's raise; the client gets the walk's verdict on it.
            return _errored(out)
        if recorder.changed_by is None and fwd.result is not None:
            own: types.CallToolResult | dict[str, Any] = fwd.result
            return own  # no link changed it: the upstream's own answer
        state.changed_by = recorder.changed_by
        return _transformed(out, fwd.result, recorder.value)


def _errored(out: Ran) -> types.CallToolResult:
    """S4: an upstream that answered with an error, after the after-tool
    walk (``error=True``): ``is_error=True`` whose text is the walk's verdict
    (the upstream's message where no link changed it)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=out.text)], is_error=True
    )


def _transformed(out: Ran, upstream: Any, value: Any) -> types.CallToolResult:
    """A link's transform, as the client receives it (S4: serialized; P27).

    Structured content follows the transform where the upstream sent some:
    the transformed object itself (its compact JSON the text, as S9's), or
    the text under the ``result`` key where the upstream wrapped a primitive
    there. The upstream's own structured value never survives a transform
    (it may hold what a link removed); a value that is not structured
    content (text for an object) leaves none, and the schema check
    (``_outputs.judge``) refuses the result on the record.
    """
    held = _structured_of(upstream)
    if held is None or out.error:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=out.text)], is_error=out.error
        )
    if _wrapped(held):
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=out.text)],
            structured_content={"result": out.text},
        )
    value = structured(value)  # the last transform's (``Ran.result`` is the tool's)
    if not isinstance(value, dict):
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=out.text)]
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=compact_json(value))],
        structured_content=value,
    )
