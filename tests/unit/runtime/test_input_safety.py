"""Resume refuses bad input with typed errors: no assert guards stored data.

Pattern: a paused refund run, then ``resume`` handed random, mutated and deep
         checkpoints, and the same pause re-recorded with its stored events
         mutated (a re-sealed, chain-valid stream); only helmlog's typed
         errors, or a genuine resume, are accepted.
Role:    unit tests for the agent's resume path (issue 8 item 7).
Emits:   nothing.

Laws: R9 (a refusal comes before any append), R14, G91; issue 8 item 7 (a
stored ask pause with ``middleware: null`` is ``CheckpointError("tampered")``,
not an ``AssertionError``; the fuzz accepts only typed errors).

Why the stream is re-sealed after each mutation: a stream whose hashes do not
verify may be refused for that alone; re-sealing makes the mutated values
reach the resume checks themselves, as they would for a writer holding the
chain key, or an older writer that stored a bad value.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog import (
    Agent,
    AskPause,
    Checkpoint,
    CheckpointError,
    HelmlogError,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
)
from helmlog.events import MemoryEventStore, StoredEvent, fold
from helmlog.events.lowlevel import hash_bytes
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}
DEEP = 1_000

_scalar = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_json = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def build(store: MemoryEventStore, ran: list[Any]) -> Agent:
    def refund(order: int, amount: float) -> str:
        ran.append((order, amount))
        return f"refunded {amount} on {order}"

    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(
                        id="c1", name="refund", args={"order": 7, "amount": 900}
                    )
                ]
            ),
            "Refunded.",
            "Again.",
        ]
    )
    four_eyes = ToolMiddleware(
        name="four-eyes", on_tool_call=lambda c: ask("Approve this refund?")
    )
    after = ToolMiddleware(name="after", on_tool_call=lambda c: allow())
    return (
        Agent.create(provider=model, model="m", ids=counter_ids(), store=store)
        .tool(Tool("refund", "Refund an order.", SCHEMA, refund))
        .tool_middleware(four_eyes, after)
        .build()
    )


async def paused() -> tuple[Agent, MemoryEventStore, AskPause, list[Any]]:
    store = MemoryEventStore()
    ran: list[Any] = []
    agent = build(store, ran)
    out = await agent.run("refund order 7")
    assert isinstance(out, AskPause)
    return agent, store, out, ran


def reseal(bodies: list[dict[str, Any]]) -> list[StoredEvent]:
    """A chain-valid stream of these (possibly mutated) bodies.

    A value ``"@deep@"`` becomes an array nested ``DEEP`` levels (built as
    text: Python's json module itself recurses once per level).
    """
    records, prev = [], ""
    nest = ("[" * DEEP + "]" * DEEP).encode()
    for seq, body in enumerate(bodies, start=1):
        data = json.dumps(
            {**body, "seq": seq, "prev_hash": prev}, separators=(",", ":")
        ).encode()
        data = data.replace(b'"@deep@"', nest)
        prev = hash_bytes(data)
        records.append(StoredEvent(seq=seq, data=data, hash=prev))
    return records


async def resume_typed(agent: Agent, checkpoint: Any) -> None:
    """Resume; anything but a helmlog error (or an answer/pause) fails."""
    with contextlib.suppress(HelmlogError):
        await agent.resume(checkpoint, check_in_approved(by="dana"))


async def test_item7_a_stored_ask_without_middleware_is_tampered() -> None:
    """Issue 8 item 7: ``middleware: null`` on a stored ask pause is tampered."""
    _agent, store, out, ran = await paused()
    sid = out.checkpoint.session_id
    bodies = [json.loads(r.data) for r in await store.read(sid)]
    for body in bodies:
        if body["type"] == "pause.request":
            body["middleware"] = None
    forged = MemoryEventStore()
    await forged.append_sealed(sid, reseal(bodies), 0)
    other = build(forged, ran)
    before = await forged.read(sid)
    with pytest.raises(CheckpointError) as caught:
        await other.resume(out.checkpoint, check_in_approved(by="dana"))
    assert "tampered" == caught.value.reason
    assert before == await forged.read(sid)
    assert [] == ran


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "sideways"},
        {"link_index": 7},
        {"link_index": -1},
        {"middleware": "after"},
        {"tool_name": "wire_money"},
    ],
    ids=["kind", "link-out-of-range", "link-negative", "wrong-link", "tool"],
)
async def test_item7_a_stored_pause_the_agent_does_not_hold_is_tampered(
    change: dict[str, Any],
) -> None:
    """A stored pause naming another kind, link or tool is refused, typed."""
    _agent, store, out, ran = await paused()
    sid = out.checkpoint.session_id
    bodies = [json.loads(r.data) for r in await store.read(sid)]
    for body in bodies:
        if body["type"] == "pause.request":
            body.update(change)
    forged = MemoryEventStore()
    await forged.append_sealed(sid, reseal(bodies), 0)
    other = build(forged, ran)
    cp = await other_fold(forged, sid)
    assert cp is not None
    with pytest.raises(CheckpointError) as caught:
        await other.resume(cp, check_in_approved(by="dana"))
    assert "tampered" == caught.value.reason
    assert [] == ran


async def other_fold(store: MemoryEventStore, sid: str) -> Checkpoint | None:
    """The checkpoint the stored stream folds to."""
    return fold(r.decode() for r in await store.read(sid)).checkpoint


# -- fuzz -------------------------------------------------------------------


@st.composite
def checkpoint_texts(draw: Any) -> str:
    """Random JSON, deep nesting, or the genuine checkpoint with one change."""
    how = draw(st.sampled_from(["random", "deep", "field", "drop", "flip"]))
    if how == "random":
        return json.dumps(draw(_json))
    if how == "deep":
        depth = draw(st.integers(1, DEEP))
        return "[" * depth + "]" * depth
    return how


@settings(max_examples=1_000, deadline=None)
@given(text=checkpoint_texts(), value=_json, at=st.integers(0, 10_000))
def test_item7_fuzz_resume_accepts_only_typed_errors(
    text: str, value: Any, at: int
) -> None:
    """Random, deep and mutated checkpoints: resume answers or raises typed, on
    the store that holds the session and on one that would import it."""

    async def go() -> None:
        agent, _store, out, _ran = await paused()
        genuine = out.checkpoint.to_json()
        body = json.loads(genuine)
        key = sorted(body)[at % len(body)]
        if text == "field":
            body[key] = value
            cp = json.dumps(body)
        elif text == "drop":
            body.pop(key)
            cp = json.dumps(body)
        elif text == "flip":
            i = at % len(genuine)
            cp = genuine[:i] + chr(33 + at % 90) + genuine[i + 1 :]
        else:
            cp = text
        await resume_typed(agent, cp)
        # The import path: the same text on a store that lacks the session.
        await resume_typed(build(MemoryEventStore(), []), cp)

    asyncio.run(go())


@settings(max_examples=1_000, deadline=None)
@given(value=_json, at=st.integers(0, 10_000), deep=st.booleans())
def test_item7_fuzz_resume_over_mutated_stored_events_is_typed(
    value: Any, at: int, deep: bool
) -> None:
    """A re-sealed stream with one stored field changed: resume stays typed."""

    async def go() -> None:
        _agent, store, out, ran = await paused()
        sid = out.checkpoint.session_id
        bodies = [json.loads(r.data) for r in await store.read(sid)]
        target = bodies[at % len(bodies)]
        # The envelope's seq, prev_hash and session_id place an event in its
        # stream; an event naming another session is stream verification's
        # to refuse (R19), not resume's.
        placed = ("seq", "prev_hash", "session_id")
        keys = sorted(k for k in target if k not in placed)
        key = keys[(at // len(bodies)) % len(keys)]
        target[key] = "@deep@" if deep else value
        records = reseal(bodies)
        forged = MemoryEventStore()
        try:
            await forged.append_sealed(sid, records, 0)
        except HelmlogError:
            return  # the store refused the bytes, typed: nothing to resume
        other = build(forged, ran)
        try:
            folded = await other_fold(forged, sid)
        except HelmlogError:
            folded = None
        await resume_typed(other, out.checkpoint)
        if folded is not None:
            await resume_typed(build(forged, ran), folded)

    asyncio.run(go())
