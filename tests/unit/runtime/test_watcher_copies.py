"""Who is handed copies: a watcher that may change events, never a readonly one (G84).

An event's containers (a tool's arguments, a message) are the folded
session's own. Every ``on()`` callback and every watcher that does not
declare ``readonly = True`` is handed an equal copy sharing none of them; a
``readonly`` watcher is handed the session's own frozen events, and when every
subscriber is readonly no copy is made at all.
"""

from __future__ import annotations

from typing import Any

from helmlog import Agent, tool
from helmlog.events import MessageCommitted, ToolStarted
from helmlog.runtime.providers import scripted

from .helpers import call, calls

RAN: list[int] = []


@tool
def refund(order: int, amount: int) -> str:
    """Refund an order."""
    RAN.append(amount)
    return f"refunded {amount}"


class Keep:
    """A watcher that keeps what it is handed."""

    def __init__(self, *, readonly: bool) -> None:
        self.readonly = readonly
        self.events: list[Any] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def _agent(*watchers: Any) -> Agent:
    model = scripted([calls(call("c1", "refund", order=1, amount=5)), "done"])
    return Agent.create(provider=model, model="m").tool(refund).watch(*watchers).build()


async def test_g84_readonly_watchers_share_the_events_and_no_copy_is_made() -> None:
    """G84: two readonly watchers are handed one and the same event object."""
    first, second = Keep(readonly=True), Keep(readonly=True)
    assert "done" == await _agent(first, second).run("refund")
    assert len(first.events) == len(second.events)
    assert all(a is b for a, b in zip(first.events, second.events, strict=True))
    (started,) = first.of(ToolStarted)
    assert {"order": 1, "amount": 5} == started.args


async def test_g84_a_watcher_that_may_change_events_is_handed_equal_copies() -> None:
    """G84: beside a readonly watcher, a plain one gets equal, separate containers."""
    reader, plain = Keep(readonly=True), Keep(readonly=False)
    assert "done" == await _agent(reader, plain).run("refund")
    assert reader.events == plain.events
    (shared,), (copied,) = reader.of(ToolStarted), plain.of(ToolStarted)
    assert shared.args is not copied.args
    committed = [m.message for m in reader.of(MessageCommitted)]
    copies = [m.message for m in plain.of(MessageCommitted)]
    assert all(a is not b for a, b in zip(committed, copies, strict=True))


async def test_g84_a_callback_changing_its_copy_never_steers_beside_readonly_ones() -> (
    None
):
    """G84: an ``on()`` callback that rewrites arguments changes nothing, even
    when the other subscribers take the session's own events."""
    RAN.clear()
    reader = Keep(readonly=True)
    agent = _agent(reader)

    def meddle(event: Any) -> None:
        if isinstance(event, ToolStarted):
            event.args["amount"] = 999

    agent.on("*", meddle)
    assert "done" == await agent.run("refund")
    assert [5] == RAN
    (started,) = reader.of(ToolStarted)
    assert {"order": 1, "amount": 5} == started.args
