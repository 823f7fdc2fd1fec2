"""A seeded fuzz of the HTTP API: 0 5xx, 0 untyped errors (issue 24).

Pattern: a real ``helmlog serve`` (uvicorn on a free loopback port, real
         Redis) and ~3,000 generated requests sent as raw bytes over raw
         sockets, with and without valid credentials: the real routes and
         mutations of them, any method, hostile headers (content types,
         lying lengths, cookies, Origin, Host), and bodies (random bytes,
         non-UTF-8, huge numbers, deep nesting, each field of the route's
         Struct with a wrong type, valid bodies too).
Role:    an e2e property test of ``gateway/http`` and of its uvicorn edge.
Emits:   nothing.

Laws: issue 11 item 1 and issue 24: every answer is below 500; every 4xx is
an ``application/problem+json`` body with a ``code`` and its ``status``
(the approvals page, ``/`` and ``/login``, answers in HTML); the server logs
no error. Each case comes from ``random.Random(SEED, case)``, so a failure
names the case that reproduces it.
"""

from __future__ import annotations

import json
import logging
import random
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest

from helmlog.gateway.http._auth import COOKIE
from tests.polling import until_sync

from . import agents
from .server import (
    APPROVER_TOKEN,
    OTHER_APPROVER_TOKEN,
    SESSION_TOKEN,
    Running,
    client,
    running,
)

pytestmark = pytest.mark.redis

SEED = 24
CASES = 3_000
WORKERS = 16
MAX_BODY = 16 * 1024
PAGES = ("/", "/login")  # answer in HTML, their errors too
AIMED = 0.45  # the share of cases that pass every check but the body's
FORM = "application/x-www-form-urlencoded"

ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("GET", "/", ()),
    ("POST", "/login", ("token",)),
    ("POST", "/logout", ()),
    ("GET", "/page/asks/events", ()),
    ("POST", "/sessions", ("message",)),
    ("GET", "/sessions/{sid}", ()),
    ("POST", "/sessions/{sid}/messages", ("message",)),
    ("GET", "/sessions/{sid}/events", ()),
    ("GET", "/asks", ()),
    ("GET", "/asks/events", ()),
    ("POST", "/asks/{sid}/{call}/{verdict}", ("note",)),
    ("GET", "/healthz", ()),
    ("GET", "/metrics", ()),
)
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "FOO", "get")
TOKENS = (SESSION_TOKEN, APPROVER_TOKEN, OTHER_APPROVER_TOKEN, "nobody", "")
FAKE_IDS: tuple[str, ...] = ("0" * 32, "x", "%ff%fe", "%2e%2e", "%00", "a" * 3000)
FAKE_IDS += ("%E2%98%83", "{sid}", "-", "%", "%zz", "..", "")
BAD_AUTH: tuple[bytes, ...] = (b"Bearer", b"bearer  ", b"Basic YTpi", b"\xff\xfe")
BAD_AUTH += (b"Bearer \xe9", b"Token " + APPROVER_TOKEN.encode(), b"Bearer a b c")
ORIGINS: tuple[str, ...] = ("null", "http://evil.example", "http://[::1", "", "\xe9")
ORIGINS += ("//x", "http://127.0.0.1:99999", "https://127.0.0.1")
WRONG: tuple[Any, ...] = (
    1,
    -1,
    1.5,
    True,
    None,
    [],
    {},
    ["x"],
    {"message": "x"},
    10**400,
    -(10**40),
)
RAW_JSON = (
    b"1e999",
    b"-1e999",
    b"1" * 5000,
    b"NaN",
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b'"\\u0000"',
    b'"\xff\xfe"',
    b'"\xed\xa0\x80"',
    b'"' + "\U0001f600".encode() + b'"',
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
)
CONTENT_TYPES = (
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "multipart/form-data",
    "text/plain",
    "text/html; charset=\xff",
    ";;;",
    "",
)


@dataclass(frozen=True)
class Case:
    """One generated request, as bytes, and what it was meant to probe."""

    number: int
    method: str
    path: bytes
    raw: bytes
    half_close: bool  # the body is shorter than declared: EOF ends it

    def __str__(self) -> str:
        return f"case {self.number}: {self.raw[:300]!r}"


