"""H4, H6: the proxy's edge against a hostile or careless client (issue 24, 5).

Pattern: the proxy served by uvicorn on a free loopback port in this
         process (``proxy.http_server()``), spoken to by the SDK's
         Streamable HTTP client and by raw HTTP requests; the stdio-style
         session in memory (``proxied``) where the transport does not matter.
Role:    unit tests for ``gateway/_withheld.py`` and the edge of
         ``proxy/_http.py``, ``proxy/_proxy.py``, ``proxy/_audit.py``,
         ``proxy/_calls.py`` and ``proxy/_governance.py``.
Emits:   nothing.

Laws: H4 (withheld errors), H6 (typed 400s, ``"id": null``, one path, the
sensitivity mapping and the str secret, awaited observers, the closed set
of rejection reasons), S4 over P25 on the governed route.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2 as httpx
import mcp.types as types
import pytest
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from helmlog import ToolMiddleware, allow
from helmlog.events import MemoryEventStore, ProxyCallFinished, verify_chain
from helmlog.gateway import McpProxy, ProxyAudit, verify_manifest
from helmlog.gateway.proxy._audit import chain_key

from .http_helpers import HEADERS, INITIALIZE, answer_of, http_client
from .proxy_helpers import proxied, text_of
from .upstream_server import UPSTREAM

LEAK = "KMS unavailable at https://kms.internal/?token=SECRET123"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _leaky_key() -> bytes:
    raise RuntimeError(LEAK)


def _logged(caplog: pytest.LogCaptureFixture, error_id: str) -> list[str]:
    """The text of every log record (traceback included) naming ``error_id``."""
    out = []
    for record in caplog.records:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        if error_id in text:
            out.append(text)
    return out


@asynccontextmanager
async def _session(
    proxy: McpProxy,
) -> AsyncIterator[tuple[httpx.AsyncClient, str, dict[str, str]]]:
    """A raw client, the URL and the headers of one initialized HTTP session."""
    async with (
        proxy,
        proxy.http_server() as url,
        httpx.AsyncClient(timeout=30) as http,
    ):
        init = await http.post(url, json=INITIALIZE, headers=HEADERS)
        assert 200 == init.status_code
        head = {
            **HEADERS,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        assert 202 == (await http.post(url, json=INITIALIZED, headers=head)).status_code
        yield http, url, head


def _call(rid: int, name: str = "echo", **args: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": args or {"word": "x"}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


# -- errors: a fixed message and an id; the text only in the log -------------


async def test_h4_a_key_providers_text_reaches_the_log_not_the_http_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """H4, P21: the client's error is fixed with an id; the log holds the text."""
    proxy = McpProxy(UPSTREAM, audit=ProxyAudit(_leaky_key))
    async with proxy, proxy.http_server() as url, http_client(url) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "x"})
    error = raised.value.error
    assert isinstance(error.data, dict)
    eid = error.data["error_id"]
    assert "SECRET123" not in error.model_dump_json()
    assert (
        "the proxy's ledger could not record this call: the audit key could not"
        f" be derived (error id {eid})",
        "LEDGER_UNAVAILABLE",
    ) == (error.message, error.data["rejection_reason"])
    (logged,) = _logged(caplog, eid)
    assert "SECRET123" in logged


async def test_h4_a_stores_text_reaches_the_log_not_the_stdio_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """H4, P20: a store's failure: the same on a stdio-style session."""

    class Leaky(MemoryEventStore):
        async def append_sealed(self, *args: Any, **kw: Any) -> int:
            raise OSError("redis://:SECRET123@store.internal refused")

    proxy = McpProxy(UPSTREAM, audit=ProxyAudit(b"k", store=Leaky()))
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("echo", {"word": "x"})
    error = raised.value.error
    assert isinstance(error.data, dict)
    assert "SECRET123" not in error.model_dump_json()
    assert error.message.endswith(f"(error id {error.data['error_id']})")
    assert any("SECRET123" in t for t in _logged(caplog, error.data["error_id"]))


async def test_h4_a_raising_resource_layer_is_withheld_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """H4: a handler's failure is not the SDK's ``str(err)`` with code 0."""

    async def broken(req: Any, next: Any, ctx: Any) -> Any:
        raise RuntimeError("SECRET123 in a resource layer")

    proxy = McpProxy(UPSTREAM, resource_middleware=[broken])
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource("data://public")  # type: ignore[arg-type]
    error = raised.value.error
    assert isinstance(error.data, dict)
    assert (types.INTERNAL_ERROR, False) == (error.code, "SECRET123" in error.message)
    assert _logged(caplog, error.data["error_id"])


