"""P25 to a dual-era upstream: each client's call in its era; its listen stream.

Pattern: the FastMCP upstream as a Streamable HTTP subprocess (it speaks both
         eras), the proxy in this process, real SDK clients in front of it:
         a 2026-era one (``server/discover``) and a 2025-era one
         (``initialize``), in memory and over Streamable HTTP.
Role:    unit tests for ``gateway/upstream/_upstream.py``'s second session
         and ``gateway/fast/upstream.py``'s 2026-07-28 POST.
Emits:   nothing.

Laws: P25 (a 2026-era client's ``tools/call`` reaches the upstream as a
2026-07-28 request and a 2025-era client's in the handshake session, with
the fast paths on and off, the same answers and audit rows; progress and a
cancel relay in the 2026 era; a tool's ``notify_tools_changed``, which
reaches only ``subscriptions/listen`` streams, reaches every live client
session through the proxy and clears its cached schemas, P27; so does one
of an upstream reached in the 2026 era alone, over HTTP and stdio).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from helmlog.events import ProxyCallFinished
from helmlog.gateway import McpProxy, ProxyAudit

from ...polling import until
from .http_helpers import http_client, http_upstream
from .proxy_helpers import text_of, through

pytestmark = pytest.mark.timeout(120)

MODERN, HANDSHAKE = "2026-07-28", "2025-11-25"


@asynccontextmanager
async def modern_through(proxy: McpProxy) -> AsyncIterator[ClientSession]:
    """One 2026-era client session (``server/discover``) with ``proxy``, in memory."""
    async with (
        create_client_server_memory_streams() as (cs, ss),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(proxy.run, *ss)
        async with ClientSession(*cs) as session:
            await session.discover()
            yield session
        tg.cancel_scope.cancel()


def _proxy(url: str, fast: bool) -> McpProxy:
    proxy = McpProxy(url)
    proxy.upstream.fast = fast
    return proxy


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "sdk"])
async def test_p25_each_client_reaches_a_dual_era_upstream_in_its_own_era(
    fast: bool,
) -> None:
    """P25: a 2026-era client's call goes as a 2026-07-28 request, a 2025-era
    client's in the handshake session; both answer as before (fast on and off)."""
    with http_upstream() as url:
        proxy = _proxy(url, fast)
        async with (
            proxy,
            modern_through(proxy) as modern,
            through(proxy) as legacy,
        ):
            eras = [
                text_of(await c.call_tool("era_seen", {})) for c in (modern, legacy)
            ]
            echoes = [
                (await c.call_tool("echo", {"word": "hi"})).model_dump(
                    exclude={"result_type", "meta"}
                )
                for c in (modern, legacy)
            ]
            assert proxy.upstream.modern is not None
            assert proxy.upstream.listening
    assert [MODERN, HANDSHAKE] == eras
    assert echoes[0] == echoes[1]
    assert "HI" == echoes[0]["content"][0]["text"]


async def test_p25_the_2026_era_calls_take_the_fast_path_and_audit_alike() -> None:
    """P25, P20: with the fast path on, a 2026-era client's plain call is one
    raw 2026-07-28 POST; its audit rows are the SDK path's and a 2025-era
    client's."""
    rows: dict[str, list[Any]] = {}
    posted: dict[str, int | None] = {}
    with http_upstream() as url:
        for case in ("modern fast", "modern sdk", "handshake"):
            events: list[Any] = []
            proxy = McpProxy(
                url,
                audit=ProxyAudit(b"the secret", "k1"),
                sensitivity=lambda tool, identity, args: "low",
                on_event=events.append,
            )
            proxy.upstream.fast = case != "modern sdk"
            client = through if case == "handshake" else modern_through
            async with proxy, client(proxy) as session:
                for word in ("a", "b"):
                    await session.call_tool("echo", {"word": word})
                posts = proxy.upstream._modern_posts
                posted[case] = None if posts is None else posts.posted
            rows[case] = _finished(events)
    assert 2 == len(rows["modern fast"])
    assert rows["modern fast"] == rows["modern sdk"] == rows["handshake"]
    assert {"modern fast": 2, "modern sdk": None, "handshake": 0} == posted


def _finished(events: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            e.tool,
            e.route,
            e.forwarded_tool,
            e.outcome,
            e.input_digest,
            e.output_digest,
            json.dumps(e.output_raw, sort_keys=True),
        )
        for e in events
        if isinstance(e, ProxyCallFinished)
    )


