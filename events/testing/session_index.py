"""The session index's contract: open turns and pending asks across sessions.

Pattern: a contract suite for the ``SessionIndex`` port, run against any
         adapter (``helmlog.events.testing``'s header says how).
Role:    events layer, shipped tests; ``open_turns``, ``pending_asks``,
         ``reindex`` and ``repair_indexes`` mean the same on every store.

Laws: R7 (an unfinished turn is always listed by ``open_turns``; a paused
session is open), R18 (``pending_asks`` lists what waits on a person), R11
(the index is a projection: ``reindex`` recomputes it, idempotently).
"""

from __future__ import annotations

from helmlog.events import (
    EventStore,
    FatalError,
    PauseRequested,
    PauseResumed,
    PendingAsk,
    SessionImported,
    TurnEnded,
    TurnStarted,
)

from .support import decision, new_session, turn

__all__ = [
    "test_r7_fatal_error_closes_the_turn",
    "test_r7_open_turn_listed_until_its_end",
    "test_r7_open_turns_span_many_sessions",
    "test_r11_reindex_is_idempotent_and_matches_the_stream",
    "test_r18_ask_and_resume_in_one_batch_leave_nothing_pending",
    "test_r18_fatal_while_paused_keeps_the_session_open",
    "test_r18_pending_ask_listed_until_resumed",
    "test_r22_an_imported_pause_opens_a_turn_until_its_end",
]


def ask(call: str = "call-1") -> PauseRequested:
    return PauseRequested(
        kind="check-in",
        tool_name="refund",
        tool_call_id=call,
        middleware="approve",
        question="Refund 40 EUR?",
        timestamp=1_700_000_000_123,
    )


def resume(call: str = "call-1") -> PauseResumed:
    return PauseResumed(kind="check-in", tool_call_id=call, approved=True, by="ops")


async def test_r7_open_turn_listed_until_its_end(store: EventStore) -> None:
    """R7: a started turn is open until agent.turn_end; a whole turn never is."""
    a, b = new_session(), new_session()
    seq_a = await store.append(a, [TurnStarted(turn=1)], 0)
    seq_b = await store.append(b, turn(1), 0)
    assert [a] == [s for s in await store.open_turns() if s in {a, b}]
    seq_a = await store.append(a, decision(1), seq_a)
    assert a in await store.open_turns()
    await store.append(a, [TurnEnded(turn=1, final_content="done")], seq_a)
    assert set() == {a, b} & set(await store.open_turns())
    await store.append(b, [TurnStarted(turn=2)], seq_b)
    assert [b] == [s for s in await store.open_turns() if s in {a, b}]


async def test_r22_an_imported_pause_opens_a_turn_until_its_end(
    store: EventStore,
) -> None:
    """R22/R9: a session imported from a pause checkpoint continues a turn, so
    it is open (failover finds it) until agent.turn_end."""
    sid = new_session()
    imported = SessionImported(kind="check-in", checkpoint_digest="d", checkpoint_seq=7)
    seq = await store.append(sid, [imported, resume()], 0)
    assert sid in await store.open_turns()
    await store.append(sid, [TurnEnded(turn=1, final_content="done")], seq)
    assert sid not in await store.open_turns()


async def test_r7_fatal_error_closes_the_turn(store: EventStore) -> None:
    """R7: error.fatal ends a turn as agent.turn_end does."""
    sid = new_session()
    seq = await store.append(sid, [TurnStarted(turn=1)], 0)
    assert sid in await store.open_turns()
    await store.append(sid, [FatalError(code="ERR_PROVIDER")], seq)
    assert sid not in await store.open_turns()


async def test_r18_pending_ask_listed_until_resumed(store: EventStore) -> None:
    """R18: a pause is a pending ask and keeps the turn open until resumed."""
    sid = new_session()
    seq = await store.append(sid, [TurnStarted(turn=1), ask()], 0)
    expected = PendingAsk(
        session_id=sid,
        seq=2,
        kind="check-in",
        tool_name="refund",
        tool_call_id="call-1",
        middleware="approve",
        question="Refund 40 EUR?",
        timestamp=1_700_000_000_123,
    )
    assert [expected] == [p for p in await store.pending_asks() if p.session_id == sid]
    assert sid in await store.open_turns()
    seq = await store.append(sid, [resume()], seq)
    assert [p for p in await store.pending_asks() if p.session_id == sid] == []
    assert sid in await store.open_turns()
    await store.append(sid, [TurnEnded(turn=1, final_content="ok")], seq)
    assert sid not in await store.open_turns()


async def test_r18_fatal_while_paused_keeps_the_session_open(
    store: EventStore,
) -> None:
    """R7/R18: a session with a pending pause stays open even after error.fatal."""
    sid = new_session()
    seq = await store.append(sid, [TurnStarted(turn=1), ask()], 0)
    await store.append(sid, [FatalError(code="ERR_X")], seq)
    assert sid in await store.open_turns()
    assert [p.seq for p in await store.pending_asks() if p.session_id == sid] == [2]


async def test_r18_ask_and_resume_in_one_batch_leave_nothing_pending(
    store: EventStore,
) -> None:
    """R18: within one batch, the last word wins: a resumed ask is not pending."""
    sid = new_session()
    seq = await store.append(sid, [TurnStarted(turn=1), ask("c1"), resume("c1")], 0)
    assert [p for p in await store.pending_asks() if p.session_id == sid] == []
    await store.append(sid, [ask("c2")], seq)
    assert [
        p.tool_call_id for p in await store.pending_asks() if p.session_id == sid
    ] == ["c2"]


async def test_r11_reindex_is_idempotent_and_matches_the_stream(
    store: EventStore,
) -> None:
    """R11: reindex recomputes what the appends maintained; twice is once."""
    paused, open_, done = new_session(), new_session(), new_session()
    await store.append(paused, [TurnStarted(turn=1), ask()], 0)
    await store.append(open_, [TurnStarted(turn=1)], 0)
    await store.append(done, turn(1), 0)
    mine = {paused, open_, done}
    before_open = sorted(s for s in await store.open_turns() if s in mine)
    before_asks = [p for p in await store.pending_asks() if p.session_id in mine]
    assert sorted([paused, open_]) == before_open
    for _ in range(2):
        for sid in (*sorted(mine), new_session()):
            await store.reindex(sid)
        assert before_open == sorted(s for s in await store.open_turns() if s in mine)
        assert before_asks == [
            p for p in await store.pending_asks() if p.session_id in mine
        ]
    assert await store.repair_indexes() >= 3
    assert before_open == sorted(s for s in await store.open_turns() if s in mine)
    assert before_asks == [
        p for p in await store.pending_asks() if p.session_id in mine
    ]


async def test_r7_open_turns_span_many_sessions(store: EventStore) -> None:
    """R7: open_turns lists exactly the open sessions among many."""
    sids = [new_session() for _ in range(40)]
    for n, sid in enumerate(sids):
        events = [TurnStarted(turn=1)] if n % 3 else turn(1)
        await store.append(sid, events, 0)
    expected = sorted(sid for n, sid in enumerate(sids) if n % 3)
    assert expected == sorted(set(sids) & set(await store.open_turns()))