async def test_h4_an_upstream_that_went_away_is_named_only_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """H4, P25: an upstream whose command line holds a token dies mid-call:
    the client hears that it went away, the log which one and why."""
    command = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]
    proxy = McpProxy([*command, "--token=SECRET123"])
    async with proxied(proxy) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("die", {})
    error = raised.value.error
    assert isinstance(error.data, dict)
    assert "SECRET123" not in error.model_dump_json()
    assert error.message.startswith("the upstream MCP server went away (error id")
    assert any("SECRET123" in t for t in _logged(caplog, error.data["error_id"]))


# -- malformed messages to a live session: typed 400s -------------------------


@pytest.mark.parametrize(
    ("body", "code", "rid"),
    [
        (b"\xff\xfe{\x00", types.PARSE_ERROR, None),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "x"\xc3}', types.PARSE_ERROR, None),
        (b'{"jsonrpc": "2.0", "id": 1,', types.PARSE_ERROR, None),
        (b"", types.PARSE_ERROR, None),
        (b"[1, 2]", types.INVALID_REQUEST, None),
        (b'"tools/list"', types.INVALID_REQUEST, None),
        (b"null", types.INVALID_REQUEST, None),
        (b'{"id": 5, "method": "tools/list"}', types.INVALID_REQUEST, 5),
        (
            b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"}',
            types.INVALID_REQUEST,
            None,
        ),
        (b'{"jsonrpc": "2.0", "id": true, "method": "x"}', types.INVALID_REQUEST, None),
    ],
)
async def test_h6_a_malformed_message_to_a_live_session_is_a_typed_400(
    body: bytes, code: int, rid: int | None
) -> None:
    """H6: parse error / invalid request, HTTP 400, id null unless the request
    had a usable one; the session lives on."""
    async with _session(McpProxy(UPSTREAM)) as (http, url, head):
        answer = await http.post(url, content=body, headers=head)
        after = await http.post(url, json=_call(7), headers=head)
    assert (400, "2.0", rid, code) == (
        answer.status_code,
        answer.json()["jsonrpc"],
        answer.json()["id"],
        answer.json()["error"]["code"],
    )
    assert (200, "X") == (
        after.status_code,
        answer_of(after)["result"]["content"][0]["text"],
    )


async def test_h6_a_malformed_initialize_makes_no_session() -> None:
    """H6, P18: non-UTF-8 or a broken initialize: 400, nothing left behind."""
    proxy = McpProxy(UPSTREAM)
    bodies = [b"\xff\xfe", b'{"jsonrpc": "2.0", "id": [], "method": "initialize"}']
    async with proxy, proxy.http_server() as url, httpx.AsyncClient() as http:
        answers = [await http.post(url, content=b, headers=HEADERS) for b in bodies]
    assert [(400, None)] * 2 == [(a.status_code, a.json()["id"]) for a in answers]
    assert set() == proxy.sessions


# -- error bodies whose request id is unknown: "id": null ---------------------


async def test_h6_the_413_and_503_bodies_carry_a_null_id() -> None:
    """H6, P11: JSON-RPC 2.0's null id, not "server-error"."""
    small = McpProxy(UPSTREAM, max_body_bytes=64)
    async with small, small.http_server() as url, httpx.AsyncClient() as http:
        big = await http.post(url, json={"pad": "x" * 100}, headers=HEADERS)
    full = McpProxy(UPSTREAM, max_sessions=0)
    async with full, full.http_server() as url, httpx.AsyncClient() as http:
        busy = await http.post(url, json=INITIALIZE, headers=HEADERS)
    assert [(413, None, "BODY_LIMIT"), (503, None, "SESSION_LIMIT")] == [
        (a.status_code, a.json()["id"], a.json()["error"]["data"]["rejection_reason"])
        for a in (big, busy)
    ]


async def test_h6_the_sdk_transports_error_bodies_carry_a_null_id() -> None:
    """H6: 406 (Accept), 405 (method) and 404 (terminated) from the SDK transport."""
    async with _session(McpProxy(UPSTREAM)) as (http, url, head):
        no_accept = await http.post(
            url, json=_call(3), headers={**head, "accept": "text/plain"}
        )
        put = await http.put(url, json=_call(4), headers=head)
    answers = [no_accept, put]
    assert [(406, None), (405, None)] == [
        (a.status_code, a.json()["id"]) for a in answers
    ]
    assert all(a.headers["content-length"] == str(len(a.content)) for a in answers)


