"""The upstream POST on the wire answers and audits as on httpx2 and the SDK.

Pattern: the same calls through one proxy three ways (``gateway/fast/wire.py``
         on; the httpx2 POST, ``Upstream.wire = False``; the SDK's client,
         ``Upstream.fast = False``), against real upstreams: the test
         MCPServer as a Streamable HTTP subprocess (SSE and JSON answers),
         and ``guarded_upstream``'s over TLS with a CA made here, behind a
         header and a bearer; answers and audit rows compared whole.
Role:    differential tests of the wire (issue 26: the HTTP bench figure).
Emits:   nothing.

Laws: P25 (results, tool errors, upstream errors, malformed params, a
cancel, an upstream killed mid-call answer the same), P20 (the same audit
rows), P26 (one set of settings: the wire carries the headers, the bearer
and the TLS trust; a proxy variable or an auth flow keeps httpx2), H4.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from helmlog.gateway import HttpUpstream, McpProxy, ProxyAudit
from helmlog.gateway.fast.wire import HttpWire, WireError

from ...polling import until
from .guarded_upstream import certificates, guarded_upstream, http_proxy
from .http_helpers import http_upstream
from .proxy_helpers import proxied, text_of
from .proxy_stdio_server import options
from .test_proxy_fast import CASES, Answers, _finished, _memory, _unnamed

KEY = "k3y-V4LUE-0a1b2c"
SECRET = "s3cr3t-T0KEN-9f8e7d"
MODES = ("wire", "post", "sdk")


@pytest.fixture
def no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No proxy variable from the machine: each test sets the ones it means."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    yield monkeypatch


def _proxy(target: Any, mode: str, rows: list[Any], middleware: bool) -> McpProxy:
    proxy = McpProxy(
        target,
        audit=ProxyAudit(b"the secret", "k1"),
        sensitivity=lambda tool, identity, args: "low",
        on_event=rows.append,
        **options(middleware),
    )
    proxy.upstream.fast = mode != "sdk"  # before open, as an operator sets it
    proxy.upstream.wire = mode == "wire"
    return proxy


def _wired(proxy: McpProxy) -> int:
    """How many requests went on the proxy's wire (0 without one)."""
    link = proxy.upstream._link
    wire = None if link is None else link.wire
    return 0 if wire is None else wire.requests


async def _three_ways(
    target: Callable[[], Any],
    cases: list[dict[str, Any] | None],
    middleware: bool = False,
) -> dict[str, tuple[Answers, list[Any], int]]:
    out: dict[str, tuple[Answers, list[Any], int]] = {}
    for mode in MODES:
        rows: list[Any] = []
        proxy = _proxy(target(), mode, rows, middleware)
        async with proxy:
            answers, _ = await _memory(proxy, cases)
            wired = _wired(proxy)
        out[mode] = (_unnamed(answers), _finished(rows), wired)
    return out