@dataclass(frozen=True)
class Answer:
    """The first response to a case (``None`` when the server sent none)."""

    status: int | None
    headers: dict[str, str]
    body: bytes


class Ids:
    """The real ids the fuzz aims at: a paused session, an answered one, and
    an approver's page login (its cookie's value; ``""`` if there is none)."""

    def __init__(self, paused: str, answered: str, login: str = "") -> None:
        self.paused = paused
        self.answered = answered
        self.login = login


def generate(number: int, ids: Ids, port: int) -> Case:
    """Case ``number``: the same bytes for the same seed, whatever ran before."""
    rng = random.Random(SEED * 1_000_003 + number)
    method, template, fields = rng.choice(ROUTES)
    if rng.random() < AIMED:
        path, headers = _aimed(rng, template, ids, port)
        body = _body(rng, fields) if method != "GET" else b""
        ctype = FORM if fields == ("token",) else "application/json"
        headers += [(b"content-type", ctype.encode())] if body else []
        head, body, half_close = _honest(headers, body)
    else:
        if rng.random() < 0.2:
            method = rng.choice(METHODS)
        path = _path(rng, template, ids)
        headers = _headers(rng, port, ids)
        body = _body(rng, fields) if method != "GET" or rng.random() < 0.1 else b""
        head, body, half_close = _framing(rng, headers, body)
    request = f"{method} ".encode() + path + b" HTTP/1.1\r\n" + head + b"\r\n" + body
    return Case(number, method, path, request, half_close)


def _aimed(
    rng: random.Random, template: str, ids: Ids, port: int
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """A real route, real ids and the credential it needs: the body is the probe."""
    sid = rng.choice([ids.paused, ids.answered])
    verdict = rng.choice(["approve", "decline"])
    path = template.format(sid=sid, call="c8", verdict=verdict)
    headers = [(b"host", f"127.0.0.1:{port}".encode())]
    if template in ("/login", "/logout"):
        headers.append((b"origin", f"http://127.0.0.1:{port}".encode()))
    elif template.startswith("/sessions"):
        token = SESSION_TOKEN if rng.random() < 0.8 else APPROVER_TOKEN
        headers.append((b"authorization", f"Bearer {token}".encode()))
    elif template.startswith(("/asks", "/page", "/")):
        token = rng.choice([APPROVER_TOKEN, OTHER_APPROVER_TOKEN])
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if ids.login and template != "/logout" and rng.random() < 0.3:
        # The page's way in: the login cookie, with or without the header
        # a cookie-authenticated POST needs.
        headers = [h for h in headers if h[0] != b"authorization"]
        headers.append((b"cookie", f"{COOKIE}={ids.login}".encode()))
        if rng.random() < 0.7:
            headers.append((b"x-requested-with", b"helmlog"))
    return path.encode(), headers


def _honest(
    headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[bytes, bytes, bool]:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))
    head = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head, body, False


def _path(rng: random.Random, template: str, ids: Ids) -> bytes:
    sid = rng.choice((ids.paused, ids.paused, ids.answered, *FAKE_IDS))
    call = rng.choice(["c8", "c8", "c1", "", "%ff", "x" * 500, "c8%00"])
    verdict = rng.choice(["approve", "decline", "Approve", "", "x", "%ff", "approve;"])
    path = template.format(sid=sid, call=call, verdict=verdict)
    roll = rng.random()
    if roll < 0.05:
        path += "/"
    elif roll < 0.1:
        path = path.replace("/", "//", 1)
    elif roll < 0.15:
        path += "/" + rng.choice(["x", "..", "%2f", "events", "messages"])
    elif roll < 0.2:
        path = "/" + "".join(
            rng.choice("abcdefgh/%.-_~!$&'()*+,;=:@0123456789")
            for _ in range(rng.randrange(0, 60))
        )
    elif roll < 0.25:
        path = path.upper()
    if rng.random() < 0.15:
        path += "?" + rng.choice(
            ["a=1", "=", "&&", "%ff=%fe", "x=" + "y" * 2000, "a[]=1&a[]=2", "?"]
        )
    if rng.random() < 0.02:
        return rng.choice([b"*", b"http://127.0.0.1/asks", b"asks", b"/\xff"])
    return path.encode()


