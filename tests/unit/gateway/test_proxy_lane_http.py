"""The HTTP lane answers a 2026-07-28 ``tools/call`` POST as the SDK's entry does.

Pattern: the same raw POSTs to one proxy served on uvicorn (a free loopback
         port), fast paths on and off (``McpProxy.fast_calls``); the answers
         (status, content type, body) and the audit rows compared whole.
Role:    differential tests of ``gateway/fast/http_lane.py``.
Emits:   nothing.

Laws: P25 (results, tool errors, hidden and renamed tools, ``_meta``,
malformed params, the envelope ladder, routing and ``Mcp-Param-*`` header
checks, Accept and Content-Type refusals, an upstream's own error, an
upstream killed mid-call: the SDK's answers; a handshake-era session is not
the lane's), P20 (the same audit rows), P17/P18 (one session per request).

Why raw POSTs: the SDK's client would parse both answers into one model
and hide a difference.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp.types as types
from mcp.server.lowlevel import Server as LowServer
from mcp.shared.exceptions import MCPError

from helmlog.gateway import McpProxy, ProxyAudit
from helmlog.gateway._uvicorn import Server, server_config, serving

from ...polling import until
from .http_helpers import INITIALIZE, answer_of, http_upstream
from .proxy_stdio_server import options
from .test_proxy_fast import _finished, _unnamed
from .upstream_server import UPSTREAM

VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}
ACCEPT = "application/json, text/event-stream"
Sent = tuple[Any, list[tuple[str, str]]]  # a body (or bytes) and its headers


def _call(rid: int, name: Any, arguments: Any = None, **extra: Any) -> Sent:
    params: dict[str, Any] = {"name": name, "_meta": dict(ENVELOPE)}
    if arguments is not None:
        params["arguments"] = arguments
    params.update(extra)
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    headers = [
        ("accept", ACCEPT),
        ("content-type", "application/json"),
        ("mcp-protocol-version", VERSION),
        ("mcp-method", "tools/call"),
    ]
    if isinstance(name, str):
        headers.append(("mcp-name", name))
    return body, headers


def _with(sent: Sent, *headers: tuple[str, str], drop: str = "") -> Sent:
    body, given = sent
    return body, [h for h in given if h[0] != drop] + list(headers)


def _cases() -> list[Sent]:
    meta = {**ENVELOPE, "helmlog": {"agent": "a"}}
    no_envelope = _call(12, "echo", {"word": "x"})
    no_envelope[0]["params"]["_meta"] = {"helmlog": 1}
    no_params = _call(13, "echo")
    del no_params[0]["params"]
    return [
        _call(1, "echo", {"word": "hi"}),
        _call(2, "explode", {}),
        _call(3, "delete_everything"),
        _call(4, "alias", {"word": "x"}),
        _call(5, "meta_seen", {}, _meta=meta),
        _call(6, 5),
        _call(7, "echo", [1]),
        _call(8, "echo", {"word": "x"}, task={"ttl": 1000}),  # the SDK's
        _with(_call(9, "echo", {"word": "x"}), ("mcp-name", "other"), drop="mcp-name"),
        _with(_call(10, "echo", {"word": "x"}), ("mcp-method", "tools/call")),
        _with(
            _call(11, "echo", {"word": "x"}),
            ("accept", "text/event-stream"),
            drop="accept",
        ),
        no_envelope,
        no_params,
        _with(
            _call(14, "echo", {"word": "x"}),
            ("content-type", "text/plain"),
            drop="content-type",
        ),
        _with(
            _call(15, "echo", {"word": "x"}),
            ("mcp-protocol-version", "2099-01-01"),
            drop="mcp-protocol-version",
        ),
        _call(16, "echo", {"word": "hi"}, _meta={**ENVELOPE, "progressToken": 7}),
    ]


LANE_TAKES = {1, 2, 3, 4, 5, 7}  # plain calls that pass every SDK check (6: no
# Mcp-Name can match a name that is not a string: the ladder refuses it)


@asynccontextmanager
async def _served(proxy: McpProxy) -> AsyncIterator[tuple[str, Any]]:
    """``proxy``'s own HTTP app on uvicorn; yields its URL and the app."""
    app = proxy.http_app()
    server = Server(server_config(app, host="127.0.0.1", port=0))
    async with serving(server, name="the test proxy") as port:
        yield f"http://127.0.0.1:{port}/mcp", app


