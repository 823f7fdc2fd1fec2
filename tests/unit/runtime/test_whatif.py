"""What-if re-judges recorded sessions under changed rules, calling nothing (issue 13).

Each test records refund-desk sessions live on an in-memory store, then hands
their records to ``helmlog.whatif`` with a changed desk whose model and tools
raise if touched, and reads the report: per decision unchanged, flipped (by
kind) or not re-judgeable, and each session's divergence point.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

import helmlog
from helmlog import (
    AgentFactoryError,
    StreamTamperedError,
    ToolMiddleware,
    UnknownSessionError,
    WhatIfReport,
    allow,
    conversation_redaction,
)
from helmlog._whatif import load_agent, parse_since
from helmlog.events import MemoryEventStore, StoredEvent
from helmlog.runtime.lowlevel import whatif_store

from .whatif_agents import TOUCHED, desk, record, records_of

pytestmark = pytest.mark.usefixtures("untouched")


@pytest.fixture
def untouched() -> Any:
    TOUCHED.clear()
    yield
    assert [] == TOUCHED  # issue 13: no model and no tool was called


def _what(report: WhatIfReport) -> list[tuple[Any, ...]]:
    """(call, moment, status, was, now, flip, diverges) of every decision."""
    return [
        (d.tool_call_id, d.moment, d.status, d.was, d.now, d.flip, d.diverges)
        for s in report.sessions
        for d in s.decisions
    ]


async def _sessions(store: MemoryEventStore, *runs: Any) -> list[StoredEvent]:
    ids = [await record(store, *batches, **knobs) for batches, knobs in runs]
    return await records_of(store, *ids)


async def test_whatif_calls_no_model_and_no_tool() -> None:
    """Issue 13: the recorded replies and results stand in; a model and tools
    that raise if touched are never touched, even when decisions flip."""
    store = MemoryEventStore()
    records = await _sessions(store, (((100,), (700,)), {}), (((2000,),), {}))
    for changed in (desk(sealed=True), desk(ceiling=50, four_eyes=None, sealed=True)):
        report = await helmlog.whatif(records, changed)
        assert 2 == len(report.sessions)
        assert report.decisions > 0


async def test_whatif_an_identical_policy_flips_nothing() -> None:
    """Issue 13: the same rules re-judge every decision as it was made."""
    store = MemoryEventStore()
    records = await _sessions(
        store,
        (((100, 700), (2000,)), {}),
        (((900,),), {"approve": False}),
    )
    report = await helmlog.whatif(records, desk(sealed=True))
    assert () == report.flipped
    assert () == report.diverged
    report.raise_for_divergence()  # nothing diverged: it returns
    assert {"unchanged"} == {d.status for s in report.sessions for d in s.decisions}
    assert [
        ("c1", "before-tool", "unchanged", "allow", "allow", None, False),
        ("c1", "after-tool", "unchanged", "transform", "transform", None, False),
        ("c2", "before-tool", "unchanged", "ask", "ask", None, False),
        ("c2", "after-tool", "unchanged", "transform", "transform", None, False),
        ("c11", "before-tool", "unchanged", "deny", "deny", None, False),
        ("c1", "before-tool", "unchanged", "ask", "ask", None, False),
    ] == _what(report)


async def test_whatif_a_tightened_ceiling_flips_exactly_the_affected_calls() -> None:
    """Issue 13: a ceiling lowered from 1,000 to 300 flips the refunds of 400
    and 700 (an approved ask) to denials; 100, 250 and 2,000 stay as they were."""
    store = MemoryEventStore()
    amounts = (100, 250, 400, 700, 2000)
    records = await _sessions(store, *((((a,),), {}) for a in amounts))
    report = await helmlog.whatif(records, desk(ceiling=300, sealed=True))
    flipped = {
        amounts[n]: (d.moment, d.was, d.now, d.flip, d.middleware)
        for n, s in enumerate(report.sessions)
        for d in s.decisions
        if d.flip
    }
    assert {
        400: ("before-tool", "allow", "deny", "allow-to-deny", "ceiling"),
        700: ("before-tool", "ask", "deny", "allow-to-deny", "ceiling"),
    } == flipped
    assert [400, 700] == [
        amounts[n] for n, s in enumerate(report.sessions) if s.divergence
    ]
    assert 2 == report.flips()["allow-to-deny"]
    with pytest.raises(helmlog.DivergenceError) as diverged:
        report.raise_for_divergence()
    assert ("before-tool", "allow-to-deny", "c1", 2, "ERR_DIVERGENCE") == (
        diverged.value.moment,
        diverged.value.flip,
        diverged.value.tool_call_id,
        diverged.value.diverged,
        diverged.value.code,
    )


async def test_whatif_stops_rejudging_a_session_at_its_divergence_point() -> None:
    """Issue 13: past the first decision that changes what the model read, the
    recorded replies no longer apply: nothing after it is re-judged."""
    store = MemoryEventStore()
    sid = await record(store, (400, 100), (100,))
    records = await store.read(sid)
    report = await helmlog.whatif(records, desk(ceiling=300, sealed=True))
    (session,) = report.sessions
    assert [
        ("c1", "before-tool", "flipped", "allow", "deny", "allow-to-deny", True)
    ] == (_what(report))
    start = next(r.seq for r in records if b'"stream.tool_start"' in r.data)
    assert session.divergence is not None
    assert start == session.divergence.seq
    assert 2 == session.not_rejudged  # c2, then the next turn's c11


async def test_whatif_an_ask_the_record_asked_is_resumed_as_the_person_decided() -> (
    None
):
    """G62/G64: an ask the new rules also put is resumed with the recorded
    decision: an approval runs on to the recorded result, a decline stays one."""
    store = MemoryEventStore()
    approved = await _sessions(store, (((700,),), {}))
    declined = await _sessions(store, (((700,),), {"approve": False}))
    report = await helmlog.whatif(approved + declined, desk(sealed=True))
    assert [
        ("c1", "before-tool", "unchanged", "ask", "ask", None, False),
        ("c1", "after-tool", "unchanged", "transform", "transform", None, False),
        ("c1", "before-tool", "unchanged", "ask", "ask", None, False),
    ] == _what(report)
    lenient = desk(ceiling=300, four_eyes=None, sealed=True)
    assert [
        ("c1", "before-tool", "flipped", "ask", "deny", "allow-to-deny", True),
        ("c1", "before-tool", "flipped", "ask", "deny", "reason-differs", True),
    ] == _what(await helmlog.whatif(approved + declined, lenient))


async def test_whatif_an_ask_that_no_longer_asks() -> None:
    """Issue 13: without the four-eyes rule an approved call runs as recorded
    (a flip, not a divergence); a declined one would have run: a divergence."""
    store = MemoryEventStore()
    approved = await _sessions(store, (((700,),), {}))
    declined = await _sessions(store, (((700,),), {"approve": False}))
    report = await helmlog.whatif(
        approved + declined, desk(four_eyes=None, sealed=True)
    )
    assert [
        ("c1", "before-tool", "flipped", "ask", "allow", "no-longer-asks", False),
        ("c1", "after-tool", "unchanged", "transform", "transform", None, False),
        ("c1", "before-tool", "flipped", "ask", "allow", "no-longer-asks", True),
    ] == _what(report)


async def test_whatif_a_new_ask_is_a_divergence() -> None:
    """Issue 13: a person's answer to a question never put is not in the record."""
    store = MemoryEventStore()
    records = await _sessions(store, (((100,),), {}))
    report = await helmlog.whatif(records, desk(four_eyes=50, sealed=True))
    assert [("c1", "before-tool", "flipped", "allow", "ask", "new-ask", True)] == _what(
        report
    )
    assert "four-eyes" == report.sessions[0].decisions[0].middleware