def _headers(rng: random.Random, port: int, ids: Ids) -> list[tuple[bytes, bytes]]:
    own = f"http://127.0.0.1:{port}"
    headers: list[tuple[bytes, bytes]] = []
    host = rng.choice(
        [f"127.0.0.1:{port}"] * 6 + ["", "[::1", "x:abc", "a b", "evil.example", "\xff"]
    )
    if rng.random() < 0.97:
        headers.append((b"host", host.encode("latin-1")))
    auth = rng.random()
    if auth < 0.55:
        headers.append((b"authorization", b"Bearer " + rng.choice(TOKENS).encode()))
    elif auth < 0.65:
        headers.append(
            (
                b"authorization",
                rng.choice(BAD_AUTH),
            )
        )
    if rng.random() < 0.15:
        headers.append(
            (
                b"x-forwarded-email",
                rng.choice([b"dana@ops", b"", b" ", b"\xe9ve@ops", b"x" * 3000]),
            )
        )
    if rng.random() < 0.1:
        headers.append((b"x-forwarded-for", rng.choice([b"10.0.0.1", b"x", b"\xff"])))
    if rng.random() < 0.3:
        headers.append(
            (
                b"cookie",
                rng.choice(
                    [
                        f"{COOKIE}={rng.getrandbits(128):032x}".encode(),
                        f"{COOKIE}=".encode(),
                        f"{COOKIE}={APPROVER_TOKEN}".encode(),
                        f"{COOKIE}={ids.login}".encode(),
                        f"{COOKIE}={ids.login}".encode(),
                        b"a=b; ;; =; c",
                        f'{COOKIE}="\\"x'.encode(),
                        b"\xff\xfe=\xfd",
                        f"{COOKIE}=1; {COOKIE}=2".encode(),
                    ]
                ),
            )
        )
    if rng.random() < 0.3:
        headers.append(
            (b"x-requested-with", rng.choice([b"helmlog", b"XMLHttpRequest", b""]))
        )
    for name in (b"origin", b"referer"):
        if rng.random() < 0.3:
            value = rng.choice((own, own + "/", *ORIGINS))
            headers.append((name, value.encode("latin-1")))
    if rng.random() < 0.05:
        headers.append((b"expect", b"100-continue"))
    if rng.random() < 0.05:
        headers.append((b"accept", rng.choice([b"text/event-stream", b"*/*", b"\xff"])))
    if rng.random() < 0.02:
        headers.append((b"connection", b"upgrade"))
        headers.append((b"upgrade", rng.choice([b"websocket", b"h2c", b"x"])))
    return headers


def _body(rng: random.Random, fields: tuple[str, ...]) -> bytes:
    kind = rng.random()
    if kind < 0.25 and fields == ("token",):
        token = rng.choice((*TOKENS, "%ff", "a" * 5000))
        return rng.choice([b"token=", b"token=", b"", b"token"]) + token.encode()
    if kind < 0.25:
        valid = {
            "message": rng.choice(
                ("Refund order 8 for $900", f"Refund order {rng.randrange(99)} for $9")
            )
            if rng.random() < 0.5
            else rng.choice(("hello", "")),
            "note": rng.choice(["ok", "", None]),
        }
        return json.dumps({f: valid[f] for f in fields}).encode()
    if kind < 0.45 and fields:
        wrong: dict[str, Any] = {f: rng.choice(WRONG) for f in fields}
        if rng.random() < 0.3:
            wrong[rng.choice(["by", "extra", "", "message\x00"])] = "x"
        return json.dumps(wrong).encode()
    if kind < 0.6:
        field = rng.choice(fields or ("message",))
        return b'{"' + field.encode() + b'": ' + rng.choice(RAW_JSON) + b"}"
    if kind < 0.7:
        return rng.choice(RAW_JSON)
    if kind < 0.8:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
    if kind < 0.85:
        return b'{"message": "' + b"x" * rng.randrange(MAX_BODY - 64, MAX_BODY * 2)
    if kind < 0.92:
        return rng.choice(
            [b"", b"{", b"{}", b"[]", b"null", b'{"message": "x"', b"\xef\xbb\xbf{}"]
        )
    return '{"message": "caf\xe9"}'.encode("latin-1")


