"""Signing in on the approvals page (issue 24 item 4, H5).

Pattern: a real ``helmlog serve`` (uvicorn on a free loopback port, real
         Redis); httpx2 sends what a browser and a hostile site send (cookies
         and Origin set by hand, redirects not followed), and headless Debian
         Chromium (Playwright, the system ``chromium``) drives the page itself,
         including a form on a foreign origin.
Role:    e2e tests of ``login``/``logout``/``home`` in
         ``gateway/http/_routes.py`` and ``gateway/http/_logins.py``.
Emits:   nothing.

Laws: H5 (the cookie holds an opaque login id the server keeps, never the
token: HttpOnly, SameSite=Strict, Path=/, Max-Age the login's lifetime,
Secure over https as H1 believes it; logout revokes it server-side; an
expired login signs no one in; ``/login`` and ``/logout`` refuse a foreign
Origin with 403 and set nothing; a refused token is said on the page).
"""

from __future__ import annotations

from collections.abc import Iterator
from http.cookies import SimpleCookie

import httpx2
import pytest
from playwright.sync_api import Browser, expect
from typer.testing import CliRunner

from helmlog.cli import app
from tests.e2e.http.browsing import chromium
from tests.polling import until_sync

from . import agents
from .server import APPROVER_TOKEN, SESSION_TOKEN, Running, running

COOKIE = "helmlog_login"
FOREIGN = "http://evil.example"


def post_form(
    url: str,
    path: str,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    cookie: str | None = None,
) -> httpx2.Response:
    """A form POST as a browser sends it (no redirect followed)."""
    sent = dict(headers or {})
    if cookie is not None:
        sent["Cookie"] = f"{COOKIE}={cookie}"
    with httpx2.Client(base_url=url, timeout=30) as c:
        return c.post(
            path,
            content=f"token={token}" if token is not None else "",
            headers={"Content-Type": "application/x-www-form-urlencoded", **sent},
        )


def sign_in(url: str, **headers: str) -> httpx2.Response:
    """Sign dana in from the server's own page."""
    return post_form(
        url, "/login", token=APPROVER_TOKEN, headers={"Origin": url, **headers}
    )


def set_cookie(reply: httpx2.Response) -> SimpleCookie:
    """The reply's Set-Cookie headers, parsed."""
    jar: SimpleCookie = SimpleCookie()
    for line in reply.headers.get_list("set-cookie"):
        jar.load(line)
    return jar


def login_id(reply: httpx2.Response) -> str:
    assert 303 == reply.status_code, reply.text
    return set_cookie(reply)[COOKIE].value


def with_cookie(url: str, path: str, value: str) -> httpx2.Response:
    with httpx2.Client(base_url=url, timeout=30) as c:
        return c.get(path, headers={"Cookie": f"{COOKIE}={value}"})


@pytest.fixture
def api(redis_url: str) -> Iterator[Running]:
    with running(agents.build, redis_url) as server:
        yield server


# -- the cookie -------------------------------------------------------------------


def test_h5_the_cookie_is_an_opaque_login_id_with_strict_attributes(
    api: Running,
) -> None:
    """H5: the cookie is a fresh random id, not the token: HttpOnly,
    SameSite=Strict, Path=/, Max-Age 8 h, not Secure over plain http."""
    reply = sign_in(api.url)
    morsel = set_cookie(reply)[COOKIE]
    assert (303, "/") == (reply.status_code, reply.headers["location"])
    assert {
        "httponly": True,
        "samesite": "strict",
        "path": "/",
        "max-age": "28800",
        "secure": "",
    } == {k: morsel[k] for k in ("httponly", "samesite", "path", "max-age", "secure")}
    assert APPROVER_TOKEN not in morsel.value
    assert 43 == len(morsel.value)
    assert login_id(sign_in(api.url)) != morsel.value
    assert 200 == with_cookie(api.url, "/asks", morsel.value).status_code
    assert 'id="who">dana@ops<' in with_cookie(api.url, "/", morsel.value).text


def test_h5_a_post_on_the_login_cookie_still_needs_x_requested_with(
    api: Running,
) -> None:
    """H5 keeps issue 11's CSRF guard: a decision sent with the login cookie
    but without ``X-Requested-With: helmlog`` is refused before anything."""
    kept = login_id(sign_in(api.url))
    with httpx2.Client(base_url=api.url, timeout=30) as c:
        reply = c.post(
            "/asks/some-session/c8/approve",
            json={"note": None},
            headers={"Cookie": f"{COOKIE}={kept}"},
        )
    assert (403, "ERR_FORBIDDEN") == (reply.status_code, reply.json()["code"])
    assert "X-Requested-With" in reply.json()["detail"]