async def test_p25_progress_and_a_cancel_relay_in_the_2026_era(tmp_path: Path) -> None:
    """P25: a 2026-era client's progress comes back and its cancel stops the
    upstream's tool, through the 2026-07-28 session."""
    got: list[str | None] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        got.append(message)

    mark = tmp_path / "cancelled"
    with http_upstream() as url:
        proxy = McpProxy(url)
        async with proxy, modern_through(proxy) as modern:
            out = await modern.call_tool(
                "slow", {"steps": 2}, progress_callback=progress
            )
            with anyio.move_on_after(1.0):
                await modern.call_tool(
                    "sleepy_marked", {"seconds": 30, "mark": str(mark)}
                )
            await until("the upstream's cancellation", mark.exists, 10)
    assert "done 2" == text_of(out)
    assert ["step 1", "step 2"] == got
    assert "cancelled" == mark.read_text()


def _on_list_changed(seen: list[str], tag: str) -> Any:
    async def on(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            seen.append(tag)

    return on


async def test_p25_a_tools_notify_tools_changed_reaches_every_live_session() -> None:
    """P25, P27: a tool's ``notify_tools_changed`` (listen streams only) reaches
    an idle and a calling session through the proxy, and the proxy forgets
    the tool schemas it had listed."""
    seen: list[str] = []
    with http_upstream() as url:
        proxy = McpProxy(url)
        async with (
            proxy,
            through(proxy, message_handler=_on_list_changed(seen, "idle")),
            through(proxy, message_handler=_on_list_changed(seen, "caller")) as caller,
        ):
            await caller.list_tools()
            listed = proxy.routing.input_schema("echo") is not None
            await caller.call_tool("announce_changed", {})
            await until("both sessions", lambda: sorted(seen) == ["caller", "idle"], 10)
            forgotten = proxy.routing.input_schema("echo") is None
    assert ["caller", "idle"] == sorted(seen)
    assert (True, True) == (listed, forgotten)


async def test_p25_both_eras_over_http_to_a_dual_era_upstream() -> None:
    """P25 over Streamable HTTP: the SDK's 2026-era ``Client`` and a 2025-era
    session through the HTTP proxy each reach the upstream in their era."""
    with http_upstream() as url:
        proxy = McpProxy(url)
        async with proxy, proxy.http_server() as front:
            async with Client(front, cache=None) as modern:
                era_modern = text_of(await modern.call_tool("era_seen", {}))
            async with http_client(front) as legacy:
                era_legacy = text_of(await legacy.call_tool("era_seen", {}))
    assert [MODERN, HANDSHAKE] == [era_modern, era_legacy]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "sdk"])
async def test_p25_a_tools_param_header_is_learnt_by_listing_again(fast: bool) -> None:
    """P25: a 2026-era call to a tool that declares an ``Mcp-Param-*`` header,
    never listed by the proxy's 2026-era session, is refused by the upstream
    (``HEADER_MISMATCH``), listed and sent once more, as the SDK's ``Client``."""
    with http_upstream() as url:
        proxy = _proxy(url, fast)
        async with proxy, modern_through(proxy) as modern:
            first = text_of(await modern.call_tool("regional", {"region": "eu"}))
            second = text_of(await modern.call_tool("regional", {"region": "us"}))
    assert ["eu", "us"] == [first, second]


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_p25_a_2026_era_upstreams_changes_reach_every_live_session(
    transport: str,
) -> None:
    """P25: an upstream reached in the 2026 era alone (``server/discover``):
    a tool's ``notify_tools_changed`` reaches an idle and a calling session
    through the listen stream the proxy holds on its one session."""
    seen: list[str] = []
    with http_upstream() as url:
        command = [sys.executable, "-m", "tests.unit.gateway.upstream_server"]
        proxy = McpProxy(url if transport == "http" else command)
        proxy.upstream.mode = MODERN
        async with (
            proxy,
            through(proxy, message_handler=_on_list_changed(seen, "idle")),
            through(proxy, message_handler=_on_list_changed(seen, "caller")) as caller,
        ):
            assert MODERN == proxy.upstream.protocol_version
            await caller.call_tool("announce_changed", {})
            await until("both sessions", lambda: sorted(seen) == ["caller", "idle"], 10)
    assert ["caller", "idle"] == sorted(seen)
