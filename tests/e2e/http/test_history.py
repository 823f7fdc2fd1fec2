"""The history of decisions (issue 28 item 1), in headless Chromium and over HTTP.

A real ``helmlog serve`` on a real redis-server; asks decided by two
approvers through the API; an auditor filters the history by approver,
outcome, rule, tool and day, and pages through it. The history is computed
from the sessions' ``pause.resume`` records: a restarted server shows the
same, and a deadline's decline shows as "timed out". Screenshot:
``tests/artifacts/history.png``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.http import agents
from tests.e2e.http.browsing import chromium, opened, pause, shot, sign_in
from tests.e2e.http.server import (
    APPROVER_TOKEN,
    AUDITOR_TOKEN,
    OTHER_APPROVER_TOKEN,
    SESSION_TOKEN,
    Running,
    client,
    running,
)
from tests.polling import until_sync

pytestmark = [pytest.mark.redis, pytest.mark.slow]

HTML = {"Accept": "text/html"}
ROW = re.compile(r'<tr class="decision" data-session="([^"]+)"')


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def api(redis_url: str) -> Iterator[Running]:
    with running(agents.build, redis_url) as server:
        yield server


def _decide(url: str, token: str, sid: str, verdict: str, order: int) -> None:
    with client(url, token) as c:
        reply = c.post(f"/asks/{sid}/c{order}/{verdict}", json={"note": verdict})
    assert 200 == reply.status_code, reply.text


def _three_decisions(url: str) -> dict[str, str]:
    """dana approves order 8, erin declines order 9, erin approves order 10;
    order 11 stays pending. Returns ``{name: session id}``."""
    ids = {name: pause(url, f"Refund order {n} for $900") for name, n in
           (("dana-ok", 8), ("erin-no", 9), ("erin-ok", 10), ("open", 11))}  # fmt: skip
    _decide(url, APPROVER_TOKEN, ids["dana-ok"], "approve", 8)
    _decide(url, OTHER_APPROVER_TOKEN, ids["erin-no"], "decline", 9)
    _decide(url, OTHER_APPROVER_TOKEN, ids["erin-ok"], "approve", 10)
    return ids


def _rows(page: Page) -> list[str]:
    return [
        s or ""
        for s in page.locator("tr.decision").evaluate_all(
            "rows => rows.map(r => r.dataset.session)"
        )
    ]


def test_an_auditor_filters_the_history_by_approver_and_outcome(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1: every decided ask is listed newest first (the pending
    one is not); choosing an approver, then an outcome, narrows the list;
    a row links to its session's view."""
    ids = _three_decisions(api.url)
    with opened(browser) as (_context, page):
        sign_in(page, api.url, AUDITOR_TOKEN, "olga@audit")
        page.click("#nav-history")
        expect(page.locator("#count")).to_have_text("3 decisions match.")
        assert [ids["erin-ok"], ids["erin-no"], ids["dana-ok"]] == _rows(page)
        page.get_by_label("Approver").select_option("erin@ops")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#count")).to_have_text("2 decisions match.")
        assert {"erin@ops"} == set(page.locator("td.by").all_inner_texts())
        page.get_by_label("Outcome").select_option("declined")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#count")).to_have_text("1 decision matches.")
        assert [ids["erin-no"]] == _rows(page)
        assert "approver=erin%40ops" in page.url and "outcome=declined" in page.url
        shot(page, "history.png")
        page.locator("tr.decision a").click()
        expect(page.locator("#chain")).to_contain_text("Chain intact")
        assert page.url.endswith(f"/sessions/{ids['erin-no']}")


