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


class Stream:
    """A readonly watcher that checks seqs rise, and may raise or await."""

    readonly = True

    def __init__(
        self, *, raise_on: str | None = None, asynchronous: bool = False
    ) -> None:
        self.raise_on = raise_on
        self.asynchronous = asynchronous
        self.types: list[str] = []
        self.seqs: list[int] = []

    def on_event(self, event: Any) -> Any:
        if self.asynchronous:
            return self._later(event)
        self._take(event)
        return None

    async def _later(self, event: Any) -> None:
        self._take(event)

    def _take(self, event: Any) -> None:
        self.types.append(event.type)
        if event.seq is not None:
            self.seqs.append(event.seq)
        if event.type == self.raise_on:
            raise RuntimeError("a sink failed")


async def test_g84_a_lone_readonly_watcher_sees_every_event_in_order() -> None:
    """G84: one readonly watcher, called straight, sees the stream in seq order;
    one that raises on an event still sees every later one."""
    plain, failing = Stream(), Stream(raise_on="tool.dispatched")
    assert "done" == await _agent(plain).run("refund")
    assert "done" == await _agent(failing).run("refund")
    assert plain.seqs == sorted(plain.seqs)
    assert plain.types == failing.types
    assert "agent.turn_end" == plain.types[-1]


async def test_g84_an_async_lone_readonly_watcher_is_queued_in_order() -> None:
    """G84: an async readonly watcher is not awaited by the run, yet sees every
    event in stream order once the agent is idle."""
    plain, later = Stream(), Stream(asynchronous=True)
    assert "done" == await _agent(plain).run("refund")
    agent = _agent(later)
    assert "done" == await agent.run("refund")
    await agent.idle()
    assert plain.types == later.types
    assert later.seqs == sorted(later.seqs)
