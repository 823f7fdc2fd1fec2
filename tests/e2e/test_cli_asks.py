"""Pending questions from the command line, on a real Redis (R18).

``helmlog asks`` lists the pauses waiting on a person, from the store's
pending-asks index (no scan of every stream); ``helmlog approve``
and ``decline`` resolve one as ``check_in_approved``/``check_in_declined``
would, with the agent that paused (``--agent module:function``), and the run
goes on; the ledger names the person.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from helmlog import cli as cli_module
from helmlog import is_ask_pause
from helmlog.cli import app
from helmlog.events import fold, open_event_store
from tests.integration.runtime.refund_agent import build

pytestmark = pytest.mark.redis

runner = CliRunner()
AGENT = "tests.integration.runtime.refund_agent:resumer"


async def _paused_session(url: str) -> str:
    store = open_event_store(url)
    try:
        out = await build(store).run("Refund order 7 for $900")
        assert is_ask_pause(out)
        return out.checkpoint.session_id
    finally:
        await store.close()


async def _rows(url: str, sid: str) -> list[tuple[str, str, str | None]]:
    store = open_event_store(url)
    try:
        state = fold(r.decode() for r in await store.read(sid))
    finally:
        await store.close()
    return [(r.middleware, r.outcome, r.why) for r in state.middleware_decisions]


def test_r18_asks_lists_pending_pauses(redis_url: str) -> None:
    """``asks`` lists session, kind, tool, call id, who asks and the question."""
    sid = asyncio.run(_paused_session(redis_url))
    result = runner.invoke(app, ["asks", "--store", redis_url, "--json"])
    assert 0 == result.exit_code, result.output
    assert [
        {
            "session_id": sid,
            "kind": "ask",
            "tool_name": "refund",
            "tool_call_id": "c1",
            "middleware": "four-eyes",
            "question": "Refund over $500?",
        }
    ] == json.loads(result.stdout)


def test_r18_approve_resumes_as_the_named_person(redis_url: str) -> None:
    """``approve`` files ``approved by <by>: <note>``; the tool runs; it answers."""
    sid = asyncio.run(_paused_session(redis_url))
    result = runner.invoke(
        app,
        ["approve", sid, "--by", "dana@ops", "--note", "verified", "--store", redis_url,
         "--agent", AGENT],
    )  # fmt: skip
    assert 0 == result.exit_code, result.output
    assert "Refunded order 7." == result.stdout.strip()
    assert [
        ("four-eyes", "ask", "Refund over $500?"),
        ("four-eyes", "allow", "approved by dana@ops: verified"),
    ] == asyncio.run(_rows(redis_url, sid))
    listed = runner.invoke(app, ["asks", "--store", redis_url, "--json"])
    assert [] == json.loads(listed.stdout)


def test_r18_decline_refuses_the_call_and_approve_twice_fails(redis_url: str) -> None:
    """``decline`` files ``declined by <by>``; then nothing is pending."""
    sid = asyncio.run(_paused_session(redis_url))
    result = runner.invoke(
        app, ["decline", sid, "--by", "eve@ops", "--store", redis_url, "--agent", AGENT]
    )
    assert 0 == result.exit_code, result.output
    assert ("four-eyes", "deny", "declined by eve@ops") == asyncio.run(
        _rows(redis_url, sid)
    )[1]
    again = runner.invoke(
        app,
        ["approve", sid, "--by", "dana@ops", "--store", redis_url, "--agent", AGENT],
    )
    assert 1 == again.exit_code
    assert "no pending question" in " ".join(again.output.split())


def test_r18_approve_names_a_bad_agent_path(redis_url: str) -> None:
    """A wrong ``--agent`` is a clear error, not a traceback."""
    result = runner.invoke(
        app, ["approve", "x", "--by", "d", "--store", redis_url, "--agent", "nope"]
    )
    assert 1 == result.exit_code
    assert "module:function" in " ".join(result.output.split())


def test_r18_asks_reads_the_pending_asks_index_not_every_stream(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R18: ``asks`` answers from the index; it neither lists nor reads streams."""
    sid = asyncio.run(_paused_session(redis_url))
    scanned: list[str] = []

    def no_scan(url: str) -> Any:
        store = open_event_store(url)

        async def sessions() -> list[str]:
            scanned.append("sessions")
            return []

        async def read(session_id: str, after_seq: int = 0) -> list[Any]:
            scanned.append(f"read {session_id}")
            return []

        store.sessions = sessions  # type: ignore[method-assign]
        store.read = read  # type: ignore[method-assign]
        return store

    monkeypatch.setattr(cli_module, "open_event_store", no_scan)
    result = runner.invoke(app, ["asks", "--store", redis_url, "--json"])
    assert 0 == result.exit_code, result.output
    assert [sid] == [q["session_id"] for q in json.loads(result.stdout)]
    assert [] == scanned