def test_the_history_filters_by_rule_tool_and_day_and_pages(api: Running) -> None:
    """Issue 28 item 1: rule and tool filters, a day window (``since`` on or
    after, ``until`` before, UTC), and pages of ``size`` with links that keep
    the filter."""
    _three_decisions(api.url)
    today = datetime.now(UTC).date()
    tomorrow = (today + timedelta(days=1)).isoformat()

    def sessions(query: str) -> list[str]:
        with client(api.url, AUDITOR_TOKEN) as c:
            reply = c.get(f"/history?{query}", headers=HTML)
        assert 200 == reply.status_code, reply.text
        return ROW.findall(reply.text)

    assert 3 == len(sessions("rule=four-eyes&tool=refund"))
    assert [] == sessions("rule=someone-else")
    assert [] == sessions(f"since={tomorrow}")
    assert 3 == len(sessions(f"since={today.isoformat()}&until={tomorrow}"))
    first, second = sessions("size=2"), sessions("size=2&page=2")
    assert (2, 1) == (len(first), len(second))
    assert not set(first) & set(second)
    with client(api.url, AUDITOR_TOKEN) as c:
        page = c.get("/history?size=2&approver=erin%40ops", headers=HTML).text
    assert "page 1 of 1" in page
    with client(api.url, AUDITOR_TOKEN) as c:
        page = c.get("/history?size=2", headers=HTML).text
    assert 'href="/history?size=2&amp;page=2"' in page


@pytest.mark.parametrize(
    "query", ["outcome=maybe", "page=0", "since=yesterday", "size=100000"]
)
def test_a_malformed_history_filter_is_a_400_problem(api: Running, query: str) -> None:
    """Issue 28 item 1: a filter that is not one is said (400), never ignored."""
    with client(api.url, AUDITOR_TOKEN) as c:
        reply = c.get(f"/history?{query}", headers=HTML)
    assert (400, "ERR_BAD_REQUEST") == (reply.status_code, reply.json()["code"])


def test_the_history_is_computed_from_the_streams_and_survives_a_restart(
    redis_url: str,
) -> None:
    """Issue 28 item 1: nothing but the sessions' records holds the history:
    a fresh server on the same store lists the same decisions."""
    with running(agents.build, redis_url) as first:
        ids = _three_decisions(first.url)
        with client(first.url, AUDITOR_TOKEN) as c:
            before = ROW.findall(c.get("/history", headers=HTML).text)
    with (
        running(agents.build, redis_url) as second,
        client(second.url, AUDITOR_TOKEN) as c,
    ):
        after = ROW.findall(c.get("/history", headers=HTML).text)
    assert [ids["erin-ok"], ids["erin-no"], ids["dana-ok"]] == before == after


def test_a_deadline_decline_is_listed_as_timed_out(redis_url: str) -> None:
    """Issue 28 item 1, issue 11 item 4: the sweep's decline (``by`` timeout)
    is a decision too, with its own outcome."""
    with running(agents.hurried, redis_url, sweep_s=0.1) as server:
        sid = pause(server.url, "Refund order 8 for $900")

        def listed() -> list[str]:
            with client(server.url, AUDITOR_TOKEN) as c:
                reply = c.get("/history?outcome=timed+out", headers=HTML)
            return ROW.findall(reply.text)

        until_sync("the deadline's decline in the history", lambda: bool(listed()))
        assert [sid] == listed()


def test_only_approvers_and_auditors_read_the_history(api: Running) -> None:
    """Issue 28 items 1–2: a session token may not read it (403); with no
    sign-in the page asks for one (401)."""
    with client(api.url, SESSION_TOKEN) as c:
        as_app = c.get("/history", headers=HTML)
    with client(api.url) as c:
        unsigned = c.get("/history", headers=HTML)
    assert (403, 401) == (as_app.status_code, unsigned.status_code)
    assert "Sign in to read this" in unsigned.text


def test_the_history_and_session_view_work_at_phone_width(
    api: Running, browser: Browser
) -> None:
    """Issue 28 item 1: at 375 px the history's rows and the session view do
    not scroll sideways; each row still names its approver."""
    ids = _three_decisions(api.url)
    with opened(browser, viewport={"width": 375, "height": 812}) as (_ctx, page):
        sign_in(page, api.url, AUDITOR_TOKEN, "olga@audit")
        page.goto(api.url + "/history")
        expect(page.locator("tr.decision")).to_have_count(3)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        expect(page.locator("td.by").first).to_be_visible()
        shot(page, "history-phone.png")
        page.goto(f"{api.url}/sessions/{ids['dana-ok']}")
        expect(page.locator("#chain")).to_contain_text("Chain intact")
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
