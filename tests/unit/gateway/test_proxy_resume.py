"""P19 over a live reconnect: a cut SSE stream resumes in its own session only.

Pattern: the proxy's ASGI app served by uvicorn in this process (so the test
         can cut one request's SSE stream on the server side, as a dropped
         connection would), the SDK's Streamable HTTP client in front, the
         in-process FastMCP upstream behind, and a raw GET for the foreign
         session.
Role:    unit tests for ``gateway/proxy/_http.py``'s per-session event stores.
Emits:   nothing.

Laws: P19 (the client reconnects with ``Last-Event-ID`` and receives the
events it missed, the call completes; another session presenting that id
replays nothing; event ids are 128 random bits, distinct across sessions).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2 as httpx
import mcp.types as types
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import ClientMessageMetadata

from helmlog.gateway import McpProxy

from ...polling import until
from .http_helpers import HEADERS
from .proxy_helpers import RequestIds
from .upstream_server import GATES, UPSTREAM


@asynccontextmanager
async def _served(app: Any) -> AsyncIterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        await until("uvicorn", lambda: server.started, 15.0)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[tuple[ClientSession, RequestIds, str]]:
    seen: list[str] = []

    async def session_of(response: httpx.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid is not None and sid not in seen:
            seen.append(sid)

    async with (
        httpx.AsyncClient(timeout=30, event_hooks={"response": [session_of]}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
    ):
        ids = RequestIds(write)
        async with ClientSession(read, ids) as session:
            await session.initialize()
            (sid,) = seen  # the v2 transport keeps its session id to itself
            yield session, ids, sid


async def test_p19_a_cut_stream_resumes_with_last_event_id_in_its_session_only() -> (
    None
):
    """P19: the reconnect replays the missed events; a foreign session gets none."""
    GATES.append(anyio.Event())
    progress: list[str | None] = []
    tokens: list[str] = []
    outcome: list[types.CallToolResult] = []
    proxy = McpProxy(UPSTREAM)
    app = proxy.http_app()
    resumes: list[tuple[str, str]] = []  # (session, Last-Event-ID) of each GET

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            if "last-event-id" in headers:
                resumes.append((headers["mcp-session-id"], headers["last-event-id"]))
        await app(scope, receive, send)

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def on_token(token: str) -> None:
        tokens.append(token)

    async with (
        proxy,
        _served(watched) as url,
        _client(url) as (client, ids, sid),
        _client(url) as (_other, _other_ids, other_sid),
    ):

        async def call() -> None:
            result = await client.send_request(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(name="gated", arguments={})
                ),
                types.CallToolResult,
                metadata=ClientMessageMetadata(on_resumption_token_update=on_token),
                progress_callback=on_progress,
            )
            outcome.append(result)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until("progress 1", lambda: progress == ["before the gate"], 15.0)
            seen_before_cut = list(tokens)
            # The connection drops mid-call: the server closes this POST's stream.
            app.live[sid].transport.close_sse_stream(str(ids.sent["tools/call"]))
            GATES[-1].set()  # what follows is stored, then replayed on resume
        assert ["released"] == [
            r.content[0].text  # type: ignore[union-attr]
            for r in outcome
        ]
        assert ["before the gate", "after the gate"] == progress
        assert (sid, seen_before_cut[-1]) == resumes[0]  # resumed where cut
        assert len(tokens) > len(seen_before_cut)  # events came after the cut
        async with httpx.AsyncClient(timeout=10) as http:
            foreign = await http.get(
                url,
                headers={
                    **HEADERS,
                    "accept": "text/event-stream",
                    "mcp-session-id": other_sid,
                    "last-event-id": seen_before_cut[-1],
                },
            )
        other_events = list(app.live[other_sid].events.order)
    assert 404 == foreign.status_code
    assert "" == "".join(
        line for line in foreign.text.splitlines() if line.startswith("data:")
    )
    every = tokens + other_events
    assert all(32 == len(t) and int(t, 16) >= 0 for t in every)
    assert len(every) == len(set(every))
    numbers = sorted(int(t, 16) for t in every)
    assert all(b - a > 1 << 64 for a, b in itertools.pairwise(numbers))
