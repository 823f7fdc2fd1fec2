"""R20 in the fold: what an unfinished turn is, and per-turn dispatch bookkeeping.

``Folder.unfinished`` is the one notion recovery uses: a turn started, ended
neither by ``agent.turn_end`` nor by ``error.fatal``, with no pause pending.
``Folder.dispatched`` holds only the current turn's calls without a result.
"""

from __future__ import annotations

import pickle
import sys

import msgspec

from helmlog import RecoveryRequiredError
from helmlog.events import (
    DecisionFiled,
    Event,
    FatalError,
    Folder,
    HelmlogError,
    MiddlewareDecision,
    PauseRequested,
    PauseResumed,
    ToolDispatched,
    ToolEnded,
    TurnEnded,
    TurnStarted,
)


def _fold(*events: Event) -> Folder:
    folder = Folder("s")
    for seq, event in enumerate(events, start=1):
        folder.apply(msgspec.structs.replace(event, seq=seq))
    return folder


def _pause(call_id: str) -> PauseRequested:
    return PauseRequested(
        kind="ask",
        tool_name="refund",
        tool_call_id=call_id,
        middleware="four-eyes",
        link_index=0,
        question="ok?",
        args={},
        args_digest="d",
        policy_version="p",
    )


def test_r20_a_started_turn_is_unfinished_until_turn_end_or_error_fatal() -> None:
    """R20/R7: turn_end and error.fatal finish a turn; a pending pause is not open."""
    start = TurnStarted(turn=1, base_seq=0)
    assert _fold(start).unfinished
    assert not _fold(start, TurnEnded(turn=1, final_content="hi")).unfinished
    assert not _fold(start, FatalError(code="ERR_PROVIDER")).unfinished
    assert not _fold(start, _pause("c1")).unfinished
    resumed = PauseResumed(kind="ask", tool_call_id="c1", approved=True)
    assert _fold(start, _pause("c1"), resumed).unfinished
    # A new turn after a failed one is open again.
    again = TurnStarted(turn=2, base_seq=0)
    assert _fold(start, FatalError(code="ERR_PROVIDER"), again).unfinished
    # In-turn stays what the record says: no agent.turn_end yet (golden states).
    assert _fold(start, FatalError(code="ERR_PROVIDER")).in_turn


def test_r20_dispatch_bookkeeping_is_reset_by_each_turn_start() -> None:
    """R20: call_0 left dispatched by a failed turn is not the next turn's call_0."""
    dispatched = ToolDispatched(tool_name="lookup", tool_call_id="call_0", args={})
    failed = _fold(
        TurnStarted(turn=1, base_seq=0), dispatched, FatalError(code="ERR_INTERNAL")
    )
    assert ["call_0"] == list(failed.dispatched)
    nxt = _fold(
        TurnStarted(turn=1, base_seq=0),
        dispatched,
        FatalError(code="ERR_INTERNAL"),
        TurnStarted(turn=2, base_seq=0),
    )
    assert {} == nxt.dispatched
    assert () == nxt.state().dispatched
    ended = ToolEnded(tool_name="lookup", tool_call_id="call_0", result="ok")
    done = _fold(TurnStarted(turn=1, base_seq=0), dispatched, ended)
    assert {} == done.dispatched


def test_r20_recovery_required_error_carries_its_data_across_processes() -> None:
    """R20: a typed error with session_id and call ids; it pickles as itself."""
    err = RecoveryRequiredError(session_id="s1", call_ids=("c1", "c2"))
    assert isinstance(err, HelmlogError)
    assert ("ERR_RECOVERY_REQUIRED", False) == (err.code, err.retryable)
    back = pickle.loads(pickle.dumps(err))
    assert (RecoveryRequiredError, "s1", ("c1", "c2"), str(err)) == (
        type(back),
        back.session_id,
        back.call_ids,
        str(back),
    )
    assert "agent.recover('s1')" in str(err)
    assert "helmlog recover" in str(err)


def test_r1_a_folded_rows_words_are_interned_and_equal() -> None:
    """R1, R21 (issue 29): the fold keeps each row equal to the one recorded,
    its words (link, moment, at, outcome, phase, tool) the interned strings,
    and a field that is not a plain str (None) as it was."""
    words = ["".join(["link-", str(n)]) for n in (7, 7)]  # two equal, fresh strs
    rows = [
        MiddlewareDecision(
            middleware=word,
            moment="before-tool",
            at="tool",
            iteration=1,
            outcome="allow",
            changed=False,
            tool_name="".join(["look", "up"]),
            tool_call_id="c1",
        )
        for word in words
    ]
    expected = [msgspec.structs.replace(row) for row in rows]
    folder = _fold(*(DecisionFiled(row=row) for row in rows))
    assert expected == folder.rows
    assert folder.rows[0].middleware is folder.rows[1].middleware
    assert folder.rows[0].middleware is sys.intern("link-7")
    assert folder.rows[0].tool_name is sys.intern("lookup")
    assert [None, None] == [row.phase for row in folder.rows]
