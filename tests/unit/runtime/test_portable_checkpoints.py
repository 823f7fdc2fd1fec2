"""Portable checkpoints: a store that lacks the session imports the pause (R9).

Pattern: pause in this process on the default in-memory store, hand the JSON
         checkpoint to a second process built the same way (a subprocess),
         and compare what ran and what was recorded with what the law says;
         then edit or forge the checkpoint and see it refused, nothing
         appended, nothing run.
Role:    unit tests for the agent's import path (issue 8 item 6).
Emits:   nothing.

Laws: R9 (a pause checkpoint whose session the store lacks is imported: a
new stream seeded from it, whose first event, ``session.imported``, records
the checkpoint's digest and kind; with a chain key only a checkpoint whose MAC
verifies is imported; the binding checks hold whenever the store has the
session), R14, R1 (the imported stream verifies and folds to the live state).

Why the second process is real: "another process on the default store" is
the case the law is for; an in-process second agent on a second store could
share module state a real process would not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from helmlog import (
    Checkpoint,
    CheckpointError,
    DecisionRequiredError,
    check_in_approved,
)
from helmlog.events import MemoryEventStore, PausedCall, SessionImported
from helmlog.events.lowlevel import binding_mac, digest

from .helpers import assert_fold_matches, stored
from .portable_agent import CAP, build, pause, resume

KEY = "operator-secret-key"
ROOT = Path(__file__).resolve().parents[3]
CAPPED = {"order": 7, "amount": CAP}


def second_process(text: str, *, key: str | None = None) -> dict[str, Any]:
    """Resume ``text`` in a new Python process on its own default store."""
    env = {k: v for k, v in os.environ.items() if k != "HELMLOG_TEST_CHAIN_KEY"}
    if key is not None:
        env["HELMLOG_TEST_CHAIN_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.runtime.portable_agent"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
        env=env,
    )
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def edited(cp: Checkpoint, **changes: Any) -> str:
    return msgspec.structs.replace(cp, **changes).to_json()


def call_of(cp: Checkpoint) -> PausedCall:
    assert isinstance(cp.call, PausedCall)
    return cp.call


@pytest.mark.parametrize("key", [None, KEY], ids=["no-key", "chain-key"])
async def test_r09_a_pause_taken_in_one_process_resumes_in_another(
    key: str | None,
) -> None:
    """R9: a second process on the default store imports the pause and resumes
    it: the tool runs with the arguments as they stood, the stream starts with
    the import event (the checkpoint's digest and kind), verifies and folds."""
    store = MemoryEventStore(chain_key=key.encode() if key else None)
    cp = (await pause(store)).checkpoint
    assert CAPPED == call_of(cp).args  # the cap ran before the ask
    got = second_process(cp.to_json(), key=key)
    assert "Refunded." == got["answer"]
    assert [CAPPED] == got["ran"]
    assert "session.imported" == got["types"][0]
    assert {
        "kind": "pause",
        "checkpoint_digest": cp.digest(),
        "checkpoint_seq": cp.seq,
    } == got["first"]
    assert ["pause.resume", "decision.filed", "decision.filed"] == got["types"][1:4]
    assert "agent.turn_end" == got["types"][-1]
    assert (True, True) == (got["verified"], got["fold_matches"])


async def test_r09_an_edited_checkpoint_is_refused_by_the_second_process() -> None:
    """R9: the second process refuses an edited checkpoint; nothing runs or seeds."""
    cp = (await pause(MemoryEventStore())).checkpoint
    raised = msgspec.structs.replace(call_of(cp), args={"order": 7, "amount": 99_999})
    got = second_process(edited(cp, call=raised))
    assert {"refused": "tampered", "ran": [], "sessions": []} == got


async def test_r09_under_a_chain_key_a_mac_that_does_not_verify_is_refused() -> None:
    """R9: with a chain key only a checkpoint whose MAC verifies is imported."""
    store = MemoryEventStore(chain_key=KEY.encode())
    cp = (await pause(store)).checkpoint
    forged = binding_mac(
        b"another-key",
        session_id=cp.session_id,
        seq=cp.seq,
        tool_call_id=cp.tool_call_id,
        args_digest=cp.args_digest,
        policy_version=cp.policy_version,
        content_digest=cp.content_digest(),
    )
    for text in (edited(cp, mac=forged), edited(cp, mac=None)):
        got = second_process(text, key=KEY)
        assert {"refused": "tampered", "ran": [], "sessions": []} == got


def _edits(cp: Checkpoint) -> dict[str, str]:
    call = call_of(cp)
    replace = msgspec.structs.replace
    return {
        "args": edited(cp, call=replace(call, args={"order": 7, "amount": 900})),
        "args-and-digest": edited(
            cp,
            call=replace(call, args={"order": 7, "amount": 900}),
            args_digest=digest({"order": 7, "amount": 900}),
        ),
        "skip-links": edited(cp, call=replace(call, link_index=2, middleware="after")),
        "kind": edited(cp, call=replace(call, kind="ask-human")),
        "history": edited(cp, history=cp.history[:1]),
        "call-id": edited(cp, tool_call_id="c9"),
        "policy": edited(cp, policy_version="0" * 64),
    }


@pytest.mark.parametrize(
    "edit",
    ["args", "args-and-digest", "skip-links", "kind", "history", "call-id", "policy"],
)
async def test_r09_under_a_chain_key_any_edit_of_an_import_is_refused(
    edit: str,
) -> None:
    """R9: the MAC covers the bindings, the history and the paused call, so an
    edited import is refused before anything is appended, and nothing runs."""
    store = MemoryEventStore(chain_key=KEY.encode())
    cp = (await pause(store)).checkpoint
    got = await resume(_edits(cp)[edit], KEY.encode())
    assert {"refused": "tampered", "ran": [], "sessions": []} == got


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ("args", "tampered"),
        ("history", "tampered"),
        ("call-id", "tampered"),
        ("policy", "policy-changed"),
    ],
)
async def test_r09_without_a_key_an_inconsistent_import_is_refused(
    edit: str, reason: str
) -> None:
    """R9: without a key an import is checked for consistency: the carried args
    against args_digest, the call against the history, the posture against the
    agent's; an inconsistent one is refused, nothing appended or run."""
    cp = (await pause(MemoryEventStore())).checkpoint
    got = await resume(_edits(cp)[edit])
    assert {"refused": reason, "ran": [], "sessions": []} == got


