"""The window moment: what of the history the model is sent, and the record it files.

Pattern: behavioural tests over multi-turn scripted conversations, comparing
         what the model was sent with the full history, plus direct tests of a
         strategy's pure ``plan`` for shapes a live loop rarely reaches.
Role:    unit tests for ``sliding_window``, ``.window()``/``.act(window=...)``
         and ``window.compacted``.
Emits:   nothing.

Laws: G79 (one strategy per agent; the doors' and ``sliding_window``'s
argument errors), G80 (the window files its own record, never a row), G81
(what a sliding window does: engages only above N turns, changes only what the
model is sent, never removes the current request or splits a tool call from
its results, makes no model call; one that never engages changes nothing).

Why the pairing check walks every request: "never a tool call apart from its
results" must hold at every iteration, not only the one a test happens to
look at.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import (
    Agent,
    AgentBuildError,
    Message,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    sliding_window,
    tool,
)
from helmlog.events import MemoryEventStore, WindowCompacted, WindowRefusal
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} shipped"


def lookup_round(cid: str, order: int) -> Reply:
    return Reply(
        tool_calls=[ToolCallRequest(id=cid, name="lookup", args={"order": order})]
    )


def builder(model: Any, store: MemoryEventStore | None = None) -> Any:
    return (
        Agent.create(
            provider=model,
            model="m",
            ids=counter_ids(),
            store=store or MemoryEventStore(),
        )
        .system("You look orders up.")
        .tool(lookup)
    )


class Tape:
    def __init__(self, agent: Agent) -> None:
        self.events: list[Any] = []
        agent.on("*", self.events.append)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def assert_calls_travel_with_results(messages: tuple[Message, ...]) -> None:
    """Every tool message follows its call's turn, and every call has its results."""
    proposed: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            proposed.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            assert m.tool_call_id in proposed, m
            answered.add(m.tool_call_id or "")
    assert proposed == answered


async def conversation(agent: Agent) -> None:
    """Four turns, two of them with a tool round."""
    await agent.run("first question")
    await agent.follow_up("look up order 1")
    await agent.follow_up("third question")
    await agent.follow_up("look up order 2")


def script() -> list[Any]:
    return [
        "first answer",
        lookup_round("c1", 1),
        "order 1 shipped",
        "third answer",
        lookup_round("c2", 2),
        "order 2 shipped",
    ]


# -- G79 ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "door"),
    [
        ("window", "window", ".window()"),
        ("window", "act", ".window()"),
        ("act", "window", ".act(window=...)"),
    ],
)
def test_g79_a_second_strategy_through_either_door_is_refused(
    first: str, second: str, door: str
) -> None:
    """G79: a second strategy raises AgentBuildError naming the first and its door."""
    b = builder(scripted(["x"]))

    def set_window(how: str) -> Any:
        strategy = sliding_window(keep_recent_turns=3)
        return b.window(strategy) if how == "window" else b.act(window=strategy)

    set_window(first)
    with pytest.raises(AgentBuildError) as caught:
        set_window(second)
    assert f"already has a window strategy ('sliding-window'), set by {door}" in str(
        caught.value
    )


class NoPlan:
    name = "no-plan"


class Blank:
    name = ""

    def plan(self, messages: Any, **_: Any) -> Any:
        raise AssertionError("never called")


@pytest.mark.parametrize(
    "strategy", [sliding_window, NoPlan(), Blank(), None, "sliding"]
)
def test_g79_window_refuses_what_is_not_a_strategy(strategy: Any) -> None:
    """G79: .window() refuses anything without a name and a plan, factories too."""
    b = builder(scripted(["x"]))
    with pytest.raises(AgentBuildError):
        b.window(strategy)
    b.window(sliding_window(keep_recent_turns=2))


def test_g79_sliding_window_requires_keep_recent_turns() -> None:
    """G79: sliding_window() without keep_recent_turns raises ValueError."""
    with pytest.raises(ValueError, match="keep_recent_turns is required"):
        sliding_window()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", None, True])
def test_g79_keep_recent_turns_must_be_an_int_at_least_one(bad: Any) -> None:
    """G79: a value that is not an int >= 1 raises ValueError with the law's text."""
    with pytest.raises(ValueError, match="keep_recent_turns must be an integer >= 1"):
        sliding_window(keep_recent_turns=bad)