async def test_whatif_after_tool_transforms_are_rejudged_on_the_recorded_result() -> (
    None
):
    """G22/G23: the after-tool chain walks the recorded result; a mask that
    differs, a mask removed and a new refusal each flip what the model reads."""
    store = MemoryEventStore()
    records = await _sessions(store, (((100,),), {}))
    hide = ToolMiddleware(name="hide", on_tool_result=lambda r: helmlog.deny("hidden"))
    cases: list[tuple[Any, tuple[str, str, str]]] = [
        (
            desk(mask="[hidden]", sealed=True),
            ("transform", "transform", "transform-differs"),
        ),
        (desk(mask=None, sealed=True), ("transform", "allow", "transform-differs")),
    ]
    for changed, (was, now, flip) in cases:
        report = await helmlog.whatif(records, changed)
        after = [d for d in report.sessions[0].decisions if d.moment == "after-tool"]
        assert [(was, now, flip, True)] == [
            (d.was, d.now, d.flip, d.diverges) for d in after
        ]
    refusing = (
        helmlog.Agent.create(provider=desk(sealed=True).config.provider, model="m")
        .tool(desk(sealed=True).config.tools["refund"])
        .tool_middleware(hide)
        .build()
    )
    report = await helmlog.whatif(records, refusing)
    assert [
        ("c1", "after-tool", "flipped", "transform", "deny", "allow-to-deny", True)
    ] == [w for w in _what(report) if w[1] == "after-tool"]


