"""H6: a seeded fuzz of the proxy's HTTP transport against a live session.

Pattern: one proxy on uvicorn, one raw HTTP client; a seeded generator sends
         a few thousand requests with mutated bodies, methods, content types,
         Accept headers, session ids, protocol versions, Host/Origin headers
         and chunked bodies; a session a fuzzed DELETE ends is replaced.
Role:    unit test for ``gateway/proxy/_http.py`` (and the SDK transports).
Emits:   nothing.

Laws: H6 (no 5xx; every error answer is a well-formed JSON-RPC error).

Why its own upstream: the shared test server has tools that sleep, wait on
a gate or end the process; a fuzzed call may name any of them.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
from mcp.server.mcpserver import MCPServer

from helmlog.gateway import McpProxy

from .http_helpers import HEADERS, INITIALIZE, answer_of

SEED = 24
CASES = 2_500
FUZZ = MCPServer("fuzz")


@FUZZ.tool()
def echo(word: str) -> str:
    """Echo a word in capitals."""
    return word.upper()


@FUZZ.tool()
def fail() -> str:
    """Always raises."""
    raise RuntimeError("boom")


@FUZZ.resource("data://public")
def public() -> str:
    """A readable resource."""
    return "public data"


TEMPLATES: list[Any] = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
     "params": {"name": "echo", "arguments": {"word": "a"}}},
    {"jsonrpc": "2.0", "id": "s", "method": "tools/call",
     "params": {"name": "fail", "arguments": {}, "_meta": {"progressToken": 3}}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "resources/read",
     "params": {"uri": "data://public"}},
    {"jsonrpc": "2.0", "id": 4, "method": "ping"},
    {"jsonrpc": "2.0", "id": 5, "method": "prompts/list", "params": {}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "method": "notifications/cancelled",
     "params": {"requestId": 1}},
    {"jsonrpc": "2.0", "id": 6, "result": {}},
    {"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "x"}},
    INITIALIZE,
]  # fmt: skip
ACCEPTS = [
    HEADERS["accept"],
    HEADERS["accept"],
    "application/json",
    "text/event-stream",
    "*/*",
    "",
    "application/json;q=0.5, text/event-stream;q=0.1",
    "text/html",
]
CONTENT_TYPES = [
    "application/json",
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "",
    "application/x-www-form-urlencoded",
    "application/json, text/plain",
    "multipart/form-data; boundary=x",
]
METHODS = ["POST"] * 14 + ["GET", "GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]
VERSIONS = ["2025-06-18", "2025-06-18", "2025-03-26", None, "1999-01-01", "x"]
WEIRD = ["", "\u0000", "\ud800", "é", "🙂", "\\", '"', "null", "9" * 40, "-0"]


def _json(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value."""
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**63, 1.5, -1e308, rng.randrange(-(10**6), 10**6)])
    if kind in (2, 3):
        return rng.choice(WEIRD) + "".join(
            chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(6))
        )
    if kind == 4:
        return rng.choice(["jsonrpc", "2.0", "tools/call", "id", "method"])
    if kind == 5:
        return [_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["jsonrpc", "id", "method", "params", "result", "error", "name", "x"]
    return {rng.choice(keys): _json(rng, depth + 1) for _ in range(rng.randrange(5))}


def _mutated(rng: random.Random, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, cut, inserted or duplicated."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(4)
        at = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 1:
            del out[at:]
        elif op == 2:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
        else:
            out[at:at] = out[at : at + rng.randrange(1, 8)]
    return bytes(out)


def _body(rng: random.Random) -> bytes:
    """One fuzzed request body."""
    kind = rng.randrange(10)
    template = json.dumps(rng.choice(TEMPLATES)).encode()
    if kind in (0, 1):
        return template
    if kind in (2, 3, 4):
        return _mutated(rng, template)
    if kind == 5:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    if kind == 6:
        return json.dumps(_json(rng)).encode()
    if kind == 7:
        message = dict(rng.choice(TEMPLATES))
        message[rng.choice(["id", "method", "params", "jsonrpc"])] = _json(rng)
        return json.dumps(message).encode()
    if kind == 8:
        depth = rng.choice([10, 600, 2_000, 20_000])
        return (b"[" * depth) + (b"]" * depth)
    values = [rng.choice(TEMPLATES) for _ in range(rng.randrange(3))]
    return json.dumps(values).encode()


async def _chunked(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 7):
        yield data[i : i + 7]


def _problem(response: httpx.Response, method: str, text: bytes) -> str | None:
    """What is wrong with an answer, or ``None`` (H6)."""
    status = response.status_code
    if status >= 500:
        return f"status {status}"
    if status < 400 or method == "HEAD":
        return None
    try:
        answer = json.loads(text)
    except ValueError:
        return f"status {status} with a body that is not JSON: {text[:80]!r}"
    error = answer.get("error") if isinstance(answer, dict) else None
    rid = answer.get("id", "missing") if isinstance(answer, dict) else "missing"
    well_formed = (
        answer.get("jsonrpc") == "2.0"
        and (rid is None or isinstance(rid, (str, int)))
        and isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
    )
    return None if well_formed else f"status {status}, untyped: {text[:120]!r}"


async def _open(http: httpx.AsyncClient, url: str) -> str:
    init = await http.post(url, json=INITIALIZE, headers=HEADERS)
    sid = init.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    head = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
    await http.post(url, json=note, headers=head)
    return sid


def _headers(rng: random.Random, sid: str) -> dict[str, str]:
    if rng.random() < 0.5:  # the body is what is fuzzed
        return {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
    head: dict[str, str] = {}
    accept = rng.choice(ACCEPTS)
    if accept:
        head["accept"] = accept
    content_type = rng.choice(CONTENT_TYPES)
    if content_type:
        head["content-type"] = content_type
    roll = rng.random()
    if roll < 0.85:
        head["mcp-session-id"] = sid
    elif roll < 0.92:
        head["mcp-session-id"] = f"{rng.getrandbits(128):032x}"
    elif roll < 0.95:
        head["mcp-session-id"] = rng.choice(["", "x", sid + "0", sid.upper()])
    version = rng.choice(VERSIONS)
    if version is not None:
        head["mcp-protocol-version"] = version
    if rng.random() < 0.03:
        head["last-event-id"] = rng.choice(["", "1", f"{rng.getrandbits(128):032x}"])
    if rng.random() < 0.02:
        head["origin"] = rng.choice(
            ["http://evil.example", "http://localhost:1", "null"]
        )
    if rng.random() < 0.01:
        head["host"] = rng.choice(["evil.example", "localhost:9"])
    return head


async def test_h6_fuzzed_requests_to_a_live_session_get_no_5xx_and_typed_errors() -> (
    None
):
    """H6: a few thousand seeded random/mutated requests: 0 answers >= 500,
    0 error answers that are not well-formed JSON-RPC errors."""
    rng = random.Random(SEED)
    problems: list[str] = []
    statuses: dict[int, int] = {}
    proxy = McpProxy(FUZZ, max_body_bytes=64 * 1024)
    timeout = httpx.Timeout(30, read=30)
    async with (
        proxy,
        proxy.http_server() as url,
        httpx.AsyncClient(timeout=timeout) as http,
    ):
        sid = await _open(http, url)
        for case in range(CASES):
            method = rng.choice(METHODS)
            head = _headers(rng, sid)
            body = _body(rng) if method in ("POST", "PUT", "PATCH") else b""
            if rng.random() < 0.01:
                body = b" " * (64 * 1024 + 1)
            content: Any = _chunked(body) if body and rng.random() < 0.05 else body
            request = http.build_request(method, url, content=content, headers=head)
            response = await http.send(request, stream=True)
            try:
                sse = response.headers.get("content-type", "").startswith(
                    "text/event-stream"
                )
                # A GET's event stream stays open: its status is the answer.
                text = b"" if sse and method == "GET" else await response.aread()
            finally:
                await response.aclose()
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            problem = _problem(response, method, text)
            if problem is not None:
                problems.append(
                    f"case {case}: {method} {head} {body[:60]!r}: {problem}"
                )
            if method == "DELETE" and response.status_code == 200:
                sid = await _open(http, url)  # the fuzz ended it: a new one
        # The proxy still serves after all of it.
        head = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        call = {"name": "echo", "arguments": {"word": "ok"}}
        last = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": call},
            headers=head,
        )
    assert [] == problems[:20], statuses
    assert "OK" == answer_of(last)["result"]["content"][0]["text"]
    assert sum(statuses.values()) == CASES
    assert any(400 <= s < 500 for s in statuses)
