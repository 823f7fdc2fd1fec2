"""Spans made on two hosts join one trace: trace context travels in the events.

Pattern: two agents ("hosts") on one real Redis store, each watched by its
         own ``OtelSink`` on an in-memory exporter; host A runs the turn to an
         ask, host B approves and resumes from the checkpoint; compare the
         spans both exported with what the record says.
Role:    integration test for issue 8 item 8 on ``RedisEventStore``.
Emits:   nothing.

Laws: issue 8 item 8 (the turn's W3C trace context is recorded on
``agent.turn_start`` and continued on ``pause.resume``; each sink parents its
``invoke_agent`` on the recorded context), R6 (a replay lands in the same
trace), R16.
"""

from __future__ import annotations

import pytest

from helmlog import AskPause, check_in_approved
from helmlog.events import PauseResumed, TurnStarted, open_event_store
from helmlog.sinks import replay
from tests.unit.sinks.test_trace_context import (
    CALLER,
    CALLER_SPAN,
    CALLER_TRACE,
    Telemetry,
    asking_agent,
    ids_of,
    parent_of,
    turn_spans,
)

pytestmark = [pytest.mark.redis]


@pytest.mark.parametrize("caller", [None, CALLER], ids=["minted", "caller"])
async def test_a_pause_on_one_host_and_its_resume_on_another_share_one_trace(
    redis_url: str, caller: str | None
) -> None:
    """Host A: turn start to the ask; host B: the resume, the tool, the answer.
    All spans share the recorded trace id; each host's ``invoke_agent`` is a
    child of the recorded context: the caller's span, or, minted, the turn's
    own span, which takes the minted ids as the trace's root (issue 26)."""
    store_a, store_b = open_event_store(redis_url), open_event_store(redis_url)
    host_a, host_b = Telemetry(), Telemetry()
    try:
        a = asking_agent(host_a.sink, store=store_a)
        out = await a.run("refund 7", traceparent=caller)
        assert isinstance(out, AskPause)
        b = asking_agent(host_b.sink, store=store_b, resuming=True)
        answer = await b.resume(out.checkpoint.to_json(), check_in_approved("dana"))
        assert "Refunded." == answer
        events = [r.decode() for r in await store_b.read(out.checkpoint.session_id)]
    finally:
        await store_a.close()
        await store_b.close()
    (started,) = [e for e in events if isinstance(e, TurnStarted)]
    (resumed,) = [e for e in events if isinstance(e, PauseResumed)]
    assert started.traceparent == resumed.traceparent
    _, trace_id, parent_id, _ = started.traceparent.split("-")
    if caller is not None:
        assert (CALLER_TRACE, CALLER_SPAN) == (trace_id, parent_id)
    assert {trace_id} == host_a.trace_ids() == host_b.trace_ids()
    (first,) = turn_spans(host_a.finished())
    (continuation,) = turn_spans(host_b.finished())
    if caller is not None:
        assert (trace_id, parent_id) == parent_of(first) == parent_of(continuation)
    else:
        assert first.parent is None
        assert (trace_id, parent_id) == ids_of(first) == parent_of(continuation)
    assert ["chat m", "execute_tool refund", "invoke_agent helmlog"] == sorted(
        s.name for s in host_a.finished()
    )
    children = sorted(
        s.name
        for s in host_b.finished()
        if s.parent is not None and s.parent.span_id == continuation.context.span_id
    )
    assert ["chat m", "execute_tool refund"] == children
    # Replayed afterwards, the whole stream lands in the same trace.
    later = Telemetry()
    stored = open_event_store(redis_url)
    try:
        await replay(await stored.read(out.checkpoint.session_id), later.sink)
    finally:
        await stored.close()
    assert {trace_id} == later.trace_ids()