async def _post(http: httpx2.AsyncClient, url: str, sent: Sent) -> tuple[Any, ...]:
    body, headers = sent
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = await http.post(url, content=content, headers=headers)
    kind = answer.headers.get("content-type", "")
    try:
        parsed = answer_of(answer) if answer.content else None
    except ValueError:
        parsed = answer.text
    return answer.status_code, kind, parsed


async def _answers(
    proxy: McpProxy, cases: list[Sent], fast: bool
) -> tuple[dict[int, Any], int]:
    proxy.fast_calls = fast
    out: dict[int, Any] = {}
    async with (
        proxy,
        _served(proxy) as (url, app),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        for n, sent in enumerate(cases, 1):
            out[n] = await _post(http, url, sent)
        answered = app.lane.answered
    return out, answered


def _audited(rows: list[Any]) -> McpProxy:
    return McpProxy(
        UPSTREAM,
        audit=ProxyAudit(b"the secret", "k1"),
        sensitivity=lambda tool, identity, args: "low",
        on_event=rows.append,
        **options(False),
    )


async def test_p25_p20_the_http_lane_answers_and_audits_as_the_sdk_entry() -> None:
    """P25, P20: every case (results, errors, the SDK's own refusals) answers
    the same with the lane on and off, and the audit rows are the same; the
    lane takes exactly the plain calls."""
    cases = _cases()
    rows: dict[bool, list[Any]] = {True: [], False: []}
    answers = {}
    counts = {}
    for fast in (True, False):
        answers[fast], counts[fast] = await _answers(_audited(rows[fast]), cases, fast)
    assert answers[False] == answers[True]
    assert _finished(rows[False]) == _finished(rows[True])
    assert (len(LANE_TAKES), 0) == (counts[True], counts[False])
    on = answers[True]
    assert (200, "application/json") == on[1][:2]
    assert "HI" == on[1][2]["result"]["content"][0]["text"]
    assert on[2][2]["result"]["isError"]
    assert {"rejection_reason": "TOOL_HIDDEN"} == on[3][2]["error"]["data"]
    assert 406 == on[11][0]  # Accept without JSON: the SDK's 406
    assert 400 == on[14][0]  # not JSON: the SDK's 400
    assert {400} == {on[n][0] for n in (9, 10)}  # header mismatch, duplicate


async def test_p25_a_handshake_era_session_is_not_the_http_lanes() -> None:
    """P25: a call in an ``initialize`` session goes the SDK transport's way
    (its SSE answer), the lane untouched."""
    proxy = McpProxy(UPSTREAM)
    async with (
        proxy,
        _served(proxy) as (url, app),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        init = await http.post(url, json=INITIALIZE, headers=headers)
        headers["mcp-session-id"] = init.headers["mcp-session-id"]
        headers["mcp-protocol-version"] = "2025-06-18"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(url, json=note, headers=headers)
        call = {"name": "echo", "arguments": {"word": "old"}}
        request = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}
        answer = await http.post(url, json=request, headers=headers)
        answered = app.lane.answered
    assert "OLD" == answer_of(answer)["result"]["content"][0]["text"]
    assert 0 == answered


def _param_server() -> LowServer[Any]:
    """An upstream whose tool declares an ``Mcp-Param-Region`` header."""
    tool = types.Tool(
        name="route",
        input_schema={
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        },
    )

    async def listed(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def called(ctx: Any, params: Any) -> types.CallToolResult:
        region = (params.arguments or {}).get("region")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=region)]
        )

    return LowServer("params", on_list_tools=listed, on_call_tool=called)