async def test_whatif_a_window_strategy_change_flips_what_the_model_is_sent() -> None:
    """G80/G81: the new strategy plans over the recorded history; a window
    that now engages changes what the model is sent, a divergence."""
    store = MemoryEventStore()
    plain = await _sessions(store, (((100,), (100,)), {}))
    windowed = await _sessions(store, (((100,), (100,)), {"window": 1}))
    same = await helmlog.whatif(windowed, desk(window=1, sealed=True))
    assert () == same.flipped
    assert [("transform", "transform")] * 2 == [
        (d.was, d.now) for d in same.sessions[0].decisions if d.moment == "window"
    ]
    report = await helmlog.whatif(plain, desk(window=1, sealed=True))
    (window,) = [d for d in report.sessions[0].decisions if d.moment == "window"]
    assert ("allow", "transform", "transform-differs", True, 2) == (
        window.was,
        window.now,
        window.flip,
        window.diverges,
        window.turn,
    )
    assert report.sessions[0].divergence == window


async def test_whatif_a_redacted_session_reports_what_cannot_be_rejudged() -> None:
    """G87: under redaction the stream keeps the results and drafts only as a
    placeholder, so the after-tool walk and a rewritten answer are reported as
    not re-judgeable; the arguments (committed messages) still re-judge."""
    store = MemoryEventStore()
    knobs = {"redact": conversation_redaction(), "codename": True}
    sid = await record(store, (100,), answer="Done under BLUEBIRD.", **knobs)
    report = await helmlog.whatif(
        await store.read(sid), desk(codename=True, sealed=True)
    )
    assert [
        (None, "input", "unchanged", "allow", "allow", None),
        ("c1", "before-tool", "unchanged", "allow", "allow", None),
        ("c1", "after-tool", "not-rejudgeable", "transform", None, "redacted"),
        (None, "output", "not-rejudgeable", "transform", None, "redacted"),
    ] == [
        (d.tool_call_id, d.moment, d.status, d.was, d.now, d.reason)
        for d in report.sessions[0].decisions
    ]
    assert () == report.flipped


async def test_whatif_a_link_that_raises_is_not_rejudged_as_a_denial() -> None:
    """G7 makes a raising link a denial live; a what-if reports it instead."""
    store = MemoryEventStore()
    records = await _sessions(store, (((100,),), {}))

    def flaky(ctx: Any) -> Any:
        raise ConnectionError("policy service down")

    base = desk(sealed=True)
    changed = (
        helmlog.Agent.create(provider=base.config.provider, model="m")
        .tool(base.config.tools["refund"])
        .tool_middleware(ToolMiddleware(name="flaky", on_tool_call=flaky))
        .build()
    )
    report = await helmlog.whatif(records, changed)
    (first,) = report.sessions[0].decisions[:1]
    assert ("not-rejudgeable", "link-raised", "flaky", False) == (
        first.status,
        first.reason,
        first.middleware,
        first.diverges,
    )


