"""The session view an auditor reads (issue 28 item 2), in headless Chromium.

A real ``helmlog serve`` on a real redis-server: a session is paused,
approved with a note and finished; an auditor signs in and reads it as a
timeline (messages, each rule's decision with its why and before/after,
the pause and who resolved it, the tool call and its result, an error),
with the chain's verdict, the JSON-lines export and the OTel replay
command. A stream edited behind the store's back shows "broken at seq N".
An auditor reads but never decides (403). Screenshots: ``session.png``,
``session-broken.png`` in ``tests/artifacts/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from helmlog import Agent, MessageMiddleware, ToolMiddleware, allow, deny
from helmlog.events import EventStore
from helmlog.runtime.providers import scripted
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
    AUDITOR_TOKEN,
    SESSION_TOKEN,
    Running,
    client,
    running,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]

HTML = {"Accept": "text/html"}


def _trim(msg: Any) -> Any:
    if msg.phase == "input" and msg.content.startswith("Please, "):
        return allow(msg.content.removeprefix("Please, "), "dropped the pleasantry")
    if msg.phase == "input" and "codename" in msg.content:
        return deny("codenames stay out of the desk")
    return allow()


def desk(store: EventStore) -> Agent:
    """The refund desk with an input rule that transforms (and may deny)."""
    return (
        Agent.create(provider=scripted(respond=agents.respond), model="m", store=store)
        .tool(agents.refund)
        .act(
            input=[MessageMiddleware(name="trim", on_message=_trim)],
            before_tool=[
                ToolMiddleware(name="four-eyes", on_tool_call=agents.four_eyes_rule)
            ],
        )
        .build()
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def api(redis_url: str) -> Iterator[Running]:
    with running(desk, redis_url) as server:
        yield server


def _story(url: str) -> str:
    """A session: paused, approved with a note, answered, then a denied message."""
    sid = pause(url, "Please, refund order 8 for $900")
    with client(url, APPROVER_TOKEN) as c:
        decided = c.post(f"/asks/{sid}/c8/approve", json={"note": "receipt seen"})
    assert "answered" == decided.json()["status"], decided.text
    with client(url, SESSION_TOKEN) as c:
        refused = c.post(f"/sessions/{sid}/messages", json={"message": "codename x"})
    assert 422 == refused.status_code, refused.text
    return sid


def _titles(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("ol.timeline li .title").all_inner_texts()]


def test_an_auditor_reads_a_session_as_a_timeline_with_its_verdict_and_export(
    api: Running, browser: Browser, redis_url: str, tmp_path: Path
) -> None:
    """Issue 28 item 2: turns, messages, each decision's why (before/after of
    a transform), the pause and who resolved it, the tool call and result, the
    error; "intact"; the export downloads every event as JSON lines."""
    sid = _story(api.url)
    with opened(browser, accept_downloads=True) as (_context, page):
        sign_in(page, api.url, AUDITOR_TOKEN, "olga@audit")
        expect(page.locator("#auditor-note")).to_contain_text("needs an approver")
        page.goto(f"{api.url}/sessions/{sid}")
        chain = page.locator("#chain")
        expect(chain).to_have_text(
            re.compile(r"Chain intact: all (\d+) events verify\.")
        )
        count = int(re.findall(r"\d+", chain.inner_text())[0])
        titles = _titles(page)
        expected = [
            "trim: allow at input (changed the value)",
            "the user",
            "the model proposes a tool call",
            "four-eyes: ask at before-tool · refund",
            "paused: four-eyes asks a person about refund",
            "approved by dana@ops",
            "four-eyes: allow at before-tool · refund",
            "tool refund dispatched (c8)",
            "the turn ended",
            "trim: deny at input",
        ]
        at = [titles.index(t) for t in expected]
        assert sorted(at) == at, titles
        assert any(t.startswith("tool refund returned") for t in titles), titles
        assert any(t.startswith("error ERR_MESSAGE_DENIED") for t in titles), titles
        transform = page.locator("ol.timeline li.kind-decision").first
        expect(transform.locator(".value pre")).to_have_text(
            ["Please, refund order 8 for $900", "refund order 8 for $900"]
        )
        expect(transform.locator(".text")).to_have_text("dropped the pleasantry")
        resolved = page.locator("ol.timeline li.kind-resolved")
        expect(resolved.locator(".text")).to_have_text("receipt seen")
        expect(page.locator("section.turn h3")).to_have_text(
            ["Turn 1, for alice@app", "An input refused before its turn began"]
        )
        command = page.locator("#otel").inner_text()
        otel = "--otlp http://localhost:4318"
        assert f"helmlog replay {sid} --store {redis_url} {otel}" == command
        shot(page, "session.png")
        with page.expect_download() as fetched:
            page.click("#export")
        path = tmp_path / "export.jsonl"
        fetched.value.save_as(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert count == len(lines)
    assert list(range(1, count + 1)) == [line["seq"] for line in lines]
    types = {line["type"] for line in lines}
    assert {"agent.turn_start", "pause.request", "pause.resume", "error.fatal"} <= types


def test_a_tampered_session_shows_broken_at_its_seq(
    api: Running, browser: Browser, redis_url: str
) -> None:
    """Issue 28 item 2, R18: a user message edited in Redis breaks the chain
    at its seq; the view says "broken at seq N" and marks what follows as
    unverified; the owning app no longer reads it (its owner is not believed)."""
    sid = _story(api.url)
    edited = tamper_user_message(redis_url, sid, b"order 8", b"order 1")
    with opened(browser) as (_context, page):
        sign_in(page, api.url, AUDITOR_TOKEN, "olga@audit")
        page.goto(f"{api.url}/sessions/{sid}")
        expect(page.locator("#chain")).to_contain_text(f"Chain broken at seq {edited}:")
        expect(page.locator("#chain")).to_have_class(re.compile("broken"))
        first = page.locator(f'ol.timeline li[data-seq="{edited}"]')
        expect(first).to_contain_text("(after the break: unverified)")
        expect(first).to_contain_text("refund order 1 for $900")
        before = page.locator('ol.timeline li[data-seq="1"]')  # the input rule's
        expect(before).to_contain_text("trim: allow at input")
        expect(before).not_to_contain_text("unverified")
        shot(page, "session-broken.png")
    with client(api.url, SESSION_TOKEN) as c:
        assert 404 == c.get(f"/sessions/{sid}", headers=HTML).status_code


def test_an_auditor_reads_but_a_decision_by_an_auditor_is_a_403(api: Running) -> None:
    """Issue 28 item 2: the auditor role reads sessions (JSON, page, facts
    stream, export) and history, and may not decide or list asks; the ask
    stays pending."""
    sid = pause(api.url, "Refund order 8 for $900")
    with client(api.url, AUDITOR_TOKEN) as c:
        decided = c.post(f"/asks/{sid}/c8/approve", json={})
        listed = c.get("/asks")
        read = c.get(f"/sessions/{sid}")
        page = c.get(f"/sessions/{sid}", headers=HTML)
        history = c.get("/history", headers=HTML)
        export = c.get(f"/sessions/{sid}/export")
        with c.stream("GET", f"/sessions/{sid}/events") as facts:
            first = next(facts.iter_lines())
    assert (200, "event: middleware.decision") == (facts.status_code, first)
    assert (403, "ERR_FORBIDDEN") == (decided.status_code, decided.json()["code"])
    assert 403 == listed.status_code
    assert (200, 200, 200, 200) == (
        read.status_code,
        page.status_code,
        history.status_code,
        export.status_code,
    )
    assert "application/x-ndjson" == export.headers["content-type"]
    with client(api.url, APPROVER_TOKEN) as c:
        assert [sid] == [a["session_id"] for a in c.get("/asks").json()]


def test_a_session_view_under_redaction_shows_placeholders_and_exports_no_values(
    redis_url: str,
) -> None:
    """Issue 28 item 2, G86: the view and the export are served: the message
    and the arguments are the placeholder, not the values."""
    with running(agents.redacted, redis_url) as server:
        sid = pause(server.url, "Refund order 8 for $900")
        with client(server.url, AUDITOR_TOKEN) as c:
            page = c.get(f"/sessions/{sid}", headers=HTML).text
            export = c.get(f"/sessions/{sid}/export").content
    assert "[redacted]" in page
    assert "Refund order 8" not in page
    assert b"Refund order 8" not in export
    assert b"[redacted]" in export


def test_an_unknown_or_unsigned_session_view_says_so(api: Running) -> None:
    """Issue 28 item 2, H2: no sign-in gets the sign-in form with a message
    (401); an unknown session is a 404 problem, as over JSON."""
    with client(api.url) as c:
        unsigned = c.get("/sessions/nope", headers=HTML)
    with client(api.url, AUDITOR_TOKEN) as c:
        unknown = c.get("/sessions/nope", headers=HTML)
    assert 401 == unsigned.status_code
    assert "Sign in to read this" in unsigned.text
    assert (404, "ERR_UNKNOWN_SESSION") == (unknown.status_code, unknown.json()["code"])
