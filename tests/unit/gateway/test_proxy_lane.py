"""The serving lane answers a plain ``tools/call`` exactly as the SDK's dispatcher.

Pattern: the same raw JSON-RPC lines sent twice to a proxy subprocess on real
         stdio pipes (``proxy_lane_server``), serving lane on and off, in
         both protocol eras (the ``initialize`` handshake, and 2026-07-28
         requests carrying their envelope), with and without a governance
         rule; answers and audit rows compared whole.
Role:    the differential tests of ``gateway/fast/lane.py`` against the SDK
         path (``gateway/fast``'s docstring names them).
Emits:   nothing.

Laws: P25 (plain, tool error, hidden, refused and rewritten by a rule,
structured, unknown tool, bad params, cancelled: the same answers), P20 (the
same audit rows), P14 (the rule runs on the lane).

Why raw lines: the SDK client would parse both answers into one model and
hide a difference.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)
from mcp_types.version import LATEST_MODERN_VERSION

ROOT = Path(__file__).resolve().parents[3]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ENVELOPE = {
    PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
    CLIENT_CAPABILITIES_META_KEY: {},
    CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
}
DISCOVER = {"jsonrpc": "2.0", "id": 0, "method": "server/discover"}
CASES: list[dict[str, Any]] = [
    {"name": "echo", "arguments": {"word": "hi"}},  # plain
    {"name": "explode", "arguments": {}},  # a tool error
    {"name": "record", "arguments": {"name": "ann"}},  # structured (masked by the rule)
    {"name": "forbidden", "arguments": {}},  # refused by the rule
    {"name": "hidden", "arguments": {}},  # hidden (P8)
    {"name": "nosuch", "arguments": {}},  # unknown upstream
    {"name": 5},  # bad params
    {"name": "echo", "arguments": [1]},  # bad params
    {"name": "echo", "arguments": {"word": "meta"}, "_meta": {"x": {"y": 1}}},
]
LANE_TAKES = len(CASES)  # every case above is a plain call the lane claims


def _enveloped(params: dict[str, Any]) -> dict[str, Any]:
    meta = {**params.get("_meta", {}), **ENVELOPE}
    return {**params, "_meta": meta}


def _calls(modern: bool, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n, params in enumerate(cases, 1):
        sent = _enveloped(params) if modern else params
        out.append({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": sent})
    return out


def _opening(modern: bool) -> list[dict[str, Any]]:
    if modern:
        return [{**DISCOVER, "params": {"_meta": ENVELOPE}}]
    return [INITIALIZE, INITIALIZED]


async def _served(
    *flags: str,
    tmp: Path,
    modern: bool,
    sent: list[dict[str, Any]],
    expected: int,
) -> tuple[dict[Any, Any], dict[str, Any]]:
    """The answers to ``sent`` from a proxy subprocess, and what it wrote at
    exit (the lane's count and the audit rows)."""
    out = tmp / f"out{'-'.join(flags)}{'-modern' if modern else ''}.json"
    command = [sys.executable, "-m", "tests.unit.gateway.proxy_lane_server"]
    command += [*flags, "--out", str(out)]
    answers: dict[Any, Any] = {}
    opening = _opening(modern)
    async with await anyio.open_process(command, cwd=ROOT) as process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(json.dumps(opening[0]).encode() + b"\n")
        rest = [*opening[1:], *sent]
        pending = b""
        with anyio.fail_after(60):
            while len(answers) < expected + 1:
                pending += await process.stdout.receive()
                *done, pending = pending.split(b"\n")
                for line in done:
                    body = json.loads(line)
                    if "id" not in body:
                        continue  # a notification (none is expected)
                    answers[body["id"]] = body
                    if body["id"] == 0:
                        lines = b"".join(json.dumps(x).encode() + b"\n" for x in rest)
                        await process.stdin.send(lines)
            await process.stdin.aclose()
            await process.wait()
    del answers[0]
    return _unnamed(answers), _unnamed(json.loads(out.read_text()))


def _unnamed(value: Any) -> Any:
    """``value`` with each withheld error's id (fresh per error, H4) blanked."""
    text = json.dumps(value, sort_keys=True)
    return json.loads(re.sub(r"\b[0-9a-f]{32}\b", "<error id>", text))


@pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026-07-28"])
@pytest.mark.parametrize("rule", [False, True], ids=["no-rule", "one-rule"])
async def test_p25_p20_the_lane_answers_and_audits_as_the_sdk_dispatcher(
    tmp_path: Path, modern: bool, rule: bool
) -> None:
    """P25, P20, P14: every case answers the same JSON and leaves the same
    audit rows, lane or not, and on the lane with its own run of the kernel's
    steps (no tracer provider: the default) or the SDK's kernel itself
    (issue 26); the lane took every plain call."""
    flags = ("--rule",) if rule else ()
    sent = _calls(modern, CASES)
    lane, lane_out = await _served(
        *flags, tmp=tmp_path, modern=modern, sent=sent, expected=len(CASES)
    )
    kernel, kernel_out = await _served(
        *flags, "--kernel", tmp=tmp_path, modern=modern, sent=sent, expected=len(CASES)
    )
    sdk, sdk_out = await _served(
        *flags, "--no-lane", tmp=tmp_path, modern=modern, sent=sent, expected=len(CASES)
    )
    assert sdk == lane == kernel
    assert sdk_out["rows"] == lane_out["rows"] == kernel_out["rows"]
    assert (LANE_TAKES, 0) == (lane_out["answered"], sdk_out["answered"])
    assert LANE_TAKES == kernel_out["answered"]
    assert "HI" == lane["1"]["result"]["content"][0]["text"]
    assert lane["2"]["result"]["isError"]
    structured = lane["3"]["result"]["structuredContent"]
    assert ("***-**-****" if rule else "123-45-6789") == structured["ssn"]
    assert {"rejection_reason": "TOOL_HIDDEN"} == lane["5"]["error"]["data"]
    assert -32602 == lane["7"]["error"]["code"] == lane["8"]["error"]["code"]
    if rule:
        assert "error" in lane["4"] or lane["4"]["result"]["isError"]
    else:
        assert "ran" == lane["4"]["result"]["content"][0]["text"]
    if modern:
        assert "complete" == lane["1"]["result"]["resultType"]
    assert lane_out["rows"]  # audited (P20)


@pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026-07-28"])
async def test_p25_with_a_tracer_provider_the_lanes_calls_carry_the_sdks_span(
    tmp_path: Path, modern: bool
) -> None:
    """P25 (issue 26): in a process with a tracer provider set, the lane runs
    the SDK's kernel, so each call it answers records the SDK's server span:
    the same spans (names, kinds, attributes) as with the lane off, where a
    kernel-free lane would leave the proxy's out; answers and rows alike."""
    cases = CASES[:3]
    sent = _calls(modern, cases)
    lane, lane_out = await _served(
        "--traced", tmp=tmp_path, modern=modern, sent=sent, expected=len(cases)
    )
    sdk, sdk_out = await _served(
        "--traced",
        "--no-lane",
        tmp=tmp_path,
        modern=modern,
        sent=sent,
        expected=len(cases),
    )
    assert sdk == lane
    assert sdk_out["rows"] == lane_out["rows"]
    assert len(cases) == lane_out["answered"]
    assert sdk_out["spans"] == lane_out["spans"]
    called = [s for s in lane_out["spans"] if s[0].startswith("tools/call ")]
    # each call's span twice: the proxy's and its in-process upstream's
    names = ["tools/call echo", "tools/call explode", "tools/call record"]
    assert sorted(names * 2) == [s[0] for s in called]
    assert all('"execute_tool"' in s[2] for s in called)


@pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026-07-28"])
async def test_p25_a_cancelled_lane_call_is_never_answered_as_on_the_sdk_path(
    tmp_path: Path, modern: bool
) -> None:
    """P25: a cancel line right behind its call cancels it on both paths: the
    cancelled call is never answered, the next one is, the audit rows agree."""
    cases = [
        {"name": "sleepy", "arguments": {"seconds": 30}},
        {"name": "echo", "arguments": {"word": "after"}},
    ]
    call, after = _calls(modern, cases)
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "enough"},
    }
    sent = [call, cancel, after]
    lane, lane_out = await _served(tmp=tmp_path, modern=modern, sent=sent, expected=1)
    sdk, sdk_out = await _served(
        "--no-lane", tmp=tmp_path, modern=modern, sent=sent, expected=1
    )
    assert (["2"], ["2"]) == (list(lane), list(sdk))
    assert sdk == lane
    assert sdk_out["rows"] == lane_out["rows"]
    assert 2 == lane_out["answered"]
    assert "AFTER" == lane["2"]["result"]["content"][0]["text"]


async def test_p25_a_progress_token_or_a_bad_envelope_takes_the_sdk_path(
    tmp_path: Path,
) -> None:
    """P25: the lane claims no call asking for progress and no 2026 request
    whose envelope the SDK's ladder refuses; the SDK answers those."""
    progress = {"name": "echo", "arguments": {"word": "p"}, "_meta": {}}
    progress["_meta"] = {"progressToken": "t1"}
    bad = {
        "name": "echo",
        "arguments": {"word": "b"},
        "_meta": {PROTOCOL_VERSION_META_KEY: "1999-01-01"},
    }
    sent = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": progress},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": bad},
    ]
    lane, lane_out = await _served(tmp=tmp_path, modern=False, sent=sent, expected=2)
    sdk, _ = await _served(
        "--no-lane", tmp=tmp_path, modern=False, sent=sent, expected=2
    )
    assert sdk == lane
    assert 0 == lane_out["answered"]
    assert "P" == lane["1"]["result"]["content"][0]["text"]
