"""The gateway's one uvicorn start-up helper: config, shutdown hook, serving block.

Pattern: unit tests of ``gateway/_uvicorn.py`` over a tiny ASGI app on a
         real loopback socket (port 0), with httpx2 (the MCP SDK's HTTP
         client) as the client.
Role:    unit tests; the HTTP API, the proxy and ``mcp_serve`` run on it.
Emits:   nothing.

Laws: H1 (``forwarded_allow_ips``: ``None`` keeps uvicorn's default, a
sequence believes exactly those, an empty one none), P18 (leaving the block
shuts the server down gracefully: the app's lifespan ends).
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from helmlog.gateway._uvicorn import Server, server_config, serving


async def hello(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app that answers ``ok`` and records its lifespan."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            LIFESPAN.append(message["type"])
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


LIFESPAN: list[str] = []


async def test_serving_yields_the_bound_port_and_leaving_shuts_down() -> None:
    """P18: port 0 binds a free port; leaving the block runs the lifespan's end."""
    LIFESPAN.clear()
    hooked: list[bool] = []
    server = Server(
        server_config(hello, host="127.0.0.1", port=0, lifespan="on"),
        on_shutdown=lambda: hooked.append(True),
    )
    async with serving(server, name="the test app") as port:
        assert port > 0
        async with httpx2.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/")
        assert (200, "ok") == (answer.status_code, answer.text)
    assert ["lifespan.startup", "lifespan.shutdown"] == LIFESPAN
    assert [True] == hooked


@pytest.mark.parametrize(
    ("allow", "proxy_headers", "believed"),
    [
        (("10.0.0.1",), True, ["10.0.0.1"]),
        ((), False, None),
    ],
)
def test_h1_forwarded_allow_ips_believes_exactly_those_named(
    allow: tuple[str, ...], proxy_headers: bool, believed: list[str] | None
) -> None:
    """H1: named proxies are believed; an empty list believes none."""
    config = server_config(hello, host="127.0.0.1", port=0, forwarded_allow_ips=allow)
    assert proxy_headers == config.proxy_headers
    if believed is not None:
        assert believed == config.forwarded_allow_ips


def test_no_forwarded_allow_ips_keeps_uvicorns_default() -> None:
    """``None`` leaves uvicorn's own default, as the edges had before."""
    import uvicorn

    assert (
        uvicorn.Config(hello).proxy_headers
        == server_config(hello, host="127.0.0.1", port=0).proxy_headers
    )
