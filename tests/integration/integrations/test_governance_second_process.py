"""A steered session's ask, decided from a second process; the record's tools on it.

Pattern: the shared scenario steered through ``Governance`` on a real Redis
         (``tests/fixtures_redis.py``) up to its ask; ``helmlog asks`` and
         ``helmlog approve|decline --agent ...scenario:governance`` run as
         real subprocesses on the same store; the framework's process then
         re-enters the call and reads the outcome back. ``helmlog verify``,
         ``replay`` and ``whatif`` run on the steered session unchanged.
Role:    integration tests of ``integrations/_governance.py`` with
         ``helmlog/_asks.py`` and the record's command-line tools.
Emits:   nothing.

Laws: issue 27 items 1, 5, 6 (an ask approved from a second process, the tool
run exactly once, counted across processes; one record: verify, replay and
what-if work on it unchanged), R18, R9, R19, G62, G64.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from helmlog import AskPause, check_in_approved
from helmlog.events import EventStore, open_event_store
from helmlog.integrations import Governance
from helmlog.runtime.lowlevel import Ran, Refused, SteeredTurn
from helmlog.runtime.providers import framework_model

from . import scenario as sc
from .conftest import ROOT

pytestmark = pytest.mark.redis

GOVERNANCE = "tests.integration.integrations.scenario:governance"


def _cli(env: dict[str, str], *args: str, ok: set[int] | None = None) -> str:
    """``helmlog <args>`` as a real subprocess; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "helmlog.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (ok or {0}), done.stdout + done.stderr
    return done.stdout


async def cli(env: dict[str, str], *args: str, ok: set[int] | None = None) -> str:
    return await anyio.to_thread.run_sync(lambda: _cli(env, *args, ok=ok))


async def until_the_ask(g: Governance, name: str) -> tuple[SteeredTurn, AskPause]:
    """Steer ``name`` as a framework would, up to its pause."""
    turn = await g.steering.open_turn(sc.MESSAGES[name], session_id=name)
    for reply in sc.SCRIPTS[name]:
        await turn.model_request()
        await turn.model_reply(reply.content, reply.tool_calls)
        for call in reply.tool_calls:
            out = await turn.call_tool(call, g.tool_for(call.name, _fn(call.name)))
            if isinstance(out, AskPause):
                return turn, out
    raise AssertionError("the scenario did not pause")


async def to_the_end(g: Governance, turn: SteeredTurn, name: str) -> str:
    """Re-enter the paused call (as a framework's re-executed node does),
    then the model's last reply and the output moment."""
    paused = sc.SCRIPTS[name][1].tool_calls[0]
    out = await turn.call_tool(paused, g.tool_for(paused.name, _fn(paused.name)))
    assert isinstance(out, Ran | Refused)
    last = sc.SCRIPTS[name][-1]
    await turn.model_request()
    await turn.model_reply(last.content)
    return await turn.finish(last.content)


def _fn(name: str) -> Any:
    return sc.lookup_order if name == "lookup_order" else sc.refund


async def _governance(url: str) -> tuple[EventStore, Governance]:
    store = open_event_store(url)
    return store, Governance(sc.build_agent(store, framework_model("test")))


async def test_helmlog_approve_from_another_process_runs_the_tool_once(
    redis_url: str, approver_env: dict[str, str], runs_file: Path
) -> None:
    """Issue 27 items 1, 6: ``helmlog asks`` lists the steered session's ask;
    ``helmlog approve --agent ...:governance`` (a second process) runs the
    refund; the framework re-enters the call and reads that result; the
    refund ran exactly once; the rows are the native loop's."""
    store, g = await _governance(redis_url)
    try:
        turn, _ = await until_the_ask(g, sc.REFUND_800)
        env = {**approver_env, "HELMLOG_STORE": redis_url}
        listed = json.loads(await cli(env, "asks", "--json"))
        assert [
            {
                "session_id": sc.REFUND_800,
                "kind": "ask",
                "tool_name": "refund",
                "tool_call_id": "c2",
                "middleware": "four-eyes",
                "question": "Refund over $500?",
            }
        ] == listed
        approved = await cli(env, "approve", sc.REFUND_800, "--agent", GOVERNANCE)
        assert sc.TOOL_RESULTS["refund"] == approved.strip()
        assert ["lookup_order", "refund"] == sc.runs(runs_file)
        assert sc.FINAL[sc.REFUND_800] == await to_the_end(g, turn, sc.REFUND_800)
        assert ["lookup_order", "refund"] == sc.runs(runs_file)
        assert [] == json.loads(await cli(env, "asks", "--json"))
        rows = await sc.session_rows(store, sc.REFUND_800)
    finally:
        await store.close()
    assert await sc.expected_rows(sc.REFUND_800) == rows
    assert ("four-eyes", "allow", f"approved by {sc.APPROVER}") == (
        rows[7].middleware,
        rows[7].outcome,
        rows[7].why,
    )