@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_p25_p20_the_wire_answers_and_audits_as_httpx2_and_the_sdk(
    answers: str, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P25, P20: results, tool errors, hidden and renamed tools, ``_meta``,
    malformed params: the same answers and audit rows on the wire, on the
    httpx2 POST and on the SDK's client; an SSE or a JSON answering upstream."""
    extra = ("--json",) if answers == "json" else ()
    with http_upstream(*extra) as url:
        for middleware in (False, True):
            runs = await _three_ways(lambda: url, CASES, middleware)
            assert runs["sdk"][:2] == runs["post"][:2] == runs["wire"][:2]
            assert (0, 0) == (runs["sdk"][2], runs["post"][2])
            assert runs["wire"][2] >= 1
    wire_answers = runs["wire"][0]  # keyed by id as JSON keys (``_unnamed``)
    assert "HI" == wire_answers["1"]["result"]["content"][0]["text"]
    assert wire_answers["2"]["result"]["isError"]


async def test_p25_an_upstream_killed_mid_call_is_answered_as_httpx2_and_the_sdk(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P25, H4, P20: the upstream process dies under the call: the same
    withheld "went away" answer and the same audit row, three ways."""
    runs: dict[str, tuple[Answers, list[Any], int]] = {}
    for mode in MODES:
        with http_upstream() as url:  # a fresh one: each run kills it
            rows: list[Any] = []
            proxy = _proxy(url, mode, rows, False)
            async with proxy:
                with anyio.fail_after(30):
                    answers, _ = await _memory(proxy, [{"name": "die"}])
                wired = _wired(proxy)
            # each withheld error has an id of its own (H4): blanked in the
            # answer and in the row, whose output digest covers it
            finished = [(*r[:6], _unnamed({"raw": r[7]})) for r in _finished(rows)]
            runs[mode] = (_unnamed(answers), finished, wired)
    assert runs["sdk"][:2] == runs["post"][:2] == runs["wire"][:2]
    assert 1 == runs["wire"][2]
    error = runs["wire"][0]["1"]["error"]
    assert error["message"].startswith("the upstream MCP server went away")


async def _cancelled_mark(mode: str, tmp: Path) -> tuple[str, str, int]:
    mark = tmp / f"mark-{mode}"
    with http_upstream() as url:
        proxy = _proxy(url, mode, [], False)
        async with proxy:
            upstream = proxy.upstream
            args = {"seconds": 30, "mark": str(mark)}
            with anyio.move_on_after(0.5):  # the caller gives up
                await upstream.call_raw(
                    "tools/call", {"name": "sleepy_marked", "arguments": args}
                )
            await until("the upstream's cancellation", mark.exists, 20.0)
            after = await upstream.call_raw(
                "tools/call", {"name": "echo", "arguments": {"word": "still"}}
            )
            wired = _wired(proxy)  # the call, its cancel, the next call
    return mark.read_text(), after["content"][0]["text"], wired


async def test_p25_a_cancelled_wire_call_is_cancelled_upstream(
    tmp_path: Path, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P25: cancelling a call on the wire sends ``notifications/cancelled``
    upstream on the wire, and the upstream's tool is cancelled, as on httpx2
    and on the SDK's client."""
    runs = {mode: await _cancelled_mark(mode, tmp_path) for mode in MODES}
    assert ("cancelled", "STILL") == runs["sdk"][:2] == runs["post"][:2]
    assert ("cancelled", "STILL", 3) == runs["wire"]


async def test_p25_the_wire_keeps_its_connections_alive_call_after_call(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """Twenty calls on the wire reuse a few kept-alive connections (an SSE
    answer is had at its message; its stream's end is read after, so a call
    right behind it may open a second one)."""
    with http_upstream() as url:
        proxy = _proxy(url, "wire", [], False)
        async with proxy:
            words = [f"w{i}" for i in range(20)]
            answers = [
                await proxy.upstream.call_raw(
                    "tools/call", {"name": "echo", "arguments": {"word": w}}
                )
                for w in words
            ]
            link = proxy.upstream._link
            assert link is not None and link.wire is not None
            opened, sent = link.wire.opened, link.wire.requests
    assert [w.upper() for w in words] == [a["content"][0]["text"] for a in answers]
    assert (True, 20) == (opened <= 3, sent)


async def test_p26_https_headers_and_a_bearer_go_on_the_wire_as_on_httpx2(
    tmp_path: Path, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P26: an https:// upstream with a CA made here, a header and a bearer
    it demands: the wire carries all three (one set of settings), the call
    answers as on httpx2, and the upstream refused nothing."""
    ca, cert, key = certificates(tmp_path)
    demanded = {"X-Key": KEY, "Authorization": f"Bearer {SECRET}"}
    texts: dict[str, str] = {}
    wired: dict[str, int] = {}
    async with guarded_upstream(demanded, tls=(cert, key)) as (url, seen):
        for mode in MODES:
            target = HttpUpstream(
                url, headers={"X-Key": KEY}, bearer=SECRET, ca_file=ca
            )
            proxy = _proxy(target, mode, [], False)
            async with proxied(proxy) as session:
                result = await session.call_tool("whoami", {"word": mode})
                texts[mode] = text_of(result)
                wired[mode] = _wired(proxy)
    assert {"wire": "WIRE", "post": "POST", "sdk": "SDK"} == texts
    assert (1, 0, 0) == (wired["wire"], wired["post"], wired["sdk"])
    assert 0 == seen.refused
    assert {"x-key", "authorization"} <= seen.header_names


async def test_p26_insecure_tls_goes_on_the_wire_unverified(
    tmp_path: Path, no_env_proxy: pytest.MonkeyPatch
) -> None:
    """P26: ``insecure`` reaches the wire too (the same TLS setting)."""
    _ca, cert, key = certificates(tmp_path)
    async with guarded_upstream({}, tls=(cert, key)) as (url, _seen):
        proxy = _proxy(HttpUpstream(url, insecure=True), "wire", [], False)
        async with proxied(proxy) as session:
            result = await session.call_tool("whoami", {"word": "x"})
            wired = _wired(proxy)
    assert ("X", 1) == (text_of(result), wired)


async def test_p26_a_proxy_variable_keeps_the_httpx2_post_which_honours_it(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P26: with ``HTTP_PROXY`` set the wire stands aside: the call goes
    through the HTTP proxy on httpx2, as every other request does."""
    async with (
        guarded_upstream({}) as (url, _seen),
        http_proxy() as (proxy_url, log),
    ):
        no_env_proxy.setenv("HTTP_PROXY", proxy_url)
        proxy = McpProxy(url)
        async with proxied(proxy) as session:
            before = log.lines.count(f"POST {url}")
            result = await session.call_tool("whoami", {"word": "via"})
            after = log.lines.count(f"POST {url}")
            link = proxy.upstream._link
            assert link is not None and link.wire is None
    # the call, and the listing P27 makes of a tool not yet seen
    assert ("VIA", True) == (text_of(result), after - before >= 1)


async def test_p26_an_auth_flow_that_is_not_a_static_header_keeps_httpx2(
    no_env_proxy: pytest.MonkeyPatch,
) -> None:
    """P26: any other ``httpx2.Auth`` (Basic here; OAuth alike) is applied by
    httpx2 on every request: the wire stands aside."""
    async with guarded_upstream({}) as (url, _seen):
        upstream = HttpUpstream(url, auth=httpx2.BasicAuth("u", SECRET))
        proxy = McpProxy(upstream)
        async with proxied(proxy) as session:
            result = await session.call_tool("whoami", {"word": "basic"})
            link = proxy.upstream._link
            assert link is not None and link.wire is None
    assert "BASIC" == text_of(result)


# -- the wire itself against small real socket servers ------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def _socket_server(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()
        await server.wait_closed()


def _replying(reply: bytes) -> Handler:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read(65536)
        writer.write(reply)
        await writer.drain()
        writer.close()

    return handler


async def test_p26_a_401_on_the_wire_is_told_by_status_never_by_value() -> None:
    """P26, H4: a 401 is reported (status and reason) as the httpx2 hook
    reports it; the wire's repr names no header."""
    told: list[tuple[int, str]] = []
    body = b'{"error": "unauthorized"}'
    reply = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    async with _socket_server(_replying(reply)) as url:
        wire = HttpWire(
            url,
            headers={"authorization": f"Bearer {SECRET}"},
            on_status=lambda status, reason: told.append((status, reason)),
        )
        async with wire.request("POST", {}, b"{}") as answer:
            read = await answer.read()
        await wire.aclose()
    assert ([(401, "Unauthorized")], body) == (told, read)
    assert SECRET not in repr(wire)


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    ],
    ids=["hang-up-mid-answer", "not-http"],
)
async def test_a_broken_answer_on_the_wire_is_a_wire_error(reply: bytes) -> None:
    """A server that hangs up mid-answer, or answers something that is not
    HTTP: ``WireError`` (the proxy's "went away"), never a hang."""
    async with _socket_server(_replying(reply)) as url:
        wire = HttpWire(url)
        with anyio.fail_after(20), pytest.raises(WireError):
            async with wire.request("POST", {}, b"{}") as answer:
                await answer.read()
        await wire.aclose()


def test_the_wire_refuses_what_it_cannot_reach() -> None:
    """A URL that is not http(s), or https without a TLS context: ValueError."""
    with pytest.raises(ValueError, match="http"):
        HttpWire("ftp://127.0.0.1/mcp")
    with pytest.raises(ValueError, match="ssl context"):
        HttpWire("https://127.0.0.1/mcp")
