"""The approvals page in headless Chromium, driven by Playwright (issues 11, 28).

A session pauses through the API; a person signs in on the page with an
approver token, sees the ask (question, rule, tool, arguments, session, age)
arrive live over SSE, approves it with a note, and the ask leaves the list;
the session finishes and its row names the authenticated approver.

The browser is the system ``chromium`` (``browsing.chromium``), never
a Playwright download. Screenshots are kept in ``tests/artifacts/``
(gitignored): ``approvals-page.png`` with the asks, ``approvals-done.png``
after the approval; issue 28's ``approvals-card.png`` (a card's conversation),
``approvals-decided.png``, ``approvals-stale.png``, ``approvals-wrong-token.png``
and ``approvals-phone.png`` (375 px).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.http import agents
from tests.e2e.http.browsing import (
    chromium,
    opened,
    pause,
    shot,
    sign_in,
    tamper_user_message,
)
from tests.e2e.http.server import (
    APPROVER_TOKEN,
    OTHER_APPROVER_TOKEN,
    SESSION_TOKEN,
    Running,
    client,
    running,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless system Chromium (fails, never skips, when it is missing)."""
    with chromium() as launched:
        yield launched


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


# -- issue 28 item 1: an approver decides from what the card shows ----------------


def _card(page: Page, sid: str) -> Any:
    return page.locator(f'li.ask[data-ask="{sid}/c8"]')


def _decided(page: Page, sid: str) -> Any:
    return page.locator(f'li.resolved[data-ask="{sid}/c8"]')


WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def test_a_card_shows_the_conversation_the_rules_detail_and_links_its_session(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1: the card holds the user's message, the model's
    proposal, the turn's earlier decision (the rule's why), the rule's
    detail, and a link to the session view; approving turns it into a
    decided card naming the approver and the time, live and after reload."""
    sid = pause(api.url, "Refund order 8 for $900")
    with opened(browser) as (_context, page):
        sign_in(page, api.url)
        card = _card(page, sid)
        conversation = card.locator(".conversation")
        expect(conversation.locator("li.kind-message")).to_have_text(
            "the user Refund order 8 for $900"
        )
        proposal = conversation.locator("li.kind-proposal")
        expect(proposal).to_contain_text("the model proposes a tool call")
        expect(proposal).to_contain_text("refund (c8)")
        expect(card.locator(".turn-decisions li")).to_have_text(
            "four-eyes: ask at before-tool · refund Refund over $500?"
        )
        assert {"amount": 900.0} == json.loads(card.locator(".detail").inner_text())
        link = card.locator(".session a")
        assert f"/sessions/{sid}" == link.get_attribute("href")
        shot(page, "approvals-card.png")
        card.locator(".note").fill("order checked")
        card.locator("button.approve").click()
        expect(_decided(page, sid)).to_contain_text("Approved by dana@ops")
        expect(_card(page, sid)).to_have_count(0)
        # The SSE list replaces the local card with the recorded decision.
        expect(_decided(page, sid).locator(".resolved-said")).to_have_text(
            re.compile(rf"Approved by dana@ops at {WHEN}")
        )
        page.reload()
        expect(_decided(page, sid).locator(".resolved-said")).to_have_text(
            re.compile(rf"Approved by dana@ops at {WHEN}")
        )
        expect(_decided(page, sid).locator(".note-said")).to_have_text("order checked")
        shot(page, "approvals-decided.png")


def test_under_a_redaction_policy_the_card_shows_the_placeholder(
    redis_url: str, browser: Browser
) -> None:
    """Issue 28 item 1, G86: the conversation shown is what the policy
    serves: the user's message, the arguments and the why are placeholders."""
    with running(agents.redacted, redis_url) as server:
        sid = pause(server.url, "Refund order 8 for $900")
        with opened(browser) as (_context, page):
            sign_in(page, server.url)
            card = _card(page, sid)
            expect(card.locator(".conversation li.kind-message")).to_have_text(
                "the user [redacted]"
            )
            expect(card.locator(".turn-decisions li")).to_contain_text("[redacted]")
            assert "Refund order 8" not in card.inner_text()
            assert "[redacted]" == card.locator(".question").inner_text()


