"""``helmlog serve --agent`` on an ``mcp_serve`` result: the page decides its asks.

Pattern: a real ``helmlog serve`` app on uvicorn (``server.running``) whose
         ``--agent`` names the served refund desk (``task_server:DESK``, an
         ``mcp_serve`` result, and ``task_server:build``, a factory of one),
         beside a serving process of the same desk on the same Redis store;
         a real MCP client calls, an approver decides over real HTTP.
Role:    end-to-end tests of ``gateway/http/_app.py`` and ``ServedRunner``
         with ``gateway/_serve.py`` (issue 26 items 4, serve2 part 2).
Emits:   nothing.

Laws: S10 (the task completes with the real result once the page approves),
S4 (a client without tasks reads the decided outcome back), H2 (an
every-app approver lists and decides it), R9 (the tool runs once), R18.

Why Redis: the page and the serving process are two processes' worth of
code (two event loops) that share only the store, as in a deployment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client import Client

from helmlog._asks import load_factory
from helmlog.events import open_event_store
from helmlog.gateway._serve import ServedTools
from helmlog.gateway._tasks import ASK_META
from tests.e2e.http.server import APPROVER_TOKEN, SESSION_TOKEN, bearer, running
from tests.unit.gateway.helpers import text_of
from tests.unit.gateway.task_client import Tasks, client
from tests.unit.gateway.task_server import build

pytestmark = pytest.mark.redis


@asynccontextmanager
async def _desk(redis_url: str) -> AsyncIterator[tuple[ServedTools, str]]:
    """The serving process: the desk on the store, over Streamable HTTP."""
    store = open_event_store(redis_url)
    try:
        served = build(store)
        async with served.http_server() as url:
            yield served, url
    finally:
        await store.close()


async def _listed(page: str) -> list[dict[str, Any]]:
    """``GET /asks`` as dana (every app), until it lists one ask."""
    async with httpx2.AsyncClient(base_url=page, headers=bearer(APPROVER_TOKEN)) as h:
        with anyio.fail_after(15):
            while True:
                response = await h.get("/asks")
                assert 200 == response.status_code, response.text
                listed: list[dict[str, Any]] = response.json()
                if listed:
                    return listed
                await anyio.sleep(0.05)


async def _approve(page: str, ask: dict[str, Any]) -> dict[str, Any]:
    """``POST /asks/<session>/<call>/approve`` as dana."""
    async with httpx2.AsyncClient(base_url=page, headers=bearer(APPROVER_TOKEN)) as h:
        response = await h.post(
            f"/asks/{ask['session_id']}/{ask['tool_call_id']}/approve", json={}
        )
    assert 200 == response.status_code, response.text
    out: dict[str, Any] = response.json()
    return out


@pytest.mark.parametrize("agent", ["DESK", "build"])
async def test_s10_the_page_approves_a_served_ask_and_the_task_completes(
    redis_url: str, agent: str
) -> None:
    """S10, H2, R18: ``--agent`` names an ``mcp_serve`` result (or a factory
    of one); the page lists the waiting task's ask and approves it; the
    client's task completes with the real tool's result."""
    factory = load_factory(f"tests.unit.gateway.task_server:{agent}")
    decided: list[dict[str, Any]] = []

    async def on_the_page(page: str) -> None:
        [ask] = await _listed(page)
        assert ("refund", "four-eyes", {"amount": 250}) == (
            ask["tool_name"],
            ask["middleware"],
            ask["args"],
        )
        decided.append(await _approve(page, ask))

    with running(factory, redis_url) as page:
        async with (
            _desk(redis_url) as (_, url),
            client(url, Tasks()) as c,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(on_the_page, page.url)
            result = await c.call_tool("refund", {"amount": 250})
    assert ("refunded 250", False) == text_of(result)
    [outcome] = decided
    assert ("answered", "refunded 250") == (outcome["status"], outcome["answer"])


async def test_s4_a_client_without_tasks_reads_back_what_the_page_decided(
    redis_url: str,
) -> None:
    """S4, R9: a handshake-era client gets the tool error naming the ask; the
    page approves it (the tool runs once); the same call with ``_meta``
    naming the ask returns the recorded result."""
    factory = load_factory("tests.unit.gateway.task_server:DESK")
    with running(factory, redis_url) as page:
        async with _desk(redis_url) as (served, url):
            ran: list[int] = []
            tool = served.tools["refund"]
            original = tool.execute

            def counted(amount: int) -> Any:
                ran.append(amount)
                return original(amount=amount)

            tool.execute = counted
            async with Client(url, mode="legacy", cache=None) as c:
                text, is_error = text_of(await c.call_tool("refund", {"amount": 250}))
                [ask] = await _listed(page.url)
                ask_id = f"{ask['session_id']}/{ask['tool_call_id']}"
                assert is_error and f"waits as ask '{ask_id}'" in text
                outcome = await _approve(page.url, ask)
                meta: Any = {ASK_META: ask_id}
                read = await c.call_tool("refund", {"amount": 250}, meta=meta)
    # The page's process ran the approved call (its own rebuilt desk): the
    # serving process never ran it, and reading the outcome ran nothing.
    assert ("answered", "refunded 250") == (outcome["status"], outcome["answer"])
    assert ("refunded 250", False) == text_of(read)
    assert [] == ran


def test_sessions_cannot_be_started_on_a_served_tools_page(redis_url: str) -> None:
    """H2: a page over served tools decides asks; ``POST /sessions`` is a 400
    problem naming why, not a server error."""
    factory = load_factory("tests.unit.gateway.task_server:DESK")
    with (
        running(factory, redis_url) as page,
        httpx2.Client(base_url=page.url, headers=bearer(SESSION_TOKEN)) as h,
    ):
        response = h.post("/sessions", json={"message": "refund 250"})
    assert 400 == response.status_code
    assert "served over MCP" in response.json()["detail"]


async def test_s10_a_served_ask_past_its_deadline_is_declined_by_the_sweep(
    redis_url: str,
) -> None:
    """S10, issue 11 item 4: the page's deadline sweep declines a served ask
    as ``timeout``; the waiting task completes with the refusal, the tool
    never ran."""
    factory = load_factory("tests.unit.gateway.task_server:DESK")
    tasks = Tasks()
    with running(factory, redis_url, ask_timeout_s=0.2, sweep_s=0.1):
        async with _desk(redis_url) as (served, url), client(url, tasks) as c:
            result = await c.call_tool("refund", {"amount": 250})
            session_id = tasks.handles[0].task_id.partition("/")[0]
            records = await served.store.read(session_id)
    assert ("declined by human", True) == text_of(result)
    events = [r.decode() for r in records]
    assert "tool.dispatched" not in [e.type for e in events]
    [resumed] = [e for e in events if e.type == "pause.resume"]
    assert (False, "timeout") == (resumed.approved, resumed.by)