async def test_whatif_refuses_a_tampered_stream_and_judges_nothing() -> None:
    """R19: a stream that fails verification is refused before any rule runs."""
    store = MemoryEventStore()
    records = await _sessions(store, (((100,),), {}))
    edited = records[4].data.replace(b'"amount":100', b'"amount":10')
    tampered = [
        *records[:4],
        msgspec.structs.replace(records[4], data=edited),
        *records[5:],
    ]
    seen: list[str] = []
    watching = ToolMiddleware(
        name="watching", on_tool_call=lambda c: seen.append(c.tool_call_id) or allow()
    )
    base = desk(sealed=True)
    changed = (
        helmlog.Agent.create(provider=base.config.provider, model="m")
        .tool(base.config.tools["refund"])
        .tool_middleware(watching)
        .build()
    )
    assert edited != records[4].data
    with pytest.raises(StreamTamperedError) as caught:
        await helmlog.whatif(tampered, changed)
    assert (5, []) == (caught.value.seq, seen)


async def test_whatif_names_an_unknown_session_and_a_factory_that_gives_no_agent() -> (
    None
):
    """Issue 13: bad input gets a typed error naming what is wrong."""
    store = MemoryEventStore()
    with pytest.raises(UnknownSessionError) as unknown:
        await whatif_store(store, ["nope"], desk(sealed=True), where="memory://")
    assert ("nope", "ERR_UNKNOWN_SESSION") == (
        unknown.value.session_id,
        unknown.value.code,
    )
    for spec, reason in [
        ("no_such_module_here:make", "import"),
        ("nocolon", "malformed"),
        ("tests.unit.runtime.whatif_agents:nothing", "missing"),
        ("tests.unit.runtime.whatif_agents:broken", "not-an-agent"),
    ]:
        with pytest.raises(AgentFactoryError) as bad:
            load_agent(spec, store)
        assert (spec, reason) == (bad.value.spec, bad.value.reason)


async def test_whatif_report_is_one_json_document_of_facts_only() -> None:
    """G86: the report names moments, links and outcomes, never a value."""
    store = MemoryEventStore()
    records = await _sessions(store, (((400,),), {}), (((100,),), {}))
    report = await helmlog.whatif(records, desk(ceiling=300, sealed=True))
    doc = json.loads(json.dumps(report.document()))
    assert {
        "sessions": 2,
        "decisions": 3,
        "unchanged": 2,
        "flipped": 1,
        "not_rejudgeable": 0,
        "diverged_sessions": 1,
        "not_rejudged": 0,
        "flips": {
            "allow-to-deny": 1,
            "deny-to-allow": 0,
            "new-ask": 0,
            "no-longer-asks": 0,
            "transform-differs": 0,
            "reason-differs": 0,
        },
    } == doc["whatif"]
    text = json.dumps(doc)
    assert [] == [
        v for v in ("refunded", "jo@example.com", "400", "Refund") if v in text
    ]


def test_whatif_since_takes_iso_times_durations_and_epoch_ms() -> None:
    """``--since``: ISO 8601 (UTC without a zone), a duration ago, epoch ms."""
    now = 1_800_000_000_000
    assert 1_764_547_200_000 == parse_since("2025-12-01T00:00:00", now)
    assert 1_764_547_200_000 == parse_since("2025-12-01T01:00:00+01:00", now)
    assert now - 2 * 3_600_000 == parse_since("2h", now)
    assert 12345 == parse_since("12345", now)
    with pytest.raises(ValueError, match="--since"):
        parse_since("yesterday-ish", now)


