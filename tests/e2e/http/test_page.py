"""The approvals page in headless Chromium, driven by Playwright (issue 11 item 3).

A session pauses through the API; a person signs in on the page with an
approver token, sees the ask (question, rule, tool, arguments, session, age)
arrive live over SSE, approves it with a note, and the ask leaves the list;
the session finishes and its row names the authenticated approver.

The browser is the Debian ``chromium`` package (``/usr/bin/chromium``), never
a Playwright download. Screenshots are kept in ``tests/artifacts/``
(gitignored): ``approvals-page.png`` with the asks, ``approvals-done.png``
after the approval.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.http import agents
from tests.e2e.http.server import (
    APPROVER_TOKEN,
    SESSION_TOKEN,
    Running,
    client,
    running,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian Chromium (fails, never skips, when it is missing)."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(
            f"{CHROMIUM} is missing: apt-get install chromium (Debian/Ubuntu) or "
            "brew install chromium (macOS); the page test "
            "needs a real browser)",
            pytrace=False,
        )
    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def api(redis_url: str) -> Iterator[Running]:
    with running(agents.build, redis_url) as server:
        yield server


def _pause(url: str, message: str) -> str:
    with client(url, SESSION_TOKEN) as c:
        reply = c.post("/sessions", json={"message": message})
    assert "paused" == reply.json()["status"], reply.text
    sid: str = reply.json()["session_id"]
    return sid


def _sign_in(page: Page, url: str) -> None:
    page.goto(url + "/")
    page.fill("#token", APPROVER_TOKEN)
    page.click("#sign-in")
    expect(page.locator("#who")).to_have_text("dana@ops")


def test_a_person_approves_on_the_page_and_the_session_finishes(
    api: Running, browser: Browser
) -> None:
    """Sign in, see the ask arrive live, approve with a note; the row names them."""
    first = _pause(api.url, "Refund order 8 for $900")
    context = browser.new_context()
    page = context.new_page()
    try:
        _sign_in(page, api.url)
        asks = page.locator("li.ask")
        expect(asks).to_have_count(1)
        second = _pause(api.url, "Refund order 9 for $990")  # arrives over SSE
        expect(asks).to_have_count(2)
        row = page.locator(f'li.ask[data-ask="{first}/c8"]')
        shown = {
            "question": row.locator(".question").inner_text(),
            "middleware": row.locator(".middleware").inner_text(),
            "tool": row.locator(".tool").inner_text(),
            "args": json.loads(row.locator(".args").inner_text()),
            "session": row.locator(".session").inner_text(),
        }
        assert {
            "question": "Refund over $500?",
            "middleware": "four-eyes",
            "tool": "refund",
            "args": {"amount": 900.0, "order": 8},
            "session": first,
        } == shown
        assert row.locator(".age").inner_text().endswith(("s", "m"))
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "approvals-page.png"), full_page=True)
        row.locator(".note").fill("checked the order")
        row.locator("button.approve").click()
        expect(page.locator(f'li.ask[data-ask="{first}/c8"]')).to_have_count(0)
        expect(asks).to_have_count(1)
        expect(page.locator("#status")).to_contain_text("answered")
        page.screenshot(path=str(ARTIFACTS / "approvals-done.png"), full_page=True)
    finally:
        context.close()
    with client(api.url, APPROVER_TOKEN) as c:
        snapshot: dict[str, Any] = c.get(f"/sessions/{first}").json()
        pending = [a["session_id"] for a in c.get("/asks").json()]
    assert "Done: refunded 900.00 on order 8" == snapshot["history"][-1]["content"]
    assert ("four-eyes", "allow", "approved by dana@ops: checked the order") == (
        snapshot["middleware_decisions"][1]["middleware"],
        snapshot["middleware_decisions"][1]["outcome"],
        snapshot["middleware_decisions"][1]["why"],
    )
    assert [second] == pending


def test_the_page_asks_for_a_token_and_refuses_a_session_token(
    api: Running, browser: Browser
) -> None:
    """No list without an approver: a session token signs no one in."""
    _pause(api.url, "Refund order 8 for $900")
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(api.url + "/")
        expect(page.locator("#login")).to_be_visible()
        assert 0 == page.locator("li.ask").count()
        page.fill("#token", SESSION_TOKEN)
        page.click("#sign-in")
        expect(page.locator("#login")).to_be_visible()
        assert 0 == page.locator("li.ask").count()
    finally:
        context.close()


def test_a_decline_on_the_page_leaves_the_list_and_names_the_decliner(
    api: Running, browser: Browser
) -> None:
    """Decline with a note: the row says ``declined by dana@ops: <note>``."""
    sid = _pause(api.url, "Refund order 8 for $900")
    context = browser.new_context()
    page = context.new_page()
    try:
        _sign_in(page, api.url)
        row = page.locator(f'li.ask[data-ask="{sid}/c8"]')
        row.locator(".note").fill("too much")
        row.locator("button.decline").click()
        expect(page.locator("li.ask")).to_have_count(0)
        expect(page.locator("#empty")).to_be_visible()
    finally:
        context.close()
    with client(api.url, APPROVER_TOKEN) as c:
        rows = c.get(f"/sessions/{sid}").json()["middleware_decisions"]
    assert "declined by dana@ops: too much" == rows[1]["why"]


def test_a_note_being_typed_survives_the_list_refreshing(
    api: Running, browser: Browser
) -> None:
    """A new ask arriving over SSE redraws the list; the note typed on another
    ask is kept, and the approval records it."""
    sid = _pause(api.url, "Refund order 8 for $900")
    context = browser.new_context()
    page = context.new_page()
    try:
        _sign_in(page, api.url)
        row = page.locator(f'li.ask[data-ask="{sid}/c8"]')
        row.locator(".note").fill("checked twice")
        _pause(api.url, "Refund order 9 for $990")  # redraws the list
        expect(page.locator("li.ask")).to_have_count(2)
        expect(row.locator(".note")).to_have_value("checked twice")
        row.locator("button.approve").click()
        expect(page.locator(f'li.ask[data-ask="{sid}/c8"]')).to_have_count(0)
    finally:
        context.close()
    with client(api.url, APPROVER_TOKEN) as c:
        rows = c.get(f"/sessions/{sid}").json()["middleware_decisions"]
    assert "approved by dana@ops: checked twice" == rows[1]["why"]
