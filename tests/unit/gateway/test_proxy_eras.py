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
of an upstream reached in the 2026 era alone, over HTTP and stdio; a listen
stream lost when the upstream restarts is opened again, counted as one change
of each kind, logged once with no secret, and the proxy closes cleanly while
it is down).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from helmlog.events import ProxyCallFinished
from helmlog.gateway import HttpUpstream, McpProxy, ProxyAudit

from ...polling import until
from .http_helpers import Restartable, free_port, http_client, http_upstream
from .proxy_helpers import modern_through, text_of, through

pytestmark = pytest.mark.timeout(120)

MODERN, HANDSHAKE = "2026-07-28", "2025-11-25"


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


def _kinds_heard(heard: list[str]) -> Any:
    async def on(message: Any) -> None:
        kind = _KIND.get(type(message))
        if kind is not None:
            heard.append(kind)

    return on


_KIND = {
    types.ToolListChangedNotification: "tools",
    types.PromptListChangedNotification: "prompts",
    types.ResourceListChangedNotification: "resources",
}


ALL = ["prompts", "resources", "tools"]  # the kinds this upstream announces (2026)


def _proxy_logs(caplog: pytest.LogCaptureFixture, text: str, level: int) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == "helmlog.proxy" and r.levelno == level and text in r.getMessage()
    )