def _asking_agent(
    store: MemoryEventStore | None, *, sealed: bool, upper: bool, check_in: bool
) -> Any:
    """A tool that asks a person (``ask_human``) or has a check-in gate."""

    @helmlog.tool(check_in=True if check_in else None)
    def size(order: int) -> str:
        """Ask which size to ship."""
        if sealed:
            TOUCHED.append("size")
            raise AssertionError("a what-if called a tool")
        if check_in:
            return "shipped"
        helmlog.ask_human("Which size?")

    shout = ToolMiddleware(
        name="shout",
        on_tool_result=lambda r: (
            allow(str(r.result).upper(), "shouted") if upper else allow()
        ),
    )
    reply = helmlog.runtime.providers.Reply(
        tool_calls=[
            helmlog.runtime.providers.ToolCallRequest(
                id="c1", name="size", args={"order": 7}
            )
        ]
    )
    options: dict[str, Any] = {} if store is None else {"store": store}
    model: Any = desk(sealed=True).config.provider if sealed else None
    if model is None:
        model = helmlog.runtime.providers.scripted([reply, "Shipped."])
    return (
        helmlog.Agent.create(provider=model, model="m", **options)
        .tool(size)
        .tool_middleware(shout)
        .build()
    )


@pytest.mark.parametrize("check_in", [False, True])
async def test_whatif_a_person_answer_or_check_in_is_the_recorded_one(
    check_in: bool,
) -> None:
    """G56/G70: a check-in resumes as the person decided; an ``ask_human``
    answer is the recorded result the new after-tool chain judges."""
    store = MemoryEventStore()
    live = _asking_agent(store, sealed=False, upper=False, check_in=check_in)
    out = await live.run("Ship order 7")
    assert helmlog.is_ask_pause(out)
    answer: Any = helmlog.check_in_approved("dana@ops") if check_in else "large"
    assert "Shipped." == await live.resume(out.checkpoint, answer)
    records = await store.read(live.session_id)
    # A check-in pauses before the call runs; ask_human is the tool's own.
    asked = "ask" if check_in else "allow"
    same = _asking_agent(None, sealed=True, upper=False, check_in=check_in)
    assert [
        ("c1", "before-tool", "unchanged", asked, asked, None, False),
        ("c1", "after-tool", "unchanged", "allow", "allow", None, False),
    ] == _what(await helmlog.whatif(records, same))
    louder = _asking_agent(None, sealed=True, upper=True, check_in=check_in)
    assert [
        ("c1", "before-tool", "unchanged", asked, asked, None, False),
        (
            "c1",
            "after-tool",
            "flipped",
            "allow",
            "transform",
            "transform-differs",
            True,
        ),
    ] == _what(await helmlog.whatif(records, louder))


async def test_whatif_a_call_of_unknown_outcome_is_not_rejudged_after_the_tool() -> (
    None
):
    """R7: a call recorded as dispatched, its outcome unknown after a host
    died, re-judges before the tool; its result was never recorded."""
    from tests.e2e.recover_agents import HostStopped, _DyingStore

    dying = _DyingStore()

    @helmlog.tool(name="refund")
    def dies(order: int, amount: float) -> str:
        """Refund an order (the host dies while it runs)."""
        dying.dead = True
        raise HostStopped

    call = helmlog.runtime.providers.ToolCallRequest(
        id="c1", name="refund", args={"order": 7, "amount": 100}
    )
    model = helmlog.runtime.providers.scripted(
        [helmlog.runtime.providers.Reply(tool_calls=[call])]
    )
    first = helmlog.Agent.create(provider=model, model="m", store=dying)
    with pytest.raises(HostStopped):
        await (
            first.tool(dies)
            .tool_middleware(*desk().config.tool_links)
            .build()
            .run("Refund please")
        )
    (sid,) = await dying.sessions()
    store = MemoryEventStore()
    await store.append_sealed(sid, await dying.read(sid), 0)
    assert "Done." == await desk(store, script=["Done."]).recover(sid)
    report = await helmlog.whatif(await store.read(sid), desk(sealed=True))
    assert [
        ("c1", "before-tool", "unchanged", "allow", "allow", None, False),
        ("c1", "after-tool", "not-rejudgeable", None, None, None, False),
    ] == _what(report)
    assert "not-recorded" == report.sessions[0].decisions[1].reason
