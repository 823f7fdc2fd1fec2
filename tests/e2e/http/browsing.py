"""Support for the page tests: Debian's Chromium under Playwright, and an edit.

The browser is the system's Chromium (Debian's ``chromium`` package, or
``chromium`` on PATH, or macOS's Chromium.app; ``$HELMLOG_CHROMIUM`` names
another), never a Playwright download; a missing one fails the test (a skip
reads as green).
Screenshots go to ``tests/artifacts/`` (gitignored, a folder CI keeps on the
machine it ran on; ``docs/img/`` holds the one the README shows).
``tamper_user_message`` edits a stream in Redis behind the store's back.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from helmlog.events.redis import stream_key
from tests.e2e.http.server import APPROVER_TOKEN, SESSION_TOKEN, client

MACOS_CHROMIUM = "/Applications/Chromium.app/Contents/MacOS/Chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


def chromium_path() -> str | None:
    """The system Chromium: ``$HELMLOG_CHROMIUM``, else on PATH, else macOS's."""
    named = os.environ.get("HELMLOG_CHROMIUM")
    if named:
        return shutil.which(named)
    for candidate in ("chromium", "chromium-browser", MACOS_CHROMIUM):
        found = shutil.which(candidate)
        if found is not None:
            return found
    return None


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless system Chromium (fails, never skips, when it is missing)."""
    path = chromium_path()
    if path is None:
        pytest.fail(
            "no chromium found ($HELMLOG_CHROMIUM, PATH, /Applications): "
            "apt-get install chromium (Debian/Ubuntu) or brew install chromium "
            "(macOS); the page tests need a real browser",
            pytrace=False,
        )
    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def opened(browser: Browser, **options: Any) -> Iterator[tuple[BrowserContext, Page]]:
    """A fresh context (its own cookies) and a page in it, closed after."""
    context = browser.new_context(**options)
    try:
        yield context, context.new_page()
    finally:
        context.close()


def sign_in(
    page: Page, url: str, token: str = APPROVER_TOKEN, who: str = "dana@ops"
) -> None:
    """Sign in on the page's form and wait until it names ``who``."""
    page.goto(url + "/")
    page.fill("#token", token)
    page.click("#sign-in")
    expect(page.locator("#who")).to_have_text(who)


def pause(url: str, message: str) -> str:
    """Start a session through the API that pauses on an ask; its id."""
    with client(url, SESSION_TOKEN) as c:
        reply = c.post("/sessions", json={"message": message})
    assert "paused" == reply.json()["status"], reply.text
    sid: str = reply.json()["session_id"]
    return sid


def shot(page: Page, name: str) -> Path:
    """A full-page screenshot kept as ``tests/artifacts/<name>``."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def tamper_user_message(url: str, sid: str, old: bytes, new: bytes) -> int:
    """Rewrite the first user message of ``sid`` in Redis, as an attacker
    would; the seq it sat at."""
    client_ = redis.Redis.from_url(url)
    found: list[int] = []
    try:
        key = stream_key(sid)
        entries = client_.xrange(key)
        client_.delete(key)
        for entry_id, fields in entries:
            data = fields[b"data"]
            if not found and b'"role":"user"' in data and old in data:
                fields[b"data"] = data.replace(old, new)
                found.append(int(fields[b"seq"]))
            client_.xadd(key, fields, id=entry_id)
    finally:
        client_.close()
    assert 1 == len(found)
    return found[0]
