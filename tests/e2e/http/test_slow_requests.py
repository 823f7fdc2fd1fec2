"""Slow requests: a late request head is closed (issue 24 item 3, H3).

Pattern: a real ``helmlog serve`` (uvicorn on a free loopback port, real
         Redis) with a 1 s header timeout, and raw sockets that open and
         send part of a request head, or nothing, and then wait.
Role:    e2e tests of ``gateway/http/_protocol.py``.
Emits:   nothing.

Laws: H3 (a connection whose request head is not in within
``header_timeout_s`` of opening, or of its request's first byte, is closed;
one whose head had begun is told 408 ``ERR_REQUEST_TIMEOUT`` first; bytes
that dribble in do not extend the deadline; a request whose head is in is
not cut by it).
"""

from __future__ import annotations

import json
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.polling import until_sync

from . import agents
from .server import APPROVER_TOKEN, SESSION_TOKEN, client, running

pytestmark = pytest.mark.redis

SLOW = 1_500
TIMEOUT_S = 1.0
PARTIAL_HEADS = (
    b"",  # opens and says nothing
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    b"POST /sessions HTTP/1.1\r\nHost: x\r\nContent-Len",
    b"GE",
)


@contextmanager
def enough_descriptors(needed: int) -> Iterator[None]:
    """Raise the soft fd limit to ``needed`` (within the hard limit) for a block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the fd hard limit ({hard}) is below {needed}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_slow(url: str, head: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    if head:
        sock.sendall(head)
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket, got: bytearray) -> bool:
    """Read what has arrived; whether the server has closed the connection."""
    while True:
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True
        if not chunk:
            return True
        got += chunk


def closed_by_server(socks: list[socket.socket], within: float) -> list[bytes]:
    """Poll until the server closed every socket; what each was sent."""
    got = [bytearray() for _ in socks]
    open_ = set(range(len(socks)))

    def all_closed() -> bool:
        open_.difference_update({i for i in open_ if drain(socks[i], got[i])})
        return not open_

    until_sync(f"the server closes all {len(socks)} sockets", all_closed, within)
    return [bytes(g) for g in got]


def assert_timed_out(sent: bytes) -> None:
    head, _, body = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), sent
    assert b"content-type: application/problem+json" in head.lower()
    problem = json.loads(body)
    assert ("ERR_REQUEST_TIMEOUT", 408) == (problem["code"], problem["status"])


def test_h3_1500_slow_incomplete_requests_are_closed_within_the_timeout(
    redis_url: str,
) -> None:
    """H3: 1,500 connections that never finish their request head (past the
    1,000 connections served) are all closed by the server after the header
    timeout, those that began with a 408 problem; the server serves again."""
    with (
        enough_descriptors(2 * SLOW + 512),
        running(agents.build, redis_url, header_timeout_s=TIMEOUT_S) as server,
    ):
        heads = [PARTIAL_HEADS[i % len(PARTIAL_HEADS)] for i in range(SLOW)]
        socks = [open_slow(server.url, head) for head in heads]
        try:
            with client(server.url) as c:
                meanwhile = c.get("/healthz").status_code
            sent = closed_by_server(socks, within=30)
        finally:
            for sock in socks:
                sock.close()
        with client(server.url) as c:
            after = c.get("/healthz")
    # While 1,500 were open the ceiling (1,000) answered at once, or served.
    assert meanwhile in (200, 503)
    assert 200 == after.status_code, after.text
    for head, reply in zip(heads, sent, strict=True):
        if head:
            assert_timed_out(reply)
        else:
            assert b"" == reply


def test_h3_a_dribbled_head_does_not_extend_its_deadline(redis_url: str) -> None:
    """H3: a byte every 50 ms does not keep a connection open: it is closed
    at the header timeout, long before its head would have been complete."""
    head = b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 400 + b"\r\n\r\n"
    with running(agents.build, redis_url, header_timeout_s=TIMEOUT_S) as server:
        sock = open_slow(server.url, b"")
        got = bytearray()
        sent = 0
        try:
            while sent < len(head) and not drain(sock, got):
                try:
                    sock.send(head[sent : sent + 1])
                except OSError:
                    break
                sent += 1
                time.sleep(0.05)  # not a wait: the head dribbles in, a byte a tick
            until_sync("the server closes", lambda: drain(sock, got), 10)
        finally:
            sock.close()
    assert sent < len(head) // 2, f"closed only after {sent} bytes"
    assert_timed_out(bytes(got))


def test_h3_the_next_request_on_a_kept_alive_connection_has_its_own_deadline(
    redis_url: str,
) -> None:
    """H3: after a response, a connection that begins its next request and
    stalls is closed at the header timeout (not held by keep-alive)."""
    with running(agents.build, redis_url, header_timeout_s=TIMEOUT_S) as server:
        sock = open_slow(server.url, b"")
        got = bytearray()
        try:
            sock.setblocking(True)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            while b'"status":"ok"' not in got:
                got += sock.recv(65536)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            sock.setblocking(False)
            first = bytes(got)
            got.clear()
            sent = closed_by_server([sock], within=30)[0]
        finally:
            sock.close()
    assert first.startswith(b"HTTP/1.1 200 ")
    assert_timed_out(sent)


def test_h3_a_request_whose_head_is_in_outlives_the_header_timeout(
    redis_url: str,
) -> None:
    """H3: the deadline is the head's: an event stream open for three header
    timeouts still delivers (the timer stops once the head is parsed)."""
    lists: list[list[str]] = []
    with (
        running(agents.build, redis_url, header_timeout_s=0.3) as server,
        client(server.url, APPROVER_TOKEN) as c,
        c.stream("GET", "/asks/events") as stream,
    ):
        for line in stream.iter_lines():
            if not line.startswith("data: "):
                continue
            lists.append([a["tool_call_id"] for a in json.loads(line[6:])])
            if len(lists) > 1:
                break
            time.sleep(0.9)  # three header timeouts, on an open stream
            with client(server.url, SESSION_TOKEN) as s:
                started = s.post(
                    "/sessions", json={"message": "Refund order 8 for $900"}
                )
            assert 201 == started.status_code, started.text
    assert [[], ["c8"]] == lists


def test_h3_past_the_connection_ceiling_the_answer_is_a_retryable_problem(
    redis_url: str,
) -> None:
    """H3: past ``max_connections`` the answer is at once a 503 problem
    (``ERR_BUSY``, retryable, Retry-After), not uvicorn's plain text; once
    the held connections close, the server serves again."""
    with running(agents.build, redis_url, max_connections=5) as server:
        held = [open_slow(server.url, b"GET /healthz HTTP/1.1\r\n") for _ in range(6)]
        try:
            busy = open_slow(server.url, b"")
            busy.setblocking(True)
            busy.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            sent = bytearray()
            while chunk := busy.recv(65536):
                sent += chunk
            busy.close()
        finally:
            for sock in held:
                sock.close()

        def served() -> bool:
            with client(server.url) as c:
                return c.get("/healthz").status_code == 200

        until_sync("the server serves again", served, 10)
    head, _, body = bytes(sent).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), sent
    assert b"retry-after: 1" in head.lower()
    problem = json.loads(body)
    assert ("ERR_BUSY", True) == (problem["code"], problem["retryable"])
