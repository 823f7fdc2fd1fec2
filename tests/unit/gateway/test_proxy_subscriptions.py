"""P25: resource subscriptions through the proxy, one upstream session for all.

Pattern: ``upstream_server.subscribing()`` (the SDK's MCPServer serving
         ``resources/subscribe``/``unsubscribe``; its ``touch`` tool sends
         ``notifications/resources/updated``), in process or restartable
         over Streamable HTTP; the proxy in this process; real SDK client
         sessions in front of it.
Role:    unit tests for ``gateway/proxy/_subscriptions.py`` and the proxy's
         subscribe, unsubscribe, relay and close.
Emits:   nothing.

Laws: P25 (an update reaches the sessions subscribed to its URI and only
them; the upstream's subscription ends with its last subscriber's
unsubscribe or close; a new upstream session, after the upstream restarted,
is subscribed again), P8/P9 (a hidden resource cannot be subscribed to).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from helmlog.gateway import McpProxy

from ...polling import until
from .http_helpers import Restartable
from .proxy_helpers import text_of, through
from .upstream_server import subscribing

pytestmark = [
    pytest.mark.timeout(60),
    # The handshake era's subscribe, which the SDK's client marks deprecated
    # (2026-07-28 has ``subscriptions/listen``): a 2025-era client sends it.
    pytest.mark.filterwarnings("ignore:resources/.*subscribe is removed"),
]


def _lines(mark: Path) -> list[str]:
    """What the upstream noted for the URI ``mark``'s path names."""
    return mark.read_text().split() if mark.exists() else []


def _updates(heard: list[str]) -> Any:
    async def on(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    return on


async def test_p25_an_update_reaches_the_sessions_subscribed_to_it_only() -> None:
    """P25: two clients; each hears the updates of the URIs it subscribed to
    and no other; the proxy mirrors ``subscribe``."""
    heard_a: list[str] = []
    heard_b: list[str] = []
    proxy = McpProxy(subscribing())
    async with (
        proxy,
        through(proxy, message_handler=_updates(heard_a)) as a,
        through(proxy, message_handler=_updates(heard_b)) as b,
    ):
        caps = proxy.upstream_init.capabilities.resources
        await a.subscribe_resource("res://x")
        await b.subscribe_resource("res://y")
        assert "touched" == text_of(await a.call_tool("touch", {"uri": "res://x"}))
        await b.call_tool("touch", {"uri": "res://y"})
        await a.call_tool("touch", {"uri": "res://z"})  # nobody's
        await until("both updates", lambda: heard_a and heard_b, 10)
        # The last update (nobody's) was sent after the others; a round trip
        # more and every relay of it would have landed.
        await a.list_resources()
    assert caps is not None and caps.subscribe
    assert (["res://x"], ["res://y"]) == (heard_a, heard_b)


async def test_p25_the_upstream_subscription_ends_with_its_last_subscriber(
    tmp_path: Path,
) -> None:
    """P25: two clients subscribe to one URI; the first's unsubscribe does
    not end the upstream's subscription (the other still hears updates);
    the second's close ends it, once."""
    mark = tmp_path / "x"
    uri = mark.as_uri()
    heard_a: list[str] = []
    heard_b: list[str] = []
    proxy = McpProxy(subscribing())
    async with proxy, through(proxy, message_handler=_updates(heard_a)) as a:
        async with through(proxy, message_handler=_updates(heard_b)) as b:
            await a.subscribe_resource(uri)
            await b.subscribe_resource(uri)
            await a.unsubscribe_resource(uri)
            after_first = _lines(mark)
            await a.call_tool("touch", {"uri": uri})
            await until("b's update", lambda: heard_b, 10)
            await a.list_resources()
        await until("the close's unsubscribe", lambda: len(_lines(mark)) == 3, 10)
    assert ["subscribe", "subscribe"] == after_first
    assert "unsubscribe" == _lines(mark)[-1]
    assert ([], [uri]) == (heard_a, heard_b)
    assert [] == proxy.subscriptions.uris()


async def test_p8_a_hidden_resource_cannot_be_subscribed_to(tmp_path: Path) -> None:
    """P8/P9: a hidden resource's subscribe is "not found" with its reason,
    and never reaches the upstream."""
    mark = tmp_path / "secret"
    uri = mark.as_uri()
    proxy = McpProxy(subscribing(), hidden_resources=[uri])
    async with proxy, through(proxy) as client:
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource(uri)
    assert f"Resource not found: {uri}" == refused.value.error.message
    assert [] == _lines(mark)


async def test_p25_a_new_upstream_session_is_subscribed_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """P25: the HTTP upstream restarts; the proxy's new session (the heal)
    subscribes again to each URI a client still holds, so the client hears
    the update that the call which met the 404 makes. Closing the session
    the upstream forgot logs no warning (its ``DELETE`` meets a 404)."""
    caplog.set_level(logging.DEBUG, logger="mcp.client.streamable_http")
    mark = tmp_path / "x"
    uri = mark.as_uri()
    heard: list[str] = []
    upstream = Restartable("--subscribing")
    await upstream.start()
    try:
        proxy = McpProxy(upstream.url)
        async with proxy, through(proxy, message_handler=_updates(heard)) as client:
            await client.subscribe_resource(uri)
            upstream.kill()
            await upstream.start()
            await client.call_tool("touch", {"uri": uri})
            await until("the update", lambda: heard, 10)
            noted = _lines(mark)
    finally:
        upstream.kill()
    assert (["subscribe", "subscribe"], [uri]) == (noted, heard)
    assert [] == [
        r.getMessage()
        for r in caplog.records
        if r.name == "mcp.client.streamable_http" and r.levelno >= logging.WARNING
    ]