def test_h5_a_cookie_holding_the_token_signs_no_one_in(api: Running) -> None:
    """H5: the bearer token itself, put in the cookie, is no login."""
    assert 401 == with_cookie(api.url, "/asks", APPROVER_TOKEN).status_code
    assert 'id="login"' in with_cookie(api.url, "/", APPROVER_TOKEN).text


def test_h5_secure_is_set_only_over_https_as_a_trusted_proxy_says(
    redis_url: str,
) -> None:
    """H5 with H1: X-Forwarded-Proto https makes the cookie Secure only from a
    proxy named in --forwarded-allow-ips; from anyone else it changes
    nothing (and an https Origin is then foreign)."""
    https = {"X-Forwarded-Proto": "https"}
    with running(agents.build, redis_url) as server:
        untrusted = sign_in(server.url, **https)
        claimed = post_form(
            server.url,
            "/login",
            token=APPROVER_TOKEN,
            headers={"Origin": server.url.replace("http:", "https:"), **https},
        )
    with running(agents.build, redis_url, forwarded_allow_ips=("127.0.0.1",)) as server:
        trusted = post_form(
            server.url,
            "/login",
            token=APPROVER_TOKEN,
            headers={"Origin": server.url.replace("http:", "https:"), **https},
        )
    assert ("", 403) == (
        set_cookie(untrusted)[COOKIE]["secure"],
        claimed.status_code,
    )
    assert (303, True) == (trusted.status_code, set_cookie(trusted)[COOKIE]["secure"])


# -- Origin -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": FOREIGN},
        {"Origin": "null"},
        {"Referer": FOREIGN + "/attack.html"},
        {},
    ],
    ids=["foreign-origin", "null-origin", "foreign-referer", "no-origin"],
)
def test_h5_a_sign_in_not_from_the_page_is_refused_and_sets_nothing(
    api: Running, headers: dict[str, str]
) -> None:
    """H5: login CSRF: a foreign, null or missing Origin (and Referer) gets a
    403 problem and no cookie, even with a valid approver token."""
    reply = post_form(api.url, "/login", token=APPROVER_TOKEN, headers=headers)
    assert (403, "ERR_FORBIDDEN", []) == (
        reply.status_code,
        reply.json()["code"],
        reply.headers.get_list("set-cookie"),
    )


def test_h5_a_same_origin_referer_stands_in_for_a_missing_origin(
    api: Running,
) -> None:
    """H5: a client that sends only a Referer from the page is accepted."""
    reply = post_form(
        api.url, "/login", token=APPROVER_TOKEN, headers={"Referer": api.url + "/"}
    )
    assert 303 == reply.status_code, reply.text


def test_h5_a_sign_out_from_a_foreign_origin_is_refused_and_revokes_nothing(
    api: Running,
) -> None:
    """H5: a cross-site form cannot sign a person out: 403, no cookie
    cleared, the login still live."""
    kept = login_id(sign_in(api.url))
    reply = post_form(api.url, "/logout", headers={"Origin": FOREIGN}, cookie=kept)
    assert (403, "ERR_FORBIDDEN", []) == (
        reply.status_code,
        reply.json()["code"],
        reply.headers.get_list("set-cookie"),
    )
    assert 200 == with_cookie(api.url, "/asks", kept).status_code


# -- revocation and expiry --------------------------------------------------------


def test_h5_sign_out_revokes_the_login_server_side(api: Running) -> None:
    """H5: after logout the old cookie, replayed, is no one (401), and the
    page says the sign-in ended; the reply clears the cookie."""
    kept = login_id(sign_in(api.url))
    reply = post_form(api.url, "/logout", headers={"Origin": api.url}, cookie=kept)
    cleared = set_cookie(reply)[COOKIE]
    assert (303, "", "0") == (reply.status_code, cleared.value, cleared["max-age"])
    assert 401 == with_cookie(api.url, "/asks", kept).status_code
    page = with_cookie(api.url, "/", kept)
    assert ('id="login"' in page.text, "has expired or was ended" in page.text) == (
        True,
        True,
    )


def test_h5_sign_out_ends_the_open_asks_streams_of_that_login(api: Running) -> None:
    """H5: a page's live asks stream opened on a login ends when the login is
    revoked (another tab signing out), instead of listing asks on."""
    kept = login_id(sign_in(api.url))
    with (
        httpx2.Client(base_url=api.url, timeout=30) as c,
        c.stream(
            "GET", "/page/asks/events", headers={"Cookie": f"{COOKIE}={kept}"}
        ) as stream,
    ):
        assert 200 == stream.status_code
        lines = stream.iter_lines()
        assert "event: asks" == next(lines)  # the first fragment came
        reply = post_form(api.url, "/logout", headers={"Origin": api.url}, cookie=kept)
        assert 303 == reply.status_code
        rest = list(lines)  # returns only when the server ends the stream
    assert "event: asks" not in rest


