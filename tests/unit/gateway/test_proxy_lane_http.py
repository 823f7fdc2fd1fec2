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
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp.types as types
from mcp.server.lowlevel import Server as LowServer
from mcp.shared.exceptions import MCPError

from helmlog.gateway import McpProxy, ProxyAudit
from helmlog.gateway._tasks import TASKS_EXTENSION
from helmlog.gateway._uvicorn import Server, server_config, serving

from ...polling import until
from . import proxy_lane_server as lane_server
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
    proxy: McpProxy, cases: list[Sent], fast: bool, kernel: bool | None = None
) -> tuple[dict[int, Any], int]:
    proxy.fast_calls = fast
    out: dict[int, Any] = {}
    async with (
        proxy,
        _served(proxy) as (url, app),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        app.lane.kernel = kernel
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


async def test_p25_p20_the_http_lane_answers_alike_with_and_without_the_kernel() -> (
    None
):
    """P25, P20: the lane's own run of the kernel's steps for a plain call
    and the SDK's kernel itself (``serve_one``, what the lane runs when a
    tracer provider is set) answer every case alike and record the same
    rows; both take the same plain calls."""
    cases = _cases()
    rows: dict[bool, list[Any]] = {True: [], False: []}
    answers = {}
    counts = {}
    for kernel in (False, True):
        answers[kernel], counts[kernel] = await _answers(
            _audited(rows[kernel]), cases, True, kernel=kernel
        )
    assert answers[True] == answers[False]
    assert _finished(rows[True]) == _finished(rows[False])
    assert (len(LANE_TAKES), len(LANE_TAKES)) == (counts[False], counts[True])


def _governed(rows: list[Any]) -> McpProxy:
    return McpProxy(
        lane_server.UPSTREAM,
        governance=[lane_server.RULE],
        hidden_tools={"hidden"},
        audit=ProxyAudit(b"the secret", "k1"),
        sensitivity=lambda tool, identity, args: "low",
        on_event=rows.append,
    )


async def test_p25_p20_p14_a_governed_call_on_the_http_lane_is_the_sdk_entrys() -> None:
    """P25, P20, P14, P27: with a governance rule (the model path), a plain
    call, a tool error, a structured result the rule rewrites, a refusal and
    a hidden tool answer and audit alike with the lane on (kernel-free and
    through the kernel) and off; a call whose client declares the tasks
    extension (S10: a task may answer it) is the SDK's."""
    tasks = {"extensions": {TASKS_EXTENSION: {}}}
    declaring = _call(6, "echo", {"word": "t"})
    declaring[0]["params"]["_meta"] = {
        **ENVELOPE,
        "io.modelcontextprotocol/clientCapabilities": tasks,
    }
    cases = [
        _call(1, "echo", {"word": "hi"}),
        _call(2, "explode", {}),
        _call(3, "record", {"name": "ada"}),
        _call(4, "forbidden", {}),
        _call(5, "hidden", {}),
        declaring,
    ]
    modes: list[tuple[bool, bool | None]] = [(False, None), (True, False), (True, True)]
    rows: dict[Any, list[Any]] = {mode: [] for mode in modes}
    answers = {}
    counts = {}
    for fast, kernel in modes:
        mode = (fast, kernel)
        answers[mode], counts[mode] = await _answers(
            _governed(rows[mode]), cases, fast, kernel=kernel
        )
    off = answers[(False, None)]
    assert [off, off] == [answers[(True, False)], answers[(True, True)]]
    finished = [_finished(rows[mode]) for mode in modes]
    assert [finished[0], finished[0]] == finished[1:]
    assert [0, 5, 5] == [counts[mode] for mode in modes]
    assert "HI" == off[1][2]["result"]["content"][0]["text"]
    assert "***-**-****" == off[3][2]["result"]["structuredContent"]["ssn"]
    assert off[4][2]["result"]["isError"]
    assert "T" == off[6][2]["result"]["content"][0]["text"]


def _span_lines(script: list[str]) -> list[Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.unit.gateway.proxy_lane_traced", *script],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line]


def test_p25_with_a_tracer_provider_the_lanes_calls_carry_the_sdks_span() -> None:
    """P25: in a process with a tracer provider set, a plain call the lane
    answers records the SDK's server span for it, the same span (name, kind,
    attributes) as with the lane off."""
    with http_upstream() as upstream:
        on, off = _span_lines([upstream])
    assert (1, 0) == (on["answered"], off["answered"])
    assert off["spans"] == on["spans"]
    assert [["tools/call echo", "SpanKind.SERVER"]] == [s[:2] for s in on["spans"]]
    assert "execute_tool" == on["spans"][0][2]["gen_ai.operation.name"]
    assert "HI" == on["text"] == off["text"]


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
    """An upstream whose tool ``route`` declares an ``Mcp-Param-Region``
    header, and whose tool ``plain`` declares none."""
    tool = types.Tool(
        name="route",
        input_schema={
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        },
    )
    plain = types.Tool(
        name="plain",
        input_schema={"type": "object", "properties": {"region": {"type": "string"}}},
    )

    async def listed(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool, plain])

    async def called(ctx: Any, params: Any) -> types.CallToolResult:
        region = (params.arguments or {}).get("region")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=region)]
        )

    return LowServer("params", on_list_tools=listed, on_call_tool=called)


async def test_p25_mcp_param_headers_are_checked_as_the_sdk_checks_them() -> None:
    """P25: with the tools' schemas listed through the proxy, a call whose
    ``Mcp-Param-Region`` header agrees is the lane's; one that disagrees or
    is missing is refused by the SDK, on and off alike; a header a tool does
    not declare is checked by nothing (the lane's, as the SDK passes it)."""
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
        _with(_call(4, "plain", args), ("mcp-param-region", "us")),
    ]
    answers = {}
    counts = {}
    for fast in (True, False):
        answers[fast], counts[fast] = await _answers(
            McpProxy(_param_server()), cases, fast
        )
    assert answers[False] == answers[True]
    assert (2, 0) == (counts[True], counts[False])
    assert "eu" == answers[True][2][2]["result"]["content"][0]["text"]
    assert {400} == {answers[True][n][0] for n in (3, 4)}
    assert "eu" == answers[True][5][2]["result"]["content"][0]["text"]


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
