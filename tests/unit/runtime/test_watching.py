"""Watching: who hears a session's events, in what order, and that they never steer.

Pattern: twin runs. A run with a misbehaving watcher is compared with the same
         run without it (deterministic ids and clock), so "changes nothing" is
         an equality of stored bytes, answers and deliveries.
Role:    unit tests for SPEC G.15 (G82–G84): ``.watch()``, ``agent.attach()``,
         ``agent.on()``, unsubscribe, identity de-duplication, id collisions.
Emits:   nothing.

Laws: G82 (``.watch()`` is variadic and accumulates, attaches at build so the
first run is seen, delivers in hand-over order; ``attach`` and ``on`` return
unsubscribe callables), G83 (identity decides; two objects with one ``id``
are refused), G84 (watching never steers; failures are logged under the
``helmlog`` logger; async handlers are not awaited yet see events in order).

Why ``asyncio.wait_for`` around runs with a blocked async watcher: if the run
awaited its watchers, the test would otherwise hang until the suite timeout.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helmlog import (
    Agent,
    AgentBuildError,
    ToolMiddleware,
    allow,
    deny,
    tool,
)
from helmlog.events import encode_event
from helmlog.runtime.providers import scripted
from helmlog.runtime.testing import counter_ids

from . import helpers
from .helpers import Recorder, assert_fold_matches, call, calls

EXPECTED_TYPES = [
    "agent.turn_start",
    "message.committed",
    "stream.llm_start",
    "stream.llm_end",
    "message.committed",
    "stream.tool_start",
    "middleware.decision",
    "tool.dispatched",
    "stream.tool_end",
    "message.committed",
    "stream.llm_start",
    "stream.token",
    "stream.token",
    "stream.llm_end",
    "message.committed",
    "agent.turn_end",
]


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} shipped"


def script() -> list[Any]:
    return [calls(call("c1", "lookup", order=7)), "It shipped."]


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def builder(model: Any | None = None) -> Any:
    """A governed agent's builder with deterministic ids and clock."""
    return (
        Agent.create(
            provider=model or scripted(script(), stream=True),
            model="m",
            ids=counter_ids(),
            clock=lambda: 1_700_000_000_000,
            traces=lambda: TRACEPARENT,
        )
        .system("You look orders up.")
        .tool(lookup)
        .tool_middleware(ToolMiddleware(name="look", on_tool_call=lambda c: allow()))
    )


def encoded(events: list[Any]) -> list[bytes]:
    return [encode_event(e) for e in events]


async def stream_bytes(agent: Agent) -> list[bytes]:
    return [r.data for r in await agent.store.read(agent.session_id or "")]


