"""P25: a 2026-era client's ``subscriptions/listen`` stream through the proxy.

Pattern: ``upstream_server.subscribing()`` (the SDK's MCPServer serving the
         handshake era's ``resources/subscribe``, noting each in a file, and
         a ``touch`` tool that sends ``notifications/resources/updated``) in
         process, and the dual-era FastMCP upstream over Streamable HTTP; real
         SDK clients in the 2026 era (``server/discover``) in front of the
         proxy, in memory and over Streamable HTTP.
Role:    unit tests for ``gateway/proxy/_listen.py`` and the session's
         ``subscriptions/listen``.
Emits:   nothing.

Laws: P25 (the 2026-07-28 revision delivers change notifications only on a
listen stream: through the proxy a 2026-era client hears its resource
updates and the upstream's list changes, the capabilities say so, and the
upstream's subscription ends with its last holder, a stream's end
included), P8/P9 (a hidden resource is not found at listen and never
reaches the upstream).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.subscriptions import listen
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from helmlog.gateway import McpProxy
from helmlog.gateway.proxy import _listen

from ...polling import until
from .http_helpers import http_upstream
from .proxy_helpers import modern_through, text_of, through
from .upstream_server import subscribing

pytestmark = [
    pytest.mark.timeout(60),
    # A 2025-era client beside the 2026-era one sends the handshake era's
    # subscribe, which the SDK's client marks deprecated.
    pytest.mark.filterwarnings("ignore:resources/.*subscribe is removed"),
]


def _lines(mark: Path) -> list[str]:
    """What the upstream noted for the URI ``mark``'s path names."""
    return mark.read_text().split() if mark.exists() else []


async def test_p25_a_listen_stream_hears_the_updates_of_its_uris_only(
    tmp_path: Path,
) -> None:
    """P25: a 2026-era client listens to one URI: the proxy subscribes to it
    upstream, the client hears its update and not another URI's, and the
    stream's end ends the upstream's subscription."""
    mark, other = tmp_path / "x", tmp_path / "y"
    proxy = McpProxy(subscribing())
    async with proxy, modern_through(proxy) as client:
        async with listen(client, resource_subscriptions=[mark.as_uri()]) as sub:
            assert [mark.as_uri()] == sub.honored.resource_subscriptions
            await client.call_tool("touch", {"uri": other.as_uri()})  # not asked
            assert "touched" == text_of(
                await client.call_tool("touch", {"uri": mark.as_uri()})
            )
            with anyio.fail_after(10):
                event = await anext(aiter(sub))
            during = _lines(mark)
        await until("the stream's unsubscribe", lambda: len(_lines(mark)) == 2, 10)
    assert ResourceUpdated(uri=mark.as_uri()) == event
    assert (["subscribe"], ["subscribe", "unsubscribe"]) == (during, _lines(mark))
    assert ([], []) == (_lines(other), proxy.subscriptions.uris())


async def test_p25_a_listen_stream_and_a_2025_era_subscriber_count_alike(
    tmp_path: Path,
) -> None:
    """P25: a 2025-era session subscribed to a URI and a 2026-era stream
    listening to it hold one upstream subscription; the stream's end does
    not end it (the other session still hears updates), its close does."""
    mark = tmp_path / "x"
    uri = mark.as_uri()
    heard: list[str] = []

    async def on(message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    proxy = McpProxy(subscribing())
    async with proxy, modern_through(proxy) as modern:
        async with through(proxy, message_handler=on) as legacy:
            await legacy.subscribe_resource(uri)
            async with listen(modern, resource_subscriptions=[uri]):
                pass
            await legacy.call_tool("touch", {"uri": uri})
            await until("the 2025-era session's update", lambda: heard, 10)
            held = _lines(mark)
        await until("the close's unsubscribe", lambda: len(_lines(mark)) == 3, 10)
    assert ["subscribe", "subscribe"] == held
    assert ("unsubscribe", [uri]) == (_lines(mark)[-1], heard)


async def test_p8_a_hidden_resource_cannot_be_listened_to(tmp_path: Path) -> None:
    """P8/P9: a listen asking for a hidden resource is "not found" with its
    reason, and the upstream never hears of it."""
    mark = tmp_path / "secret"
    uri = mark.as_uri()
    proxy = McpProxy(subscribing(), hidden_resources=[uri])
    async with proxy, modern_through(proxy) as client:
        with pytest.raises(MCPError) as refused:
            async with listen(client, resource_subscriptions=[uri]):
                pass  # pragma: no cover - refused before the ack
    assert f"Resource not found: {uri}" == refused.value.error.message
    assert ([], []) == (_lines(mark), proxy.subscriptions.uris())


async def test_p25_a_2026_era_client_over_http_hears_a_list_change() -> None:
    """P25 over Streamable HTTP: the SDK's 2026-era ``Client`` through the HTTP
    proxy sees the upstream's capabilities unchanged, listens, and hears the
    change a tool of the dual-era upstream announces; its leaving ends the
    stream (the proxy's server then closes)."""
    with http_upstream() as url:
        proxy = McpProxy(url)
        async with proxy, proxy.http_server() as front:
            async with Client(front, cache=None) as client:
                seen = client.server_capabilities
                async with client.listen(tools_list_changed=True) as sub:
                    await client.call_tool("announce_changed", {})
                    with anyio.fail_after(10):
                        event = await anext(aiter(sub))
            upstream = proxy.upstream_init.capabilities
    assert (seen.tools, seen.resources) == (upstream.tools, upstream.resources)
    assert ToolsListChanged() == event
    assert 0 == proxy.listening.open


async def test_p25_listen_streams_past_the_proxys_bound_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bad input is a typed error: past ``MAX_STREAMS`` open at once, a listen
    is refused before its ack (the SDK's own limit and message), and one
    ending frees its place."""
    monkeypatch.setattr(_listen, "MAX_STREAMS", 1)
    proxy = McpProxy(subscribing())
    async with proxy, modern_through(proxy) as client:
        async with listen(client, resources_list_changed=True):
            with pytest.raises(MCPError) as refused:
                async with listen(client, resources_list_changed=True):
                    pass  # pragma: no cover - refused before the ack
        async with listen(client, resources_list_changed=True) as again:
            honored = again.honored.resources_list_changed
    assert "Subscription limit reached" == refused.value.error.message
    assert True is honored
