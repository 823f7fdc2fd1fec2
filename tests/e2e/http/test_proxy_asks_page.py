"""``helmlog serve --agent`` on an ``McpProxy``: the page decides its governance's asks.

Pattern: a real ``helmlog serve`` app on uvicorn whose ``--agent`` names the
         governed proxy (``proxy_ask_desk:PROXY``), beside a proxy process
         of the same policy on the same Redis store in front of the FastMCP 4
         upstream (a stdio child); real MCP clients call through the proxy,
         an approver decides over real HTTP, and the page's process opens
         its own connection to the upstream to carry the call out.
Role:    end-to-end tests of ``ServedRunner`` with ``McpProxy.resume``.
Emits:   nothing.

Laws: P14 and S10 (the task completes with the upstream's real result once
the page approves), S4 (a client without tasks reads the decided outcome
back), P27 (the structured result as the scrub left it), H2, R18.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client import Client

from helmlog._asks import load_factory
from helmlog.events import open_event_store
from helmlog.gateway import McpProxy
from helmlog.gateway._tasks import ASK_META
from tests.e2e.http.server import APPROVER_TOKEN, bearer, running
from tests.unit.gateway.proxy_ask_desk import POLICY, UPSTREAM
from tests.unit.gateway.task_client import Tasks, client

pytestmark = pytest.mark.redis

SCRUBBED = {"name": "ann", "ssn": "***-**-****", "tier": "gold"}


@asynccontextmanager
async def _proxy(redis_url: str) -> AsyncIterator[str]:
    """The proxy process: the governed proxy on the store, over Streamable HTTP."""
    store = open_event_store(redis_url)
    try:
        proxy = McpProxy(UPSTREAM, store=store, **POLICY)
        async with proxy, proxy.http_server() as url:
            yield url
    finally:
        await store.close()


async def _listed(page: str) -> list[dict[str, Any]]:
    """``GET /asks`` as dana (every app), until it lists one ask."""
    async with httpx2.AsyncClient(base_url=page, headers=bearer(APPROVER_TOKEN)) as h:
        with anyio.fail_after(20):
            while True:
                response = await h.get("/asks")
                assert 200 == response.status_code, response.text
                listed: list[dict[str, Any]] = response.json()
                if listed:
                    return listed
                await anyio.sleep(0.05)


async def _decide(page: str, ask: dict[str, Any], verb: str) -> dict[str, Any]:
    """``POST /asks/<session>/<call>/<verb>`` as dana."""
    async with httpx2.AsyncClient(
        base_url=page, headers=bearer(APPROVER_TOKEN), timeout=60
    ) as h:
        response = await h.post(
            f"/asks/{ask['session_id']}/{ask['tool_call_id']}/{verb}", json={}
        )
    assert 200 == response.status_code, response.text
    out: dict[str, Any] = response.json()
    return out


@pytest.mark.parametrize("agent", ["PROXY", "build"])
async def test_p14_s10_the_page_approves_a_proxy_ask_and_the_task_completes(
    redis_url: str, agent: str
) -> None:
    """P14, S10, P27: ``--agent`` names an ``McpProxy`` (or a factory of
    one); the page lists the proxy's waiting ask; approved, the page's
    process runs the upstream tool and the client's task completes with its
    structured result as the scrub left it."""
    factory = load_factory(f"tests.unit.gateway.proxy_ask_desk:{agent}")
    decided: list[dict[str, Any]] = []

    async def on_the_page(page: str) -> None:
        [ask] = await _listed(page)
        assert ("customer", "four-eyes", {"name": "ann"}) == (
            ask["tool_name"],
            ask["middleware"],
            ask["args"],
        )
        decided.append(await _decide(page, ask, "approve"))

    with running(factory, redis_url) as page:
        async with (
            _proxy(redis_url) as url,
            client(url, Tasks()) as c,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(on_the_page, page.url)
            result = await c.call_tool("customer", {"name": "ann"})
    assert (False, SCRUBBED) == (result.is_error, result.structured_content)
    [outcome] = decided
    assert "answered" == outcome["status"]
    assert SCRUBBED == json.loads(outcome["answer"])


async def test_p14_s4_a_client_without_tasks_reads_back_what_the_page_declined(
    redis_url: str,
) -> None:
    """S4, G64: a handshake-era client gets the tool error naming the ask;
    the page declines it; the call with ``_meta`` naming the ask returns
    the recorded refusal."""
    factory = load_factory("tests.unit.gateway.proxy_ask_desk:PROXY")
    with running(factory, redis_url) as page:
        async with (
            _proxy(redis_url) as url,
            Client(url, mode="legacy", cache=None) as c,
        ):
            asked = await c.call_tool("customer", {"name": "ann"})
            [ask] = await _listed(page.url)
            ask_id = f"{ask['session_id']}/{ask['tool_call_id']}"
            outcome = await _decide(page.url, ask, "decline")
            meta: Any = {ASK_META: ask_id}
            read = await c.call_tool("customer", {"name": "ann"}, meta=meta)
    assert asked.is_error
    assert f"waits as ask '{ask_id}'" in asked.content[0].text  # type: ignore[union-attr]
    assert "answered" == outcome["status"]
    assert read.is_error
    assert read.content[0].text.startswith("declined by")  # type: ignore[union-attr]