def helmlog_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The logger name of every error logged under helmlog."""
    return [
        r.name
        for r in caplog.records
        if r.name.startswith("helmlog") and r.levelno >= logging.ERROR
    ]


# -- G82: .watch(), attach(), on() ---------------------------------------------------


async def test_g82_watch_is_variadic_accumulates_and_sees_the_first_run() -> None:
    """G82: .watch() is variadic, accumulates, returns the builder, sees run one."""
    first, second, third = Recorder(), Recorder(), Recorder()
    b = builder()

    assert b is b.watch()
    assert b is b.watch(first, second)
    agent = b.watch(third).build()
    await agent.run("where is 7?")

    assert EXPECTED_TYPES == first.types
    assert encoded(first.events) == encoded(second.events) == encoded(third.events)
    await assert_fold_matches(agent)


async def test_g82_delivery_follows_hand_over_order() -> None:
    """G82: for each event, watchers are told in the order they were handed over."""
    log: list[tuple[str, str]] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_event(self, event: Any) -> None:
            log.append((event.type, self.name))

    agent = builder().watch(Named("b")).watch(Named("a"), Named("c")).build()
    await agent.run("where is 7?")

    expected = [(t, n) for t in EXPECTED_TYPES for n in ("b", "a", "c")]
    assert expected == log
    await assert_fold_matches(agent)


async def test_g82_attach_at_runtime_returns_an_unsubscribe() -> None:
    """G82: attach() delivers from then on; after unsubscribe, nothing."""
    late = Recorder()
    model = scripted(reply="Fine.")
    agent = builder(model).build()

    unsubscribe = agent.attach(late)
    await agent.run("first")
    seen_first = len(late.events)
    unsubscribe()
    await agent.run("second")

    assert (
        [
            "agent.turn_start",
            "message.committed",
            "stream.llm_start",
            "stream.llm_end",
            "message.committed",
            "agent.turn_end",
        ],
        seen_first,
    ) == (late.types, len(late.events))
    await assert_fold_matches(agent)


async def test_g82_on_subscribes_one_type_or_all_and_unsubscribes() -> None:
    """G82: on(type, fn) hears one type, on("*", fn) all; both return unsubscribe."""
    ends: list[Any] = []
    everything: list[Any] = []
    watcher = Recorder()
    agent = (
        builder(scripted([*script(), *script()], stream=True)).watch(watcher).build()
    )

    stop_ends = agent.on("stream.tool_end", ends.append)
    stop_all = agent.on("*", everything.append)
    await agent.run("where is 7?")
    stop_ends()
    stop_all()
    await agent.run("again")

    assert [("stream.tool_end", "c1")] == [(e.type, e.tool_call_id) for e in ends]
    assert encoded(watcher.events[: len(EXPECTED_TYPES)]) == encoded(everything)
    assert 2 * len(EXPECTED_TYPES) == len(watcher.events)
    await assert_fold_matches(agent)


# -- G83: identity decides; ids must not collide -------------------------------------


async def test_g83_one_object_handed_over_twice_is_one_attachment() -> None:
    """G83: the same object via .watch() twice and attach() sees each event once."""
    twice, once = Recorder("audit"), Recorder()
    agent = builder().watch(twice, once).watch(twice).build()
    agent.attach(twice)

    await agent.run("where is 7?")

    assert encoded(once.events) == encoded(twice.events)
    assert EXPECTED_TYPES == twice.types
    await assert_fold_matches(agent)


def test_g83_two_watchers_with_one_id_refuse_build() -> None:
    """G83: two different objects with one id make build() raise AgentBuildError."""
    b = builder().watch(Recorder("audit")).watch(Recorder("audit"))

    with pytest.raises(AgentBuildError) as refused:
        b.build()

    assert "two different watchers were given the id 'audit'" in str(refused.value)


async def test_g83_an_id_collision_at_attach_attaches_nothing() -> None:
    """G83: attach() of another object with a taken id raises; it is not attached."""
    kept, refused = Recorder("audit"), Recorder("audit")
    agent = builder().watch(kept).build()

    with pytest.raises(AgentBuildError) as error:
        agent.attach(refused)
    await agent.run("where is 7?")

    assert "two different watchers were given the id 'audit'" in str(error.value)
    assert ([], EXPECTED_TYPES) == (refused.events, kept.types)
    await assert_fold_matches(agent)


# -- G84: watching never steers ------------------------------------------------------


class Raises:
    """A watcher that raises on every event."""

    def __init__(self) -> None:
        self.calls = 0

    def on_event(self, event: Any) -> None:
        self.calls += 1
        raise RuntimeError("watcher bug")


class Answers:
    """A watcher that returns verdicts, as if it could decide."""

    def on_event(self, event: Any) -> Any:
        return deny("stop the run")


@pytest.mark.parametrize(
    "meddler", [Raises, Answers], ids=["raises", "returns-a-value"]
)
async def test_g84_a_watcher_that_raises_or_returns_never_steers(
    meddler: type, caplog: pytest.LogCaptureFixture
) -> None:
    """G84: same answer, stream and rows, and the same events for the other watchers."""
    plain_tape, meddled_tape = Recorder(), Recorder()
    plain = builder().watch(plain_tape).build()
    meddled = builder().watch(meddler(), meddled_tape).build()

    with caplog.at_level(logging.ERROR, logger="helmlog"):
        assert await plain.run("where is 7?") == await meddled.run("where is 7?")

    assert await stream_bytes(plain) == await stream_bytes(meddled)
    assert plain.last_snapshot() == meddled.last_snapshot()
    assert encoded(plain_tape.events) == encoded(meddled_tape.events)
    expected_logs = ["helmlog"] * len(EXPECTED_TYPES) if meddler is Raises else []
    assert expected_logs == helmlog_failures(caplog)
    await assert_fold_matches(meddled)


async def test_g84_a_listener_that_raises_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """G84: an on() listener that raises changes nothing; each failure is logged."""
    tape = Recorder()
    agent = builder().watch(tape).build()

    def broken(event: Any) -> None:
        raise ValueError("listener bug")

    agent.on("stream.tool_end", broken)
    with caplog.at_level(logging.ERROR, logger="helmlog"):
        assert "It shipped." == await agent.run("where is 7?")

    assert EXPECTED_TYPES == tape.types
    assert ["helmlog"] == helmlog_failures(caplog)
    await assert_fold_matches(agent)


async def test_g84_async_watchers_are_not_awaited_by_the_run() -> None:
    """G84: a blocked async watcher does not hold the run; it catches up in order."""
    gate = asyncio.Event()
    seen: list[str] = []
    tape = Recorder()

    class Slow:
        async def on_event(self, event: Any) -> None:
            await gate.wait()
            seen.append(event.type)

    agent = builder().watch(Slow(), tape).build()

    assert "It shipped." == await asyncio.wait_for(agent.run("where is 7?"), 5)
    assert [] == seen
    gate.set()
    await agent.idle()

    assert EXPECTED_TYPES == seen
    assert EXPECTED_TYPES == tape.types
    await assert_fold_matches(agent)


async def test_g84_async_watchers_see_events_in_stream_order() -> None:
    """G84: uneven async delays never reorder what one watcher sees."""
    seen: list[tuple[str, int | None]] = []
    tape = Recorder()

    class Jittery:
        def __init__(self) -> None:
            self.n = 0

        async def on_event(self, event: Any) -> None:
            self.n += 1
            for _ in range((7 * self.n) % 5):
                await asyncio.sleep(0)
            seen.append((event.type, event.seq))

    agent = builder().watch(Jittery(), tape).build()
    await agent.run("where is 7?")
    await agent.idle()

    assert [(e.type, e.seq) for e in tape.events] == seen
    await assert_fold_matches(agent)


async def test_g84_an_async_watcher_that_raises_is_logged_and_keeps_its_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """G84: an async failure is logged; later events still arrive in order."""
    seen: list[str] = []

    class Flaky:
        async def on_event(self, event: Any) -> None:
            await asyncio.sleep(0)
            if event.type == "stream.tool_start":
                raise RuntimeError("async watcher bug")
            seen.append(event.type)

    agent = builder().watch(Flaky()).build()
    with caplog.at_level(logging.ERROR, logger="helmlog"):
        assert "It shipped." == await agent.run("where is 7?")
        await agent.idle()

    assert [t for t in EXPECTED_TYPES if t != "stream.tool_start"] == seen
    assert ["helmlog"] == helmlog_failures(caplog)
    await assert_fold_matches(agent)


class _Deferred:
    """A plain watcher that asks to be delivered off the run's path."""

    deferred = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, int | None]] = []
        self.inside_flush: list[bool] = []

    def on_event(self, event: Any) -> None:
        import inspect

        self.inside_flush.append(
            any(frame.function == "flush" for frame in inspect.stack())
        )
        self.seen.append((event.type, event.seq))


