"""The fast paths' cheaper checks decide exactly as the SDK's checks they stand for.

Pattern: table tests: each input decided by the fast path's check and by
         the SDK's own (or the proxy's full) check, outcomes and error texts
         compared.
Role:    differential tests of ``gateway.fast.upstream.check_result`` (the
         SDK's ``validate_server_result`` without its dropped dump) and of the
         HTTP app taking the lane's envelope check for ``_not_a_message``;
         the proxy's ids against ``uuid``'s.
Emits:   nothing.

Laws: P25 (an upstream result is allowed or refused as the SDK's client
does, with the same error), H6 (a message the lane takes is one JSON-RPC
request: the 400 ``_not_a_message`` answers never applies to it), P7 (the
request ids' form); issue 26.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from mcp_types import methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

from helmlog.gateway.fast import HttpLane
from helmlog.gateway.fast.upstream import check_result
from helmlog.gateway.proxy._http import _headers, _not_a_message
from helmlog.gateway.proxy._layers import uuid4_hex, uuid4_text

RESULTS: list[Any] = [
    {"content": [{"type": "text", "text": "x"}]},
    {"content": [{"type": "text", "text": "x"}], "isError": True},
    {"content": [], "structuredContent": {"a": 1}, "_meta": {"k": "v"}},
    {"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]},
    {"content": [], "resultType": "complete"},
    {"content": "x"},
    {"content": [{"type": "text"}]},
    {},
    {"content": [], "isError": "maybe"},
    {"content": [], "structuredContent": [1]},
]


def _outcome(check: Any) -> tuple[str, str]:
    try:
        check()
    except Exception as exc:  # noqa: BLE001 — the outcome is what is compared
        return type(exc).__name__, str(exc)
    return "ok", ""


@pytest.mark.parametrize("version", [*sorted(KNOWN_PROTOCOL_VERSIONS), "1999-01-01"])
def test_p25_check_result_allows_and_refuses_as_the_sdks_validator(
    version: str,
) -> None:
    """P25: every result, in every known version (and an unknown one), is
    allowed or refused as ``validate_server_result`` decides, with its error."""
    for result in RESULTS:
        fast = _outcome(lambda r=result: check_result(version, r))
        sdk = _outcome(
            lambda r=result: methods.validate_server_result("tools/call", version, r)
        )
        assert sdk == fast, result


ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _nested(depth: int) -> Any:
    value: Any = "end"
    for _ in range(depth):
        value = {"x": [value]}
    return value


def _message(rid: Any, arguments: Any = None, **params: Any) -> dict[str, Any]:
    body = {"name": "echo", "_meta": dict(ENVELOPE), **params}
    if arguments is not None:
        body["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": body}


MESSAGES: list[Any] = [
    _message(1, {"word": "hi"}),
    _message(2**70, {"word": "big id"}),
    _message(-3),
    _message("é-id", {"ü": ["\u0000", None, 1.5, True]}),
    _message(4, _nested(200)),
    _message(5, {"a": 1}, extra="kept"),
    {**_message(6), "extra": 1},
    {**_message(7), "id": True},
    {**_message(8), "id": 1.5},
    {**_message(9), "id": None},
    {**_message(10), "jsonrpc": "1.0"},
    {**_message(11), "params": [1]},
    {"jsonrpc": "2.0", "method": "tools/call", "params": {}},
    [_message(12)],
]
HEADERS = [
    (b"host", b"127.0.0.1"),
    (b"accept", b"application/json, text/event-stream"),
    (b"content-type", b"application/json"),
    (b"mcp-protocol-version", b"2026-07-28"),
    (b"mcp-method", b"tools/call"),
    (b"mcp-name", b"echo"),
]


def test_h6_a_message_the_http_lane_takes_is_one_json_rpc_request() -> None:
    """H6, P25: the app skips ``_not_a_message`` for a message the lane
    takes; for every message here the lane takes, that check passes, and the
    lane takes the plain calls among them."""
    lane = HttpLane()
    scope = {"method": "POST", "headers": HEADERS}
    head = _headers(HEADERS)
    taken = [m for m in MESSAGES if lane.route(m, scope, head) is not None]
    assert [None] * len(taken) == [_not_a_message(m) for m in taken]
    assert [1, 2**70, -3, "é-id", 4, 5] == [m["id"] for m in taken]
    refused = [*MESSAGES[7:12], MESSAGES[13]]  # bad ids, version, params, batch
    assert all(_not_a_message(m) is not None for m in refused)


def test_p7_a_requests_ids_are_random_version_4_uuids_in_uuids_forms() -> None:
    """P7 (a fresh UUID per request), P17: the proxy's cheaper ids are
    ``str(uuid.uuid4())`` and ``uuid.uuid4().hex`` in form: version 4, the
    RFC 4122 variant, the same text, never repeated."""
    texts = [uuid4_text() for _ in range(2000)]
    hexes = [uuid4_hex() for _ in range(2000)]
    assert all(str(uuid.UUID(t)) == t for t in texts)
    assert all(uuid.UUID(h).hex == h for h in hexes)
    parsed = [uuid.UUID(x) for x in texts + hexes]
    assert {(4, uuid.RFC_4122)} == {(u.version, u.variant) for u in parsed}
    assert len(set(parsed)) == len(parsed)
