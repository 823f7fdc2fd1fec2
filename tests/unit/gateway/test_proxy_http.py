"""P11, P17–P19, P24: the proxy over Streamable HTTP — sessions, limits, hardening.

Pattern: the proxy served by uvicorn on a free loopback port in this
         process (``proxy.http_server()``), spoken to by the SDK's
         Streamable HTTP client and by raw HTTP requests.
Role:    unit tests for ``gateway/proxy/_http.py``.
Emits:   nothing.

Laws: P7 (HTTP context), P11, P17, P18, P19, P24.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2 as httpx

from helmlog.gateway import McpProxy, ProxyContext

from ...polling import until
from .http_helpers import HEADERS, INITIALIZE, http_client, post
from .upstream_server import UPSTREAM


async def test_p17_an_http_session_has_its_context_and_identity() -> None:
    """P7, P17: http transport, session id, clean headers, identity resolved once."""
    seen: list[ProxyContext] = []
    resolved: list[str] = []
    telemetry: list[Any] = []

    async def grab(req: Any, next: Any, ctx: ProxyContext) -> Any:
        seen.append(ctx)
        return await next(req)

    def resolve(headers: Any) -> Any:
        resolved.append(headers.get("authorization", ""))
        return ({"sub": "ann"}, [{"sub": "agent"}])

    proxy = McpProxy(
        UPSTREAM,
        tool_middleware=[grab],
        resolve_identity=resolve,
        on_telemetry=telemetry.append,
    )
    headers = {"Authorization": "Bearer t", "X-Tenant": "acme"}
    async with proxy, proxy.http_server() as url, http_client(url, headers) as client:
        await client.call_tool("echo", {"word": "a"})
        await client.call_tool("echo", {"word": "b"})
    ctx = seen[0]
    assert ("http", {"sub": "ann"}, ({"sub": "agent"},)) == (
        ctx.transport,
        ctx.identity,
        ctx.delegated_from,
    )
    assert ctx.session_id is not None and ctx.session_id == seen[1].session_id
    assert ctx.headers is not None and "acme" == ctx.headers["x-tenant"]
    assert "authorization" not in ctx.headers
    assert ["Bearer t"] == resolved
    assert [{"sub": "ann"}] * 2 == [e.identity for e in telemetry]
    assert [ctx.session_id] * 2 == [e.session_id for e in telemetry]


async def test_p17_a_raising_resolver_answers_401_and_makes_no_session() -> None:
    """P17: 401, no session left behind."""

    def refuse(headers: Any) -> Any:
        raise PermissionError("who are you")

    proxy = McpProxy(UPSTREAM, resolve_identity=refuse)
    async with proxy, proxy.http_server() as url:
        answer = await post(url, INITIALIZE)
        assert 401 == answer.status_code
        assert set() == proxy.sessions


async def test_p17_an_unknown_session_answers_404() -> None:
    """P17: a request naming a session the proxy does not hold is not found."""
    proxy = McpProxy(UPSTREAM)
    async with proxy, proxy.http_server() as url:
        answer = await post(
            url,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"mcp-session-id": "0" * 32},
        )
    assert 404 == answer.status_code


async def test_p11_the_session_cap_answers_503_with_session_limit() -> None:
    """P11, P24: max_sessions=0 refuses every initialize: 503 + SESSION_LIMIT."""
    proxy = McpProxy(UPSTREAM, max_sessions=0)
    async with proxy, proxy.http_server() as url:
        answer = await post(url, INITIALIZE)
    assert 503 == answer.status_code
    assert {"rejection_reason": "SESSION_LIMIT"} == answer.json()["error"]["data"]


async def test_p17_initializing_sessions_count_toward_the_cap() -> None:
    """P17: two concurrent initializes with max_sessions=1: exactly one 503."""

    async def slow(headers: Any) -> Any:
        await anyio.sleep(0.3)  # not a wait: a slow resolver, so the two overlap
        return "someone"

    proxy = McpProxy(UPSTREAM, max_sessions=1, resolve_identity=slow)
    statuses: list[int] = []
    async with proxy, proxy.http_server() as url:

        async def one() -> None:
            statuses.append((await post(url, INITIALIZE)).status_code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            tg.start_soon(one)
    assert [200, 503] == sorted(statuses)


async def test_p11_an_oversized_body_answers_413_with_body_limit() -> None:
    """P11: 413 + BODY_LIMIT, before any session exists."""
    proxy = McpProxy(UPSTREAM, max_body_bytes=1024)
    async with proxy, proxy.http_server() as url:
        answer = await post(url, b"{" + b" " * 4096 + b"}")
        assert set() == proxy.sessions
    assert 413 == answer.status_code
    assert {"rejection_reason": "BODY_LIMIT"} == answer.json()["error"]["data"]


async def test_p24_bad_requests_get_clear_answers() -> None:
    """P24: not an initialize without a session 400; malformed JSON 400 (-32700)."""
    proxy = McpProxy(UPSTREAM)
    async with proxy, proxy.http_server() as url:
        listing = await post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        broken = await post(url, b"{not json")
        assert set() == proxy.sessions
    assert 400 == listing.status_code
    assert (400, -32700) == (broken.status_code, broken.json()["error"]["code"])


async def test_p24_host_and_origin_are_checked_against_an_allow_list() -> None:
    """P24: DNS rebinding: a foreign Host or Origin answers 403."""
    proxy = McpProxy(UPSTREAM)
    async with proxy, proxy.http_server() as url:
        host = await post(url, INITIALIZE, {"host": "evil.example"})
        origin = await post(url, INITIALIZE, {"origin": "http://evil.example"})
        local = await post(url, INITIALIZE, {"origin": "http://localhost:3000"})
    assert (403, 403, 200) == (
        host.status_code,
        origin.status_code,
        local.status_code,
    )


async def test_p18_delete_ttl_and_shutdown_each_close_a_session_once() -> None:
    """P18: every session end calls on_session_closed exactly once, and removes it."""
    closed: list[str] = []
    proxy = McpProxy(UPSTREAM, on_session_closed=closed.append)
    async with proxy:
        async with proxy.http_server() as url:
            async with http_client(url) as client:  # DELETE on exit
                await client.list_tools()
            assert 1 == len(closed)
            async with http_client(url) as client:  # still open at shutdown
                await client.list_tools()
                live = next(iter(proxy.sessions)).session_id
        assert 2 == len(closed) and live == closed[1]
        ttl = McpProxy(UPSTREAM, on_session_closed=closed.append, session_ttl_s=0.3)
        async with ttl, ttl.http_server() as url:
            answer = await post(url, INITIALIZE)
            sid = answer.headers["mcp-session-id"]
            await until("every session closed once", lambda: len(closed) == 3, 10.0)
            after = await post(
                url,
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"mcp-session-id": sid},
            )
    assert [sid] == closed[2:]
    assert 404 == after.status_code
    assert 3 == len(set(closed))


async def test_p19_another_sessions_last_event_id_replays_nothing() -> None:
    """P19: per-session event stores, 128-bit ids; a foreign id answers 404."""
    proxy = McpProxy(UPSTREAM)
    async with proxy, proxy.http_server() as url:
        first = await post(url, INITIALIZE)
        second = await post(url, INITIALIZE)
        ids = [
            line.split(":", 1)[1].strip()
            for line in first.text.splitlines()
            if line.startswith("id:")
        ]
        assert ids and all(32 == len(i) and int(i, 16) >= 0 for i in ids)
        async with httpx.AsyncClient(timeout=10) as http:
            foreign = await http.get(
                url,
                headers={
                    **HEADERS,
                    "accept": "text/event-stream",
                    "mcp-session-id": second.headers["mcp-session-id"],
                    "last-event-id": ids[0],
                },
            )
    assert 404 == foreign.status_code
    assert "Unknown Last-Event-ID" == foreign.json()["error"]["message"]


async def test_p19_a_valid_last_event_id_replays_only_its_streams_later_events() -> (
    None
):
    """P19: replay after an id sends that stream's later events, no other stream's."""
    import mcp.types as types

    from helmlog.gateway.proxy._resume import SessionEventStore

    def note(n: int) -> types.JSONRPCMessage:
        return types.JSONRPCNotification(jsonrpc="2.0", method=f"n{n}")

    store = SessionEventStore()
    first = await store.store_event("a", note(1))
    await store.store_event("b", note(2))
    await store.store_event("a", note(3))
    sent: list[str] = []

    async def send(event: Any) -> None:
        sent.append(event.message.method)

    assert "a" == await store.replay_events_after(first, send)
    assert ["n3"] == sent
    assert None is await store.replay_events_after("f" * 32, send)