def _framing(
    rng: random.Random, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[bytes, bytes, bool]:
    """Headers and body as sent, with an honest, lying or broken framing."""
    ctype = rng.choice(CONTENT_TYPES)
    if ctype and (body or rng.random() < 0.5):
        headers.append((b"content-type", ctype.encode("latin-1")))
    half_close = False
    roll = rng.random()
    if roll < 0.7:
        if body or rng.random() < 0.5:
            headers.append((b"content-length", str(len(body)).encode()))
    elif roll < 0.76 and body:
        # Declared shorter: the rest reads as a (garbage) next request.
        headers.append((b"content-length", str(rng.randrange(len(body))).encode()))
    elif roll < 0.82:
        headers.append(
            (b"content-length", str(len(body) + rng.randrange(1, 99)).encode())
        )
        half_close = True
    elif roll < 0.86:
        headers.append(
            (
                b"content-length",
                rng.choice([b"abc", b"-1", b"1e3", b"", b" 5", b"0x10"]),
            )
        )
    elif roll < 0.89:
        headers.append((b"content-length", str(len(body)).encode()))
        headers.append((b"content-length", str(len(body) + 1).encode()))
    elif roll < 0.95:
        headers.append((b"transfer-encoding", b"chunked"))
        body = _chunked(rng, body)
    else:
        headers.append(
            (b"transfer-encoding", rng.choice([b"gzip", b"chunked, x", b"x"]))
        )
    rng.shuffle(headers)
    headers.append((b"connection", b"close"))
    head = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head, body, half_close


def _chunked(rng: random.Random, body: bytes) -> bytes:
    if rng.random() < 0.7:
        step = max(1, len(body) // 3)
        parts = [body[i : i + step] for i in range(0, len(body), step)]
        out = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
        return out + b"0\r\n\r\n"
    return rng.choice(
        [b"zz\r\nab\r\n0\r\n\r\n", b"5\r\nab\r\n0\r\n\r\n", b"-1\r\n\r\n"]
    )


def send(case: Case, port: int) -> Answer:
    """Send ``case`` on a fresh connection; read its first final response."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        try:
            sock.sendall(case.raw)
            if case.half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before all was sent
        return _read(sock, case)


def _read(sock: socket.socket, case: Case) -> Answer:
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            chunk = _recv(sock)
            if not chunk:
                if buffer:
                    raise AssertionError(f"a torn response {buffer[:200]!r} to {case}")
                return Answer(None, {}, b"")
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in lines[1:])
        }
        if status >= 200:
            break
    streamed = headers.get("content-type", "").startswith("text/event-stream")
    if case.method == "HEAD" or streamed or status in (204, 304):
        return Answer(status, headers, b"")
    while chunk := _recv(sock):
        buffer += chunk
    if "content-length" in headers:
        buffer = buffer[: int(headers["content-length"])]
    elif headers.get("transfer-encoding") == "chunked":
        buffer = _dechunk(buffer)
    return Answer(status, headers, buffer)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, data = data.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out, data = out + data[:n], data[n + 2 :]
    return out


def fault(case: Case, answer: Answer) -> str | None:
    """What is wrong with ``answer`` to ``case``, or ``None``."""
    if answer.status is None:
        return None if case.half_close else f"no response to {case}"
    if answer.status >= 500:
        return f"{answer.status} {answer.body[:300]!r} to {case}"
    if answer.status < 400 or case.method == "HEAD":
        return None
    ctype = answer.headers.get("content-type", "")
    path = case.path.split(b"?")[0].decode("latin-1")
    if path in PAGES and ctype.startswith("text/html"):
        return None
    if not ctype.startswith("application/problem+json"):
        return f"untyped {answer.status} ({ctype}) {answer.body[:200]!r} to {case}"
    try:
        problem = json.loads(answer.body)
    except ValueError:
        return f"a problem that is not JSON {answer.body[:200]!r} to {case}"
    if not isinstance(problem.get("code"), str) or problem.get("status") != (
        answer.status
    ):
        return f"a problem without its code or status {problem!r} to {case}"
    return None


class Errors(logging.Handler):
    """Every error the server logs while the fuzz runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {self.format(record)}")


@pytest.fixture
def served(redis_url: str) -> Iterator[tuple[Running, Ids, Errors]]:
    """The refund desk served with a small body limit, a paused and an
    answered session in it, and the server's error log watched."""
    errors = Errors()
    watched = [logging.getLogger(n) for n in ("uvicorn.error", "helmlog", "")]
    with running(agents.build, redis_url, max_body_bytes=MAX_BODY) as server:
        for logger in watched:
            logger.addHandler(errors)
        try:
            with client(server.url, SESSION_TOKEN) as c:
                paused = c.post(
                    "/sessions", json={"message": "Refund order 8 for $900"}
                )
                answered = c.post("/sessions", json={"message": "hello"})
            own = {"origin": server.url}
            with httpx2.Client(base_url=server.url, headers=own) as c:
                c.post("/login", data={"token": APPROVER_TOKEN})
                login = c.cookies.get(COOKIE) or ""
            ids = Ids(paused.json()["session_id"], answered.json()["session_id"], login)
            yield server, ids, errors
        finally:
            for logger in watched:
                logger.removeHandler(errors)


def run_cases(server: Running, cases: list[Case]) -> list[str]:
    port = server.server.config.port
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(lambda c: send(c, port), cases))
    return [f for c, a in zip(cases, answers, strict=True) if (f := fault(c, a))]


def test_http_fuzz_no_5xx_and_every_error_is_a_typed_problem(
    served: tuple[Running, Ids, Errors],
) -> None:
    """Issue 24: 3,000 seeded hostile requests, with valid credentials and
    without: none is answered 5xx, every 4xx is a JSON problem with a code
    (the page's HTML aside), the server logs no error, and it still serves."""
    server, ids, errors = served
    port = server.server.config.port
    faults = run_cases(server, [generate(n, ids, port) for n in range(CASES)])
    with client(server.url, APPROVER_TOKEN) as c:
        health = c.get("/healthz")
    assert [] == faults[:10], f"{len(faults)} faults"
    assert [] == errors.records[:5]
    assert 200 == health.status_code


# -- what the fuzz found, one test each ---------------------------------------------


def exchange(server: Running, raw: bytes, *, half_close: bool = False) -> Answer:
    """Send ``raw`` as one request (its method read from it); the answer."""
    method = raw.split(b" ", 1)[0].decode("latin-1")
    case = Case(0, method, raw.split(b" ")[1], raw, half_close)
    return send(case, server.server.config.port)


def assert_problem(answer: Answer, status: int, code: str) -> dict[str, Any]:
    assert status == answer.status, answer
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = json.loads(answer.body)
    assert (code, status) == (problem["code"], problem["status"])
    return problem


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /sessions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"FOO /asks HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /asks HTTP/1.1\r\nHost: a b\r\nTransfer-Encoding: chunked, x\r\n\r\n",
        b"POST /sessions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n",
    ],
    ids=["length-not-a-number", "two-lengths", "no-such-method", "bad-te", "bad-chunk"],
)
def test_a_request_the_parser_refuses_is_a_400_problem(
    served: tuple[Running, Ids, Errors], raw: bytes
) -> None:
    """Issue 24 (fuzz): a request uvicorn's parser refuses was answered in
    plain text ("Invalid HTTP request received."); it is a 400 problem."""
    server, _, _ = served
    assert_problem(exchange(server, raw), 400, "ERR_BAD_REQUEST")


def test_a_client_that_leaves_before_its_body_is_not_a_server_error(
    served: tuple[Running, Ids, Errors],
) -> None:
    """Issue 24 (fuzz): a body shorter than its Content-Length, then EOF,
    raised ClientDisconnect out of the route (logged as an ASGI exception, a
    500 no one heard); it is a counted 400 and the server logs no error."""
    server, _, errors = served
    raw = (
        b"POST /sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + SESSION_TOKEN.encode()
        + b'\r\nContent-Length: 99\r\n\r\n{"message": "hi'
    )
    assert None is exchange(server, raw, half_close=True).status

    def counted() -> bool:
        with client(server.url) as c:
            text = c.get("/metrics").text
        return 'method="POST",route="/sessions",status="400"' in text

    until_sync("the 400 counted in /metrics", counted, 10)
    assert [] == errors.records