def test_a_stale_page_deciding_a_decided_ask_says_who_decided_and_when(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1: a page whose live list is cut off still shows an ask
    another approver decided; deciding it says, in words, who did and when,
    never a raw error code, and records nothing more."""
    sid = pause(api.url, "Refund order 8 for $900")
    with opened(browser) as (context, page):
        context.route("**/page/asks/events", lambda route: route.abort())
        sign_in(page, api.url)
        expect(_card(page, sid)).to_have_count(1)
        with client(api.url, OTHER_APPROVER_TOKEN) as c:
            assert 200 == c.post(f"/asks/{sid}/c8/approve", json={}).status_code
        _card(page, sid).locator("button.decline").click()
        said = _decided(page, sid).locator(".outcome")
        expect(said).to_have_text(
            re.compile(rf"Already approved by erin@ops at {WHEN}\.")
        )
        expect(page.locator("#status")).to_contain_text("decided elsewhere")
        assert "ERR_" not in page.locator("body").inner_text()
        shot(page, "approvals-stale.png")
    with client(api.url, APPROVER_TOKEN) as c:
        rows = c.get(f"/sessions/{sid}").json()["middleware_decisions"]
    assert ["ask", "allow"] == [
        r["outcome"] for r in rows if r["middleware"] == "four-eyes"
    ]


def _decision_post(request: Any, posts: list[str]) -> None:
    if request.method == "POST" and "/asks/" in request.url:
        posts.append(request.url)


def test_a_double_click_decides_once_and_never_ends_on_an_error(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1: the buttons are held while a decision is in flight,
    so a double click posts one decision and the card ends approved."""
    sid = pause(api.url, "Refund order 8 for $900")
    posts: list[str] = []
    with opened(browser) as (_context, page):
        page.on(
            "request",
            lambda r: (
                posts.append(r.url)
                if r.method == "POST" and "/asks/" in r.url
                else None
            ),
        )
        sign_in(page, api.url)
        _card(page, sid).locator("button.approve").dblclick()
        expect(_decided(page, sid)).to_contain_text("Approved by dana@ops")
        expect(page.locator("#status")).to_contain_text("approved: session")
        expect(page.locator(".error")).to_have_count(0)
    assert [f"{api.url}/asks/{sid}/c8/approve"] == posts
    with client(api.url, APPROVER_TOKEN) as c:
        snapshot = c.get(f"/sessions/{sid}").json()
    assert "Done: refunded 900.00 on order 8" == snapshot["history"][-1]["content"]


def test_an_ended_sign_in_is_said_on_the_page_with_a_way_back(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1, H5: when the login ends (signed out in another tab),
    the open page says so and offers the sign-in, instead of going blank."""
    pause(api.url, "Refund order 8 for $900")
    with opened(browser) as (context, page):
        sign_in(page, api.url)
        other = context.new_page()
        other.goto(api.url + "/")
        other.click("text=sign out")
        expect(other.locator("#login")).to_be_visible()
        status = page.locator("#status")
        expect(status).to_contain_text(
            "Your sign-in has expired or was ended: sign in again.", timeout=20_000
        )
        expect(page.locator("#sign-in-again")).to_have_attribute("href", "/")
        expect(page.locator("li.ask button.approve")).to_be_disabled()


def test_a_wrong_token_is_said_above_the_form(api: Running, browser: Browser) -> None:
    """Issue 28 item 1: a wrong token gets a message, never a blank form."""
    with opened(browser) as (_context, page):
        page.goto(api.url + "/")
        page.get_by_label("Token").fill("not-a-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text(
            "That token is not valid: sign in with an approver token."
        )
        shot(page, "approvals-wrong-token.png")


def test_the_page_is_usable_from_the_keyboard_with_named_controls(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1: each control has an accessible name; a note typed and
    a decision taken with the keyboard alone are recorded."""
    sid = pause(api.url, "Refund order 8 for $900")
    with opened(browser) as (_context, page):
        sign_in(page, api.url)
        approve = page.get_by_role("button", name=f"Approve refund in session {sid}")
        expect(approve).to_have_count(1)
        note = page.get_by_label("Note for this decision (recorded with it)")
        expect(note).to_have_count(1)
        expect(page.get_by_role("status").first).to_be_attached()
        note.focus()
        page.keyboard.type("by keyboard")
        page.keyboard.press("Tab")
        assert "approve" == page.evaluate("document.activeElement.className")
        page.keyboard.press("Enter")
        expect(_decided(page, sid)).to_contain_text("Approved by dana@ops")
    with client(api.url, APPROVER_TOKEN) as c:
        rows = c.get(f"/sessions/{sid}").json()["middleware_decisions"]
    assert "approved by dana@ops: by keyboard" == rows[1]["why"]


def test_the_page_works_at_phone_width(api: Running, browser: Browser) -> None:
    """Issue 28 item 1: at 375 px nothing scrolls sideways and both buttons
    are on screen and work."""
    sid = pause(api.url, "Refund order 8 for $900")
    with opened(browser, viewport={"width": 375, "height": 812}) as (_context, page):
        sign_in(page, api.url)
        card = _card(page, sid)
        expect(card).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        for button in ("button.approve", "button.decline"):
            box = card.locator(button).bounding_box()
            assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= 375
        shot(page, "approvals-phone.png")
        card.locator("button.decline").click()
        expect(_decided(page, sid)).to_contain_text("Declined by dana@ops")


def test_a_card_whose_record_does_not_verify_shows_no_conversation(
    api: Running, browser: Browser, redis_url: str
) -> None:
    """Issue 28 item 1, R3 (fail closed): a stream edited before its ask is
    not shown as the conversation; the card says where it breaks and sends
    the approver to the session view."""
    sid = pause(api.url, "Refund order 8 for $900")
    seq = tamper_user_message(redis_url, sid, b"order 8", b"order 1")
    with opened(browser) as (_context, page):
        sign_in(page, api.url)
        card = _card(page, sid)
        expect(card.locator("p.conversation")).to_have_text(
            f"This session's record does not verify (broken at seq {seq}): "
            "open the session view before deciding."
        )
        assert "order 1" not in card.inner_text()


def test_a_caller_who_may_not_decide_is_told_so_not_shown_a_blank_form(
    api: Running,
) -> None:
    """Issue 28 item 1: a session token at ``/`` gets 403 with a sentence
    naming who it is and what it lacks, above the sign-in form."""
    with client(api.url, SESSION_TOKEN) as c:
        reply = c.get("/")
    assert 403 == reply.status_code
    assert (
        "You are signed in as alice@app, who may not decide asks: sign in with "
        "an approver token."
    ) in reply.text
    assert 'id="login"' in reply.text