async def test_g84_a_deferred_watcher_is_delivered_off_the_run_in_order() -> None:
    """G84: a watcher declaring ``deferred = True`` is handed events off the
    run's path — only the ones left when the turn ends, from its final flush —
    yet has seen every event, in stream order, when the run returns."""

    class Waiting:
        """The scripted model, waiting on its reply as a real one does."""

        def __init__(self) -> None:
            self.inner = scripted(script(), stream=True)

        async def call(self, request: Any, on_token: Any = None) -> Any:
            await asyncio.sleep(0)
            return await self.inner.call(request, on_token)

    late = _Deferred()
    tape = Recorder()
    agent = builder(Waiting()).watch(late, tape).build()

    assert "It shipped." == await agent.run("where is 7?")

    assert [(e.type, e.seq) for e in tape.events] == late.seen
    assert EXPECTED_TYPES[-1] == "agent.turn_end"
    # Every event but those of the final flush was delivered outside a flush.
    assert False in late.inside_flush
    await assert_fold_matches(agent)


def test_g84_run_sync_waits_for_deferred_watchers() -> None:
    """G84: ``run_sync`` ends its loop only after deferred watchers caught up,
    so nothing they were handed is dropped."""
    late = _Deferred()
    agent = builder().watch(late).build()

    assert "It shipped." == agent.run_sync("where is 7?")

    assert EXPECTED_TYPES == [t for t, _seq in late.seen]


async def test_g84_a_listener_mutating_an_event_never_steers_the_run() -> None:
    """G84: a listener ... never changes a run."""
    refund, ran = helpers.refund_recorder()
    model = scripted(
        [
            helpers.calls(
                helpers.call("c1", "refund", order=1, amount=5),
                helpers.call("c2", "refund", order=2, amount=6),
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
    assert [5, 6] == ran
    assert [{"order": 1, "amount": 5}, {"order": 2, "amount": 6}] == [
        c.args for c in model.requests[-1].messages[1].tool_calls
    ]