# -- G80 ----------------------------------------------------------------------


async def test_g80_an_engaged_visit_files_one_exact_record() -> None:
    """G80: a window.compacted record with the law's fields, in window_records."""
    model = scripted(["first answer", "second answer"])
    agent = builder(model).window(sliding_window(keep_recent_turns=1)).build()
    tape = Tape(agent)
    await agent.run("aa")
    assert () == agent.last_snapshot().window_records
    await agent.follow_up("bbbb")
    records = agent.last_snapshot().window_records
    expected = (
        "sliding-window",
        1,
        1,
        2,
        len("aa") + len("first answer") + len("bbbb"),
        len("bbbb"),
        3,
        1,
        (),
        (),
    )
    assert [expected] == [
        (
            r.strategy,
            r.iteration,
            r.keep_recent_turns,
            r.removed_message_count,
            r.window_chars_before,
            r.window_chars_after,
            r.turns_before,
            r.turns_after,
            r.refusals,
            r.dropped_observations,
        )
        for r in records
    ]
    assert ["window.compacted"] == [e.type for e in tape.of("window.compacted")]
    assert (Message(role="user", content="bbbb"),) == model.requests[1].messages


async def test_g80_the_window_runs_before_the_model_call_of_its_iteration() -> None:
    """G80: the record is filed before that iteration's stream.llm_start."""
    agent = (
        builder(scripted(["a", lookup_round("c1", 1), "done"]))
        .window(sliding_window(keep_recent_turns=1))
        .build()
    )
    await agent.run("one")
    tape = Tape(agent)
    await agent.follow_up("two")
    types = tape.types()
    for record in tape.of("window.compacted"):
        at = tape.events.index(record)
        assert "stream.llm_start" == types[at + 1]
        assert tape.events[at + 1].iteration == record.iteration
    assert [1, 2] == [r.iteration for r in tape.of("window.compacted")]


async def test_g80_the_window_never_files_a_row() -> None:
    """G80: with links and a window engaged, no row has moment="window"."""
    agent = (
        builder(scripted(script()))
        .window(sliding_window(keep_recent_turns=1))
        .tool_middleware(ToolMiddleware(name="t", on_tool_call=lambda c: allow()))
        .message_middleware(MessageMiddleware(name="m", on_message=lambda m: allow()))
        .build()
    )
    tape = Tape(agent)
    await conversation(agent)
    rows = agent.last_snapshot().middleware_decisions
    assert agent.last_snapshot().window_records != ()
    assert ["before-tool", "input", "output"] == sorted({r.moment for r in rows})
    assert {
        "before-tool",
        "input",
        "output",
    } == {f.moment for f in tape.of("middleware.decision")}


async def test_g80_a_visit_that_does_not_engage_files_nothing() -> None:
    """G80: at or below N turns no record is filed."""
    agent = (
        builder(scripted(script())).window(sliding_window(keep_recent_turns=50)).build()
    )
    tape = Tape(agent)
    await conversation(agent)
    assert () == agent.last_snapshot().window_records
    assert [] == tape.of("window.compacted")


# -- G81 ----------------------------------------------------------------------


async def test_g81_never_engaging_sends_the_same_requests_as_no_window() -> None:
    """G81: a strategy that never engages sends the same requests as none."""
    plain, windowed = scripted(script()), scripted(script())
    await conversation(builder(plain).build())
    await conversation(
        builder(windowed).window(sliding_window(keep_recent_turns=50)).build()
    )
    assert windowed.requests == plain.requests