class _Relay:
    """A TCP relay in front of the upstream whose ``cut`` aborts every
    connection through it (the upstream process and its sessions live on),
    as a load balancer or a network break drops a long-lived stream."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> _Relay:
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await self._server.wait_closed()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [w, uw]

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):  # the other side cut or gone
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            dst.close()

        await asyncio.gather(copy(r, uw), copy(ur, w))

    def cut(self) -> None:
        writers, self._writers = self._writers, []
        for w in writers:
            w.transport.abort()


SECRET = "listen-bearer-0123456789"


@pytest.mark.parametrize(
    ("era", "drop"),
    [("dual", "cut"), ("2026 only", "cut"), ("2026 only", "restart")],
)
async def test_p25_a_lost_listen_stream_heals_and_counts_as_a_change(
    era: str, drop: str, caplog: pytest.LogCaptureFixture
) -> None:
    """P25, P27, P26: the listen stream drops (its connection cut, or the
    upstream restarted on its port); it is opened again, every live session
    hears one list_changed of each kind the upstream announces and the cached
    schemas are forgotten (changes may have been missed); a tool's
    ``notify_tools_changed`` after the recovery reaches a live session; the
    loss is one WARNING, the recovery one INFO, no log line holds the bearer."""
    caplog.set_level(logging.DEBUG, logger="helmlog.proxy")
    heard: list[str] = []
    upstream = Restartable()
    await upstream.start()
    try:
        async with _Relay(upstream.port) as relay:
            url = relay.url if drop == "cut" else upstream.url
            proxy = McpProxy(HttpUpstream(url, bearer=SECRET))
            if era == "2026 only":
                proxy.upstream.mode = MODERN
            async with (
                proxy,
                through(proxy, message_handler=_kinds_heard(heard)) as idle,
                modern_through(proxy) as caller,
            ):
                assert proxy.upstream.listening
                await idle.list_tools()
                listed = proxy.routing.input_schema("echo") is not None
                if drop == "cut":
                    relay.cut()
                else:
                    upstream.kill()
                await until(
                    "the loss logged",
                    lambda: _proxy_logs(caplog, "stream ended", logging.WARNING),
                    10,
                )
                if drop == "restart":
                    assert not proxy.upstream.listening  # down till it is back
                    await upstream.start()
                await until(
                    "the recovery logged",
                    lambda: _proxy_logs(caplog, "open again", logging.INFO),
                    20,
                )
                await until("the fan-out", lambda: sorted(heard), 10, ok=ALL.__eq__)
                forgotten = proxy.routing.input_schema("echo") is None
                heard.clear()
                await caller.call_tool("announce_changed", {})
                await until("the tool's change", lambda: heard == ["tools"], 10)
                listening = proxy.upstream.listening
    finally:
        upstream.kill()
    assert (True, True, True) == (listed, forgotten, listening)
    assert 1 == _proxy_logs(caplog, "stream ended", logging.WARNING)
    assert 1 == _proxy_logs(caplog, "open again", logging.INFO)
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "sdk"])
async def test_p25_an_upstream_that_lost_the_proxys_session_is_joined_again(
    fast: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """P25 (the spec's Streamable HTTP session rule): the upstream restarts
    and answers 404 to the proxy's session; the proxy starts a new session
    (its handshake, fast paths, 2026-era session and listen stream again),
    sends the request that met the 404 once more, and every client session
    it serves goes on: a 2025-era one's calls and lists, a 2026-era one's
    lists and calls. Calls made at once when it is back each ran exactly
    once (one new session for all, none failing mid-heal), every live
    session hears tools/list_changed, the cached schemas are forgotten (P27),
    and the loss is one WARNING, the new session one INFO."""
    caplog.set_level(logging.INFO, logger="helmlog.proxy")
    heard: list[str] = []
    mark = tmp_path / "tally"
    upstream = Restartable()
    await upstream.start()
    try:
        proxy = _proxy(upstream.url, fast)
        async with (
            proxy,
            through(proxy, message_handler=_kinds_heard(heard)) as legacy,
            modern_through(proxy) as modern,
        ):
            before = proxy.upstream.generation
            await legacy.list_tools()
            listed = proxy.routing.input_schema("echo") is not None
            upstream.kill()
            await upstream.start()
            # Calls at once: the first to meet the 404 heals, the others
            # wait for that heal (none finds the session missing mid-heal).
            ran = [
                text_of(r)
                for r in await asyncio.gather(
                    *(
                        legacy.call_tool("tally", {"mark": f"{mark}{i}"})
                        for i in range(4)
                    )
                )
            ]
            forgotten = proxy.routing.input_schema("echo") is None
            await until("the fan-out", lambda: "tools" in heard, 10)
            names = {t.name for t in (await legacy.list_tools()).tools}
            modern_names = {t.name for t in (await modern.list_tools()).tools}
            echoes = [
                text_of(await c.call_tool("echo", {"word": "hi"}))
                for c in (legacy, modern)
            ]
            after = proxy.upstream.generation
    finally:
        upstream.kill()
    assert ["1"] * 4 == ran  # each call ran once
    assert [["ran"]] * 4 == [Path(f"{mark}{i}").read_text().split() for i in range(4)]
    assert (True, True) == (listed, forgotten)
    assert "tally" in names and names == modern_names
    assert ["HI", "HI"] == echoes
    assert before + 1 == after  # one new session, not one per request
    assert 1 == _proxy_logs(caplog, "no longer knows", logging.WARNING)
    assert 1 == _proxy_logs(caplog, "has a new session", logging.INFO)


async def test_p25_a_call_while_the_upstream_is_down_fails_clearly_then_heals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """P25, H4: while the upstream is down a client's call fails with the
    proxy's withheld error (no URL on the wire); once it is back, the next
    call meets the 404, and the proxy starts a new session and answers it."""
    caplog.set_level(logging.INFO, logger="helmlog.proxy")
    upstream = Restartable()
    await upstream.start()
    try:
        proxy = McpProxy(upstream.url)
        async with proxy, through(proxy) as client:
            await client.list_tools()
            upstream.kill()
            with pytest.raises(MCPError) as down:
                await client.call_tool("echo", {"word": "hi"})
            await upstream.start()
            back = text_of(await client.call_tool("echo", {"word": "hi"}))
    finally:
        upstream.kill()
    said = down.value.error.message
    assert "went away" in said and upstream.url not in said
    assert "HI" == back
    assert 1 == _proxy_logs(caplog, "has a new session", logging.INFO)


async def test_p25_the_proxy_closes_cleanly_while_its_listen_stream_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """P25: the upstream gone for good, the proxy retrying its listen stream
    closes at once, its retrying task cancelled with it (no task left
    pending, no error logged)."""
    caplog.set_level(logging.DEBUG)
    upstream = Restartable()
    await upstream.start()
    try:
        proxy = McpProxy(upstream.url)
        with anyio.fail_after(30):
            async with proxy:
                assert proxy.upstream.listening
                upstream.kill()
                await until(
                    "a retry refused",
                    lambda: _proxy_logs(caplog, "not open yet", logging.DEBUG),
                    10,
                )
                closing = anyio.current_time()
        closed_in = anyio.current_time() - closing
    finally:
        upstream.kill()
    gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (None, True) == (proxy.upstream.session, closed_in < 5)