def test_h5_a_new_sign_in_revokes_the_login_it_replaces(api: Running) -> None:
    """H5: signing in again over a live cookie ends the old login."""
    old = login_id(sign_in(api.url))
    new = login_id(
        post_form(
            api.url,
            "/login",
            token=APPROVER_TOKEN,
            headers={"Origin": api.url},
            cookie=old,
        )
    )
    assert (401, 200) == (
        with_cookie(api.url, "/asks", old).status_code,
        with_cookie(api.url, "/asks", new).status_code,
    )


def test_h5_an_expired_login_no_longer_authenticates(redis_url: str) -> None:
    """H5: a login lives ``login_ttl_s`` (the cookie's Max-Age, rounded up);
    after it the cookie is no one, on the API and on the page."""
    with running(agents.build, redis_url, login_ttl_s=0.5) as server:
        reply = sign_in(server.url)
        kept = login_id(reply)
        until_sync(
            "the login expires",
            lambda: with_cookie(server.url, "/asks", kept).status_code == 401,
            15,
        )
        page = with_cookie(server.url, "/", kept).text
    assert "1" == set_cookie(reply)[COOKIE]["max-age"]
    assert "has expired or was ended" in page


def test_h5_the_login_lifetime_is_a_serve_option() -> None:
    """H5: ``helmlog serve --login-ttl`` takes seconds, at least 1."""
    result = CliRunner().invoke(
        app,
        ["serve", "--agent", "tests.e2e.http.agents:build", "--login-ttl", "0"],
    )
    assert 2 == result.exit_code
    assert "--login-ttl" in " ".join(result.output.split())


# -- in the browser ---------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless system Chromium (fails, never skips, when it is missing)."""
    with chromium() as launched:
        yield launched


@pytest.mark.slow
@pytest.mark.parametrize("token", ["not-a-token", SESSION_TOKEN])
def test_h5_a_refused_token_is_said_on_the_page(
    api: Running, browser: Browser, token: str
) -> None:
    """H5: a wrong token (or one that is not an approver's) shows a message
    above the form, not a blank form; no cookie is set."""
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(api.url + "/")
        expect(page.locator("#login-error")).to_have_count(0)
        page.fill("#token", token)
        page.click("#sign-in")
        expect(page.locator("#login-error")).to_have_text(
            "That token is not valid: sign in with an approver token."
        )
        expect(page.locator("#login")).to_be_visible()
        assert [] == context.cookies()
    finally:
        context.close()


@pytest.mark.slow
def test_h5_in_the_browser_the_login_is_hidden_from_script_and_ends_on_sign_out(
    api: Running, browser: Browser
) -> None:
    """H5: after signing in the page's script cannot read the cookie
    (HttpOnly), it is SameSite=Strict and not the token; sign out ends it,
    and the old cookie replayed in a fresh browser signs no one in."""
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(api.url + "/")
        page.fill("#token", APPROVER_TOKEN)
        page.click("#sign-in")
        expect(page.locator("#who")).to_have_text("dana@ops")
        (kept,) = [c for c in context.cookies() if c["name"] == COOKIE]
        assert (True, "Strict", False, "") == (
            kept["httpOnly"],
            kept["sameSite"],
            kept["value"] == APPROVER_TOKEN,
            page.evaluate("document.cookie"),
        )
        page.click("text=sign out")
        expect(page.locator("#login")).to_be_visible()
        assert [] == [c for c in context.cookies() if c["name"] == COOKIE]
    finally:
        context.close()
    replay = browser.new_context()
    replay.add_cookies([{"name": COOKIE, "value": kept["value"], "url": api.url}])
    page = replay.new_page()
    try:
        page.goto(api.url + "/")
        expect(page.locator("#login-error")).to_contain_text("expired or was ended")
        assert 0 == page.locator("#who").count()
    finally:
        replay.close()


@pytest.mark.slow
def test_h5_a_form_on_a_foreign_site_cannot_sign_the_browser_in(
    api: Running, browser: Browser
) -> None:
    """H5: login CSRF in a real browser: a page on another origin that posts
    a valid approver token to /login gets 403, and the browser holds no
    login afterwards."""
    attack = (
        "<!doctype html><html><body>"
        f'<form id="f" method="post" action="{api.url}/login">'
        f'<input name="token" value="{APPROVER_TOKEN}"></form>'
        "<script>document.getElementById('f').submit()</script></body></html>"
    )
    context = browser.new_context()
    context.route(
        FOREIGN + "/**",
        lambda route: route.fulfill(body=attack, content_type="text/html"),
    )
    page = context.new_page()
    try:
        with page.expect_response(api.url + "/login") as answered:
            page.goto(FOREIGN + "/attack.html")
        assert 403 == answered.value.status
        assert [] == context.cookies()
        page.goto(api.url + "/")
        expect(page.locator("#login")).to_be_visible()
    finally:
        context.close()
