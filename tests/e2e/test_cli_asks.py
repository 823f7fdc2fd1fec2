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

from helmlog import is_ask_pause
from helmlog._commands import _app as commands_app
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
        ["approve", sid, "--note", "verified", "--store", redis_url, "--agent", AGENT],
        env={"HELMLOG_APPROVER": "dana@ops"},
    )
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
        app,
        ["decline", sid, "--store", redis_url, "--agent", AGENT],
        env={"HELMLOG_APPROVER": "eve@ops"},
    )
    assert 0 == result.exit_code, result.output
    assert ("four-eyes", "deny", "declined by eve@ops") == asyncio.run(
        _rows(redis_url, sid)
    )[1]
    again = runner.invoke(
        app,
        ["approve", sid, "--store", redis_url, "--agent", AGENT],
        env={"HELMLOG_APPROVER": "dana@ops"},
    )
    assert 1 == again.exit_code
    assert "no pending question" in " ".join(again.output.split())


def test_r18_approve_names_a_bad_agent_path(redis_url: str) -> None:
    """A wrong ``--agent`` is a clear error, not a traceback."""
    result = runner.invoke(
        app,
        ["approve", "x", "--store", redis_url, "--agent", "nope"],
        env={"HELMLOG_APPROVER": "d"},
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

    monkeypatch.setattr(commands_app, "open_event_store", no_scan)
    result = runner.invoke(app, ["asks", "--store", redis_url, "--json"])
    assert 0 == result.exit_code, result.output
    assert [sid] == [q["session_id"] for q in json.loads(result.stdout)]
    assert [] == scanned


def test_approve_refuses_a_free_text_name_with_no_configured_identity(
    redis_url: str,
) -> None:
    """Issue 11: ``--by mallory`` alone runs nothing and records nothing."""
    sid = asyncio.run(_paused_session(redis_url))
    result = runner.invoke(
        app,
        ["approve", sid, "--by", "mallory", "--store", redis_url, "--agent", AGENT],
        env={"HELMLOG_APPROVER": "", "HELMLOG_TOKEN": ""},
    )
    assert 1 == result.exit_code
    assert "HELMLOG_APPROVER" in " ".join(result.output.split())
    assert [("four-eyes", "ask", "Refund over $500?")] == asyncio.run(
        _rows(redis_url, sid)
    )


def test_approve_refuses_a_by_that_is_not_the_configured_identity(
    redis_url: str,
) -> None:
    """``--by`` may repeat the configured identity, never replace it."""
    sid = asyncio.run(_paused_session(redis_url))
    result = runner.invoke(
        app,
        ["approve", sid, "--by", "mallory", "--store", redis_url, "--agent", AGENT],
        env={"HELMLOG_APPROVER": "dana@ops"},
    )
    assert 1 == result.exit_code
    assert 1 == len(asyncio.run(_rows(redis_url, sid)))


def test_approve_takes_the_identity_of_the_configured_token(
    redis_url: str, tmp_path: Any
) -> None:
    """``$HELMLOG_TOKEN`` looked up in the auth file names the approver."""
    sid = asyncio.run(_paused_session(redis_url))
    auth = tmp_path / "auth.toml"
    auth.write_text(
        '[[tokens]]\nidentity = "dana@ops"\nroles = ["approver"]\napps = ["*"]\n'
        'token = "t1"\n'
        '[[tokens]]\nidentity = "app"\nroles = ["session"]\ntoken = "t2"\n'
    )
    wrong = runner.invoke(
        app,
        ["approve", sid, "--store", redis_url, "--agent", AGENT, "--auth", str(auth)],
        env={"HELMLOG_TOKEN": "t2", "HELMLOG_APPROVER": ""},
    )
    assert 1 == wrong.exit_code
    assert "not an approver" in " ".join(wrong.output.split())
    result = runner.invoke(
        app,
        ["approve", sid, "--store", redis_url, "--agent", AGENT, "--auth", str(auth)],
        env={"HELMLOG_TOKEN": "t1", "HELMLOG_APPROVER": ""},
    )
    assert 0 == result.exit_code, result.output
    assert ("four-eyes", "allow", "approved by dana@ops") == asyncio.run(
        _rows(redis_url, sid)
    )[1]


def test_approve_needs_the_ask_in_the_index(redis_url: str) -> None:
    """A session the asks index does not list is refused before anything runs."""
    sid = asyncio.run(_paused_session(redis_url))
    asyncio.run(_drop_from_index(redis_url, sid))
    result = runner.invoke(
        app,
        ["approve", sid, "--store", redis_url, "--agent", AGENT],
        env={"HELMLOG_APPROVER": "dana@ops"},
    )
    assert 1 == result.exit_code
    assert "asks index" in " ".join(result.output.split())
    assert 1 == len(asyncio.run(_rows(redis_url, sid)))


async def _drop_from_index(url: str, sid: str) -> None:
    """Remove the session from the asks index (its shards' hashes), as a lost
    index write would leave it; the stream still ends with the pause."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        dropped = 0
        for key in await client.keys("helmlog:asks:*"):
            dropped += await client.hdel(key, sid)
    finally:
        await client.aclose()
    assert 1 == dropped


def test_agent_modules_import_from_the_current_directory(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: ``--agent desk:build`` finds ``desk.py`` beside the shell."""
    import sys

    from helmlog._asks import load_factory

    (tmp_path / "desk_here.py").write_text("def build(store):\n    return store\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    factory = load_factory("desk_here:build")
    assert "build" == factory.__name__
    monkeypatch.delitem(sys.modules, "desk_here")