async def test_helmlog_decline_refuses_the_call_and_it_never_runs(
    redis_url: str, approver_env: dict[str, str], runs_file: Path
) -> None:
    """G64: a decline from another process is the call's refusal; the
    framework reads it back; the refund never ran."""
    store, g = await _governance(redis_url)
    try:
        turn, pause = await until_the_ask(g, sc.REFUND_800)
        env = {**approver_env, "HELMLOG_STORE": redis_url}
        declined = await cli(
            env, "decline", sc.REFUND_800, "--agent", GOVERNANCE, "--note", "no"
        )
        assert "declined by human: no" == declined.strip()
        again = await turn.resume_tool(pause.checkpoint, None)
        assert isinstance(again, Refused)
        assert "declined by human: no" == again.text
        assert ["lookup_order"] == sc.runs(runs_file)
    finally:
        await store.close()


async def _steered_session(url: str) -> None:
    """The $800 conversation steered to its answer on ``url``; its ask
    approved by another governance on the store (as an approver would)."""
    store, g = await _governance(url)
    try:
        turn, pause = await until_the_ask(g, sc.REFUND_800)
        approver = sc.governance(store)
        await approver.resume(pause.checkpoint, check_in_approved(by=sc.APPROVER))
        await to_the_end(g, turn, sc.REFUND_800)
    finally:
        await store.close()


async def test_verify_works_on_a_steered_session(
    redis_url: str, approver_env: dict[str, str]
) -> None:
    """Issue 27 item 5, R19: ``helmlog verify`` checks the steered session's
    chain and head as any session's."""
    await _steered_session(redis_url)
    env = {**approver_env, "HELMLOG_STORE": redis_url}
    verified = await cli(env, "verify", sc.REFUND_800)
    assert f"intact: session {sc.REFUND_800} — 33 events verify" == verified.strip()


async def test_replay_works_on_a_steered_session(
    redis_url: str, approver_env: dict[str, str]
) -> None:
    """Issue 27 item 5: ``helmlog replay --json`` re-emits the steered
    session: the native loop's event types, in order."""
    await _steered_session(redis_url)
    env = {**approver_env, "HELMLOG_STORE": redis_url}
    replayed = json.loads(await cli(env, "replay", sc.REFUND_800, "--json"))
    assert await sc.expected_types(sc.REFUND_800) == [e["type"] for e in replayed]


async def test_whatif_works_on_a_steered_session(
    redis_url: str, approver_env: dict[str, str]
) -> None:
    """Issue 27 item 5: ``helmlog whatif`` re-judges the steered session:
    nothing flips under the same table; under a stricter one the approved
    refund (call c2) flips to a denial, its divergence point."""
    await _steered_session(redis_url)
    env = {**approver_env, "HELMLOG_STORE": redis_url}
    same = json.loads(
        await cli(
            env,
            "whatif",
            sc.REFUND_800,
            "--agent",
            "tests.integration.integrations.scenario:native_agent",
            "--json",
        )
    )
    stricter = json.loads(
        await cli(
            env,
            "whatif",
            sc.REFUND_800,
            "--agent",
            "tests.integration.integrations.scenario:stricter_agent",
            "--json",
            ok={1},
        )
    )
    assert (0, 1) == (_flipped(same), _flipped(stricter))
    [session] = stricter["sessions"]
    assert ("before-tool", "c2") == (
        session["divergence"]["moment"],
        session["divergence"]["tool_call_id"],
    )


def _flipped(report: Any) -> int:
    """How many decisions a ``whatif --json`` document says flipped."""
    flipped: int = report["whatif"]["flipped"]
    return flipped