# -- one path -----------------------------------------------------------------


async def test_h6_the_trailing_slash_path_is_not_a_second_endpoint() -> None:
    """H6: ``/mcp/`` answers 404 (a JSON-RPC error) and opens no session."""
    proxy = McpProxy(UPSTREAM)
    async with proxy, proxy.http_server() as url, httpx.AsyncClient() as http:
        slash = await http.post(url + "/", json=INITIALIZE, headers=HEADERS)
        sessions_after_slash = len(proxy.sessions)
        plain = await http.post(url, json=INITIALIZE, headers=HEADERS)
    assert (404, None, 0, 200) == (
        slash.status_code,
        slash.json()["id"],
        sessions_after_slash,
        plain.status_code,
    )


# -- sensitivity as a mapping; a str secret ----------------------------------


async def test_h6_a_sensitivity_mapping_is_honoured_per_tool() -> None:
    """H6, P23: {"echo": "low"}: echo stored raw; refund (not named) sealed."""
    store = MemoryEventStore()
    proxy = McpProxy(
        UPSTREAM,
        audit=ProxyAudit(b"k", store=store),
        sensitivity={"echo": "low"},
    )
    async with proxied(proxy) as client:
        await client.call_tool("echo", {"word": "x"})
        await client.call_tool("refund", {"amount": 1})
    (sid,) = await store.sessions()
    finished = [
        e
        for e in (r.decode() for r in await store.read(sid))
        if isinstance(e, ProxyCallFinished)
    ]
    assert [
        ("echo", "low", {"word": "x"}, False),
        ("refund", "high", None, True),
    ] == [
        (e.tool, e.sensitivity, e.input_raw, e.input_sealed is not None)
        for e in finished
    ]


def test_h6_a_sensitivity_the_proxy_cannot_use_is_refused_at_construction() -> None:
    """H6: an unknown tier or a non-mapping, non-function is a typed error now."""
    with pytest.raises(ValueError, match="'secret' is not one of low, medium, high"):
        McpProxy(UPSTREAM, sensitivity={"echo": "secret"})
    with pytest.raises(TypeError, match="McpProxy sensitivity"):
        McpProxy(UPSTREAM, sensitivity=["echo"])  # type: ignore[arg-type]


async def test_h6_a_str_secret_is_used_as_its_utf8_bytes() -> None:
    """H6, P21, P22: ProxyAudit("a-str-secret") records and chains every call."""
    store = MemoryEventStore()
    manifests: list[Any] = []
    proxy = McpProxy(
        UPSTREAM,
        audit=ProxyAudit("a-str-secret", store=store),
        on_manifest=manifests.append,
    )
    async with proxied(proxy) as client:
        out = await client.call_tool("echo", {"word": "x"})
    (sid,) = await store.sessions()
    records = await store.read(sid)
    assert ("X", None) == (
        text_of(out),
        verify_chain(records, chain_key(b"a-str-secret")),
    )
    assert [True] == [verify_manifest(m, b"a-str-secret") for m in manifests]


def test_h6_a_secret_of_another_type_is_refused_at_construction() -> None:
    """H6: not bytes, str or a function: TypeError; empty: ValueError."""
    with pytest.raises(TypeError, match="ProxyAudit secret"):
        ProxyAudit(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be empty"):
        ProxyAudit("")


# -- async observers are awaited ----------------------------------------------


async def test_h6_async_observers_are_awaited_in_order() -> None:
    """H6, P15, P22: async on_telemetry/on_event/on_manifest run, and have run
    by the time the call's answer (or the session's end) is back."""
    heard: list[str] = []

    async def on_telemetry(event: Any) -> None:
        await anyio.sleep(0)
        heard.append(f"telemetry {event.outcome}")

    async def on_event(event: Any) -> None:
        await anyio.sleep(0)
        heard.append(event.type)

    async def on_manifest(manifest: Any) -> None:
        await anyio.sleep(0)
        heard.append(f"manifest {manifest['event_count']}")

    proxy = McpProxy(
        UPSTREAM,
        audit=ProxyAudit(b"k"),
        on_telemetry=on_telemetry,
        on_event=on_event,
        on_manifest=on_manifest,
    )
    async with proxied(proxy) as client:
        await client.call_tool("echo", {"word": "x"})
        by_the_answer = list(heard)
    assert [
        "proxy.call_started",
        "proxy.call_finished",
        "telemetry success",
    ] == by_the_answer
    assert ["proxy.session_closed", "manifest 2"] == heard[3:]


async def test_h6_an_async_observer_that_never_returns_is_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """H6, P16: one that hangs is cancelled at observer_timeout_s; the call answers."""

    async def hangs(event: Any) -> None:
        await anyio.sleep_forever()

    proxy = McpProxy(UPSTREAM, on_telemetry=hangs, observer_timeout_s=0.2)
    async with proxied(proxy) as client:
        out = await client.call_tool("echo", {"word": "x"})
    assert "X" == text_of(out)
    assert any("on_telemetry did not finish" in r.getMessage() for r in caplog.records)


# -- only the closed set of rejection reasons --------------------------------


async def _no_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[])