async def test_r09_an_imported_pause_is_single_use() -> None:
    """R9: once imported and resumed, the same checkpoint is replayed; the
    imported session then holds it as any session does."""
    cp = (await pause(MemoryEventStore())).checkpoint
    store = MemoryEventStore()
    ran: list[dict[str, Any]] = []
    agent = build(store, ran, resuming=True)
    assert "Refunded." == await agent.resume(cp.to_json(), check_in_approved(by="d"))
    with pytest.raises(CheckpointError) as caught:
        await agent.resume(cp, check_in_approved(by="d"))
    assert "replayed" == caught.value.reason
    fresh = build(store, ran, resuming=True)
    with pytest.raises(CheckpointError) as again:
        await fresh.resume(cp, check_in_approved(by="d"))
    assert "replayed" == again.value.reason
    assert [CAPPED] == ran
    await assert_fold_matches(agent)
    (first, *_rest) = await stored(agent)
    assert isinstance(first, SessionImported)
    assert (1, cp.digest(), cp.seq) == (
        first.seq,
        first.checkpoint_digest,
        first.checkpoint_seq,
    )


async def test_r09_a_refused_import_leaves_no_session_and_no_record() -> None:
    """R9: a refusal (here: no decision) comes before the import is appended."""
    cp = (await pause(MemoryEventStore())).checkpoint
    store = MemoryEventStore()
    agent = build(store, [], resuming=True)
    with pytest.raises(DecisionRequiredError):
        await agent.resume(cp, None)
    assert ([], 0) == (await store.sessions(), agent.resident_count)
    assert "Refunded." == await agent.resume(cp, check_in_approved(by="d"))
