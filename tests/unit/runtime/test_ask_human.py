"""ask_human: a tool asks a person, and the person's answer becomes its result.

Pattern: behavioural tests with tools that call ``ask_human`` (plain and async,
         with and without an ``except Exception`` around it) and links that
         record what the after-tool walk saw.
Role:    unit tests for ``helmlog.ask_human`` and resuming its pause.
Emits:   nothing.

Laws: G69 (a tool can ask a person: the run pauses with ``kind="ask-human"``,
the tool is never returned to, and ``ask_human`` outside a running tool is a
``RuntimeError``), G70 (the answer becomes the result: any value but ``None``,
the tool is not re-entered, the after-tool walk decides what history holds,
``stream.tool_end`` reports the answer as given).

Why a tool that catches ``Exception``: that is how real tools are written, and
the pause must survive it.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import (
    Agent,
    AskPause,
    Checkpoint,
    DecisionRequiredError,
    MiddlewareAsk,
    ToolMiddleware,
    allow,
    ask_human,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids


class Desk:
    """Tools that ask a person, counting how often they were entered."""

    def __init__(self) -> None:
        self.entered = 0
        self.after_ask = 0

    def make(self, *, catch: bool = False, is_async: bool = False) -> Any:
        desk = self

        def body(city: str) -> str:
            desk.entered += 1
            if catch:
                try:
                    ask_human(f"Which airport in {city}?", {"city": city})
                except Exception:  # noqa: BLE001 (G69: the tool tries to swallow it)
                    return "swallowed"
            else:
                ask_human(f"Which airport in {city}?", {"city": city})
            desk.after_ask += 1
            return "unreachable"

        if is_async:

            async def book(city: str) -> str:
                """Book a flight."""
                return body(city)

        else:

            def book(city: str) -> str:
                """Book a flight."""
                return body(city)

        return tool(book)


def book_call(city: str = "Paris") -> Reply:
    return Reply(
        tool_calls=[ToolCallRequest(id="c1", name="book", args={"city": city})]
    )


def build(model: Any, book: Any, *links: Any) -> Agent:
    builder = (
        Agent.create(
            provider=model, model="m", ids=counter_ids(), store=MemoryEventStore()
        )
        .system("You book.")
        .tool(book)
    )
    if links:
        builder = builder.tool_middleware(*links)
    return builder.build()


class Tape:
    def __init__(self, agent: Agent) -> None:
        self.events: list[Any] = []
        agent.on("*", self.events.append)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def tool_reads(model: Any) -> list[str]:
    return [m.content for m in model.requests[-1].messages if m.role == "tool"]


# -- G69 ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("catch", "is_async"), [(False, False), (True, False), (False, True), (True, True)]
)
async def test_g69_ask_human_pauses_and_never_returns_to_the_tool(
    catch: bool, is_async: bool
) -> None:
    """G69: run() returns an ask-human AskPause; except Exception cannot swallow it."""
    desk = Desk()
    agent = build(scripted([book_call()]), desk.make(catch=catch, is_async=is_async))
    out = await agent.run("book me to Paris")
    assert isinstance(out, AskPause)
    assert ("ask-human", "book", "c1") == (out.kind, out.tool_name, out.tool_call_id)
    assert (
        MiddlewareAsk("Which airport in Paris?", {"city": "Paris"}, None, None)
        == out.ask
    )
    assert (1, 0) == (desk.entered, desk.after_ask)
    assert Checkpoint.from_json(out.checkpoint.to_json()) == out.checkpoint


async def test_g69_before_tool_rows_are_filed_before_the_pause() -> None:
    """G69: the call's before-tool rows are filed, then one pause.request."""
    desk = Desk()
    ok = ToolMiddleware(name="policy", on_tool_call=lambda c: allow(None, "looked"))
    agent = build(scripted([book_call()]), desk.make(), ok)
    tape = Tape(agent)
    await agent.run("book me to Paris")
    rows = agent.last_snapshot().middleware_decisions
    assert [("policy", "before-tool", "allow", "looked")] == [
        (r.middleware, r.moment, r.outcome, r.why) for r in rows
    ]
    requests = tape.of("pause.request")
    assert [("ask-human", None, "Which airport in Paris?")] == [
        (p.kind, p.middleware, p.question) for p in requests
    ]
    assert [e.type for e in tape.events].index("middleware.decision") < [
        e.type for e in tape.events
    ].index("pause.request")


def test_g69_ask_human_outside_a_running_tool_is_a_runtime_error() -> None:
    """G69: called anywhere but inside a running tool, ask_human raises RuntimeError."""
    with pytest.raises(RuntimeError):
        ask_human("Which airport?")