def _refusing() -> Server[Any]:
    """An upstream whose every tool answers an MCP error whose
    ``data.rejection_reason`` is the tool's name."""

    async def refuse(ctx: Any, params: types.CallToolRequestParams) -> Any:
        raise MCPError(-32000, "no", {"rejection_reason": params.name})

    return Server("refusing", on_call_tool=refuse, on_list_tools=_no_tools)


async def test_h6_only_the_closed_set_is_recorded_as_a_rejection() -> None:
    """H6, P11, P15, P20: "MADE_UP" is a plain upstream error; TOOL_HIDDEN is one."""
    seen: list[Any] = []
    store = MemoryEventStore()
    proxy = McpProxy(
        _refusing(), on_telemetry=seen.append, audit=ProxyAudit(b"k", store=store)
    )
    async with proxied(proxy) as client:
        for name in ("MADE_UP", "TOOL_HIDDEN"):
            with pytest.raises(MCPError):
                await client.call_tool(name, {})
    (sid,) = await store.sessions()
    finished = [
        (e.outcome, e.rejection_reason)
        for e in (r.decode() for r in await store.read(sid))
        if isinstance(e, ProxyCallFinished)
    ]
    expected = [("error", None), ("rejected", "TOOL_HIDDEN")]
    assert expected == [(e.outcome, e.rejection_reason) for e in seen] == finished


# -- S4 over P25: an upstream error on the governed route ---------------------


def _erring() -> Server[Any]:
    async def refuse(ctx: Any, params: types.CallToolRequestParams) -> Any:
        raise MCPError(-32042, "upstream says no")

    return Server("erring", on_call_tool=refuse, on_list_tools=_no_tools)


async def test_h6_s4_an_upstream_error_under_governance_is_the_walks_verdict() -> None:
    """S4 wins over P25 on the governed route: the after-tool walk sees
    ``error=True`` and the client gets ``is_error=True`` with its verdict."""
    walked: list[tuple[Any, bool]] = []

    def look(r: Any) -> Any:
        walked.append((r.result, r.error))
        return allow()

    looks = ToolMiddleware(name="looks", on_tool_result=look)
    tags = ToolMiddleware(
        name="tags", on_tool_result=lambda r: allow(f"[tagged] {r.result}", "tag")
    )
    async with proxied(McpProxy(_erring(), governance=[looks])) as client:
        unchanged = await client.call_tool("any", {})
    async with proxied(McpProxy(_erring(), governance=[tags])) as client:
        changed = await client.call_tool("any", {})
    assert [("upstream says no", True)] == walked
    assert [(True, "upstream says no"), (True, "[tagged] upstream says no")] == [
        (r.is_error, text_of(r)) for r in (unchanged, changed)
    ]


async def test_h6_p25_an_upstream_error_without_governance_is_relayed_raw() -> None:
    """P25 on the other routes: the upstream's own MCP error, unchanged."""
    proxy = McpProxy(_erring(), pass_through_tools=["passed"])
    async with proxied(proxy) as client:
        raised = []
        for name in ("any", "passed"):
            with pytest.raises(MCPError) as error:
                await client.call_tool(name, {})
            raised.append(error.value.error)
    assert [(-32042, "upstream says no")] * 2 == [(e.code, e.message) for e in raised]


async def test_h6_s4_over_http_the_client_gets_a_tool_error() -> None:
    """S4 over the HTTP transport with the SDK client: the same result."""
    proxy = McpProxy(
        _erring(),
        governance=[ToolMiddleware(name="n", on_tool_result=lambda r: allow())],
    )
    async with proxy, proxy.http_server() as url, http_client(url) as client:
        out = await client.call_tool("any", {})
    assert (True, "upstream says no") == (out.is_error, text_of(out))
    assert json.loads(out.model_dump_json(by_alias=True))["isError"] is True