async def test_p25_mcp_param_headers_are_checked_as_the_sdk_checks_them() -> None:
    """P25: with the tool's schema listed through the proxy, a call whose
    ``Mcp-Param-Region`` header agrees is the lane's; one that disagrees or
    is missing is refused by the SDK, on and off alike."""
    listing = {
        "jsonrpc": "2.0",
        "id": 100,
        "method": "tools/list",
        "params": {"_meta": dict(ENVELOPE)},
    }
    list_headers = [
        ("accept", ACCEPT),
        ("content-type", "application/json"),
        ("mcp-protocol-version", VERSION),
        ("mcp-method", "tools/list"),
    ]
    args = {"region": "eu"}
    cases: list[Sent] = [
        (listing, list_headers),
        _with(_call(1, "route", args), ("mcp-param-region", "eu")),
        _with(_call(2, "route", args), ("mcp-param-region", "us")),
        _call(3, "route", args),
    ]
    answers = {}
    counts = {}
    for fast in (True, False):
        answers[fast], counts[fast] = await _answers(
            McpProxy(_param_server()), cases, fast
        )
    assert answers[False] == answers[True]
    assert (1, 0) == (counts[True], counts[False])
    assert "eu" == answers[True][2][2]["result"]["content"][0]["text"]
    assert {400} == {answers[True][n][0] for n in (3, 4)}


def _erring() -> LowServer[Any]:
    async def refuse(ctx: Any, params: Any) -> Any:
        raise MCPError(-32042, "upstream says no", {"x": 1})

    async def listed(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[])

    return LowServer("erring", on_call_tool=refuse, on_list_tools=listed)


async def test_p25_an_upstreams_own_error_is_answered_unchanged_on_the_http_lane() -> (
    None
):
    """P25: an upstream's JSON-RPC error, through the lane, is the SDK's answer."""
    cases = [_call(1, "any", {})]
    answers = {}
    counts = {}
    for fast in (True, False):
        answers[fast], counts[fast] = await _answers(McpProxy(_erring()), cases, fast)
    error = {"code": -32042, "message": "upstream says no", "data": {"x": 1}}
    assert answers[False] == answers[True]
    assert (error, 1) == (answers[True][1][2]["error"], counts[True])


async def test_p25_p20_an_http_upstream_killed_under_a_lane_call() -> None:
    """P25, H4, P20: the upstream process dies mid-call (the wire's POST):
    the SDK entry's answer and audit row, the error id aside."""
    answers = {}
    rows: dict[bool, list[Any]] = {True: [], False: []}
    for fast in (True, False):
        with http_upstream() as upstream:
            proxy = McpProxy(
                upstream,
                audit=ProxyAudit(b"the secret", "k1"),
                sensitivity=lambda tool, identity, args: "low",
                on_event=rows[fast].append,
            )
            answers[fast], _ = await _answers(proxy, [_call(1, "die", {})], fast)
    assert _unnamed(answers[False]) == _unnamed(answers[True])
    message = answers[True][1][2]["error"]["message"]
    assert message.startswith("the upstream MCP server went away")
    finished = {
        fast: [(*r[:6], _unnamed({"raw": r[7]})) for r in _finished(rows[fast])]
        for fast in (True, False)
    }
    assert finished[False] == finished[True]


def _has_rows(rows: list[Any]) -> Any:
    return lambda: bool(_finished(rows))


async def test_p25_a_client_gone_mid_call_is_recorded_as_on_the_sdk_entry() -> None:
    """P25, P20: a client that gives up on a JSON answer (the 2026 revision's
    cancel is closing the connection): the call ends and is audited as on
    the SDK's entry, which does not watch the disconnect in JSON mode."""
    rows: dict[bool, list[Any]] = {True: [], False: []}
    for fast in (True, False):
        proxy = _audited(rows[fast])
        proxy.fast_calls = fast
        async with proxy, _served(proxy) as (url, _app):
            body, headers = _call(1, "sleepy", {"seconds": 0.5})
            try:
                async with httpx2.AsyncClient(timeout=0.1) as http:
                    await http.post(url, json=body, headers=headers)
            except httpx2.TimeoutException:
                pass  # the client gives up

            await until("the call's audit row", _has_rows(rows[fast]), 20.0)
    assert _finished(rows[False]) == _finished(rows[True])
    assert "woke" in json.dumps(_finished(rows[True]))