@pytest.mark.parametrize("keep", [1, 2, 3])
async def test_g81_history_checkpoints_and_stream_keep_every_message(keep: int) -> None:
    """G81: the window changes only what the model is sent."""
    store_plain, store_windowed = MemoryEventStore(), MemoryEventStore()
    plain = builder(scripted(script()), store_plain).build()
    windowed = (
        builder(scripted(script()), store_windowed)
        .window(sliding_window(keep_recent_turns=keep))
        .build()
    )
    await conversation(plain)
    await conversation(windowed)
    assert windowed.last_snapshot().history == plain.last_snapshot().history
    kept, full = windowed.checkpoint(), plain.checkpoint()
    assert kept is not None
    assert full is not None
    assert (kept.history, kept.original_input) == (full.history, full.original_input)
    committed = []
    for store, agent in ((store_plain, plain), (store_windowed, windowed)):
        records = await store.read(agent.session_id or "")
        committed.append(
            [
                r.decode().message
                for r in records
                if r.decode().type == "message.committed"
            ]
        )
    assert committed[0] == committed[1]
    assert 12 == len(windowed.last_snapshot().history)


@pytest.mark.parametrize("keep", [1, 2, 3, 4])
async def test_g81_never_splits_a_tool_call_from_its_results(keep: int) -> None:
    """G81: every request keeps each tool call together with its results."""
    model = scripted(script())
    agent = builder(model).window(sliding_window(keep_recent_turns=keep)).build()
    await conversation(agent)
    assert 6 == len(model.requests)
    for request in model.requests:
        assert_calls_travel_with_results(request.messages)
        assert request.messages[-1].role in ("user", "tool")


async def test_g81_the_current_request_is_never_removed() -> None:
    """G81: after a tool round the current user message stays, with a refusal record."""
    model = scripted(["first answer", lookup_round("c1", 1), "done"])
    agent = builder(model).window(sliding_window(keep_recent_turns=1)).build()
    await agent.run("one")
    await agent.follow_up("look up 1")
    second_call = model.requests[-1].messages
    assert Message(role="user", content="look up 1") == second_call[0]
    assert ["user", "assistant", "tool"] == [m.role for m in second_call]
    last = agent.last_snapshot().window_records[-1]
    assert (
        2,
        (WindowRefusal(reason="current-request", turn_index=2, message_index=2),),
        2,
    ) == (last.iteration, last.refusals, last.removed_message_count)


async def test_g81_dropped_observations_name_the_tools_whose_results_left() -> None:
    """G81/G80: results that left the view are named in dropped_observations."""
    model = scripted(script())
    agent = builder(model).window(sliding_window(keep_recent_turns=1)).build()
    await conversation(agent)
    dropped = [r.dropped_observations for r in agent.last_snapshot().window_records]
    assert ("lookup",) in dropped
    assert all(m.tool_call_id != "c1" for m in model.requests[-1].messages)


def test_g81_plan_keeps_an_unresolved_tool_call_and_a_paused_one() -> None:
    """G81: plan() refuses to remove an unresolved or paused call's turn."""
    unresolved = (
        Message(role="user", content="q1"),
        Message(
            role="assistant",
            tool_calls=(ToolCallRequest(id="c1", name="lookup", args={"order": 1}),),
        ),
        Message(role="user", content="q2"),
        Message(role="assistant", content="a2"),
        Message(role="user", content="q3"),
    )
    plan = sliding_window(keep_recent_turns=1).plan(unresolved, iteration=3)
    assert ["", "q3"] == [m.content for m in plan.messages]
    assert isinstance(plan.record, WindowCompacted)
    assert (
        WindowRefusal(reason="unresolved-tool-call", turn_index=1, message_index=1),
    ) == plan.record.refusals
    paused = sliding_window(keep_recent_turns=1).plan(
        unresolved, iteration=3, paused_call_ids=frozenset({"c1"})
    )
    assert paused.record is not None
    assert ["paused-tool"] == [r.reason for r in paused.record.refusals]


def test_g81_plan_engages_only_above_n_turns() -> None:
    """G81: N turns or fewer: the messages pass unchanged and no record is made."""
    two_turns = (
        Message(role="user", content="q1"),
        Message(role="assistant", content="a1"),
    )
    plan = sliding_window(keep_recent_turns=2).plan(two_turns, iteration=1)
    assert (plan.messages, plan.record) == (two_turns, None)


async def test_g81_the_window_makes_no_model_call() -> None:
    """G81: one provider call per iteration, window or not."""
    model = scripted(script())
    agent = builder(model).window(sliding_window(keep_recent_turns=1)).build()
    tape = Tape(agent)
    await conversation(agent)
    assert len(model.requests) == len(tape.of("stream.llm_start")) == 6
