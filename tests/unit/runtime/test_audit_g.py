"""An audit of SPEC section G: one test per departure found between a law and the code.

Pattern: each test drives the smallest run that shows the departure and
         asserts the law's observable outcome (what a tool ran with, the
         ledger, the stored stream, the exception type).
Role:    unit tests for SPEC G laws that the per-section suites left uncovered.
Emits:   nothing.

Laws: G60 (resume continues from exactly the recorded state), G75 (``.act()``
is sugar, exactly: every ``before_tool`` entry is attached), G84 (watching
never steers), G85 (a non-``str`` field name raises ``ValueError``), G91
(a ``CheckpointError`` raised before anything runs emits nothing).

Why an audit file of its own: these are edge cases of laws whose main
behaviour the section suites already pin; keeping them together records what
the audit found.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import (
    Agent,
    CheckpointError,
    RedactionPolicy,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    is_ask_pause,
    tool,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import scripted

from .helpers import call, calls, stored_types

RAN: list[int] = []


@tool
def refund(order: int, amount: int) -> str:
    """Refund an order."""
    RAN.append(amount)
    return f"refunded {amount}"


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


async def test_g84_a_listener_mutating_an_event_never_steers_the_run() -> None:
    """G84: a listener ... never changes a run."""
    model = scripted(
        [
            calls(
                call("c1", "refund", order=1, amount=5),
                call("c2", "refund", order=2, amount=6),
            ),
            "done",
        ]
    )
    agent = Agent.create(provider=model, model="m").tool(refund).build()

    def meddle(event: Any) -> None:
        if event.type == "message.committed":
            for proposed in event.message.tool_calls:
                proposed.args["amount"] = 999

    agent.on("*", meddle)
    assert "done" == await agent.run("refund both")
    assert [5, 6] == RAN
    assert [{"order": 1, "amount": 5}, {"order": 2, "amount": 6}] == [
        c.args for c in model.requests[-1].messages[1].tool_calls
    ]


async def test_g60_resume_runs_the_recorded_arguments_whatever_a_listener_mutates() -> (
    None
):
    """G60: resume continues from exactly that state."""
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    agent = (
        Agent.create(
            provider=scripted([calls(call("c1", "refund", order=1, amount=5)), "done"]),
            model="m",
        )
        .tool(refund)
        .tool_middleware(four_eyes)
        .build()
    )

    def meddle(event: Any) -> None:
        if event.type == "pause.request":
            event.args["amount"] = 777

    agent.on("*", meddle)
    paused = await agent.run("refund")
    assert is_ask_pause(paused)
    assert "done" == await agent.resume(paused.checkpoint, check_in_approved(by="d"))
    assert [5] == RAN


async def test_g75_every_before_tool_entry_is_attached_as_through_the_doors() -> None:
    """G75: "the `before_tool` entries, then the `after_tool` entries ..."."""
    twice = ToolMiddleware(name="twice", on_tool_call=lambda c: allow())

    async def rows(use_act: bool) -> list[tuple[str, str]]:
        builder = Agent.create(
            provider=scripted([calls(call("c1", "refund", order=1, amount=5)), "done"]),
            model="m",
        ).tool(refund)
        if use_act:
            builder = builder.act(before_tool=[twice, twice])
        else:
            builder = builder.tool_middleware(twice, twice)
        agent = builder.build()
        await agent.run("refund")
        return [
            (r.middleware, r.moment) for r in agent.last_snapshot().middleware_decisions
        ]

    assert await rows(use_act=False) == await rows(use_act=True)


@pytest.mark.parametrize("name", [["content"], {"why"}])
def test_g85_an_unhashable_non_str_name_raises_value_error(name: Any) -> None:
    """G85: a non-`str` name ... raises `ValueError` at construction."""
    with pytest.raises(ValueError, match="field names must be str"):
        RedactionPolicy([name])


async def test_g91_a_checkpoint_refused_on_resume_emits_nothing() -> None:
    """G91: refusals raised before anything runs (`CheckpointError`) emit nothing."""
    store = MemoryEventStore()
    four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
    first = (
        Agent.create(
            provider=scripted([calls(call("c1", "refund", order=1, amount=5)), "done"]),
            model="m",
            store=store,
        )
        .tool(refund)
        .tool_middleware(four_eyes)
        .build()
    )
    paused = await first.run("refund")
    assert is_ask_pause(paused)
    before = await stored_types(first)
    toolless = (
        Agent.create(provider=scripted(["done"]), model="m", store=store)
        .tool_middleware(four_eyes)
        .build()
    )
    seen: list[str] = []
    toolless.on("*", lambda e: seen.append(e.type))
    with pytest.raises(CheckpointError):
        await toolless.resume(paused.checkpoint, check_in_approved(by="d"))
    assert ([], before) == (seen, await stored_types(first))