async def test_g69_ask_human_inside_a_link_is_not_inside_a_tool() -> None:
    """G69/G7: a link that calls ask_human raised, so its call is denied."""

    def sneaky(c: Any) -> Any:
        ask_human("may I?")

    desk = Desk()
    model = scripted([book_call(), "Could not."])
    agent = build(
        model, desk.make(), ToolMiddleware(name="sneaky", on_tool_call=sneaky)
    )
    assert "Could not." == await agent.run("book")
    rows = agent.last_snapshot().middleware_decisions
    assert [("sneaky", "deny")] == [(r.middleware, r.outcome) for r in rows]
    assert rows[0].why is not None
    assert rows[0].why.startswith("middleware 'sneaky' threw: ")
    assert 0 == desk.entered


# -- G70 ----------------------------------------------------------------------


async def test_g70_none_is_not_an_answer() -> None:
    """G70: resume(cp, None) raises DecisionRequiredError(gate="ask-human")."""
    desk = Desk()
    agent = build(scripted([book_call(), "Booked."]), desk.make())
    out = await agent.run("book")
    assert is_ask_pause(out)
    with pytest.raises(DecisionRequiredError) as caught:
        await agent.resume(out.checkpoint, None)
    assert (
        "ask-human",
        "nothing",
        "book",
    ) == (caught.value.gate, caught.value.received, caught.value.tool_name)
    assert "Booked." == await agent.resume(out.checkpoint, "CDG")


@pytest.mark.parametrize(
    ("answer", "reads"),
    [
        ("CDG", "CDG"),
        ("", ""),
        (0, "0"),
        (False, "false"),
        ({"airport": "CDG", "terminal": 2}, '{"airport":"CDG","terminal":2}'),
        (["CDG", "ORY"], '["CDG","ORY"]'),
    ],
)
async def test_g70_the_answer_becomes_the_result(answer: Any, reads: str) -> None:
    """G70: any value but None is the result; the tool is not re-entered; no row."""
    desk = Desk()
    model = scripted([book_call(), "Booked."])
    agent = build(model, desk.make())
    tape = Tape(agent)
    out = await agent.run("book")
    assert is_ask_pause(out)
    assert "Booked." == await agent.resume(out.checkpoint, answer)
    assert (1, 0) == (desk.entered, desk.after_ask)
    assert [reads] == tool_reads(model)
    assert () == agent.last_snapshot().middleware_decisions
    ends = tape.of("stream.tool_end")
    assert [("c1", answer, False)] == [
        (e.tool_call_id, e.result, e.error) for e in ends
    ]
    assert 1 == len(tape.of("pause.resume"))


async def test_g70_the_after_tool_walk_decides_what_history_holds() -> None:
    """G70: after-tool sees the answer, error=False and the running args."""
    seen: list[tuple[Any, Any, bool]] = []

    def upper(r: Any) -> Any:
        seen.append((r.args, r.result, r.error))
        return allow(r.result.upper(), "codes are upper case")

    desk = Desk()
    to_paris = ToolMiddleware(
        name="to-paris",
        on_tool_call=lambda c: allow({"city": "Paris"}, "we only fly there"),
    )
    model = scripted([book_call("Lyon"), "Booked."])
    agent = build(
        model, desk.make(), to_paris, ToolMiddleware(name="upper", on_tool_result=upper)
    )
    tape = Tape(agent)
    out = await agent.run("book")
    assert isinstance(out, AskPause)
    assert "Which airport in Paris?" == out.ask.question
    await agent.resume(out.checkpoint, "cdg")
    assert [({"city": "Paris"}, "cdg", False)] == seen
    assert ["CDG"] == tool_reads(model)
    assert ["cdg"] == [e.result for e in tape.of("stream.tool_end")]
    last = agent.last_snapshot().middleware_decisions[-1]
    assert (
        "upper",
        "after-tool",
        True,
        "cdg",
        "CDG",
    ) == (last.middleware, last.moment, last.changed, last.before, last.after)


async def test_g70_an_after_tool_denial_hides_the_answer() -> None:
    """G70: an after-tool denial decides history: the model reads the reason."""
    desk = Desk()
    hide = ToolMiddleware(
        name="hide", on_tool_result=lambda r: deny("airport withheld")
    )
    model = scripted([book_call(), "Booked."])
    agent = build(model, desk.make(), hide)
    out = await agent.run("book")
    assert is_ask_pause(out)
    await agent.resume(out.checkpoint, "CDG")
    assert ["airport withheld"] == tool_reads(model)
