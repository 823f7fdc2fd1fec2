"""The after-tool walk: only for a call that ran, in reverse, refusals hide answers.

Pattern: whole runs on the scripted provider; each test reads what the model
         was sent (``model.requests``), the ledger rows and the stored stream.
Role:    unit tests for SPEC G.4 (G18–G25) through ``helmlog.Agent``.
Emits:   nothing.

Laws: G18 (the walk runs only when ``execute`` was entered, on every path),
G19 (no result hooks, no walk), G20 (the onion), G21 (the result context),
G22 (a result transform), G23 (an after-tool refusal hides the answer and
undoes nothing), G24 (no ask after the tool ran), G25 (what the model reads
versus what the events say).

Why every scenario ends with ``assert_fold_matches``: a row or message that
the live session holds but the stream lacks would be a decision that did not
happen as far as any other host can tell (R1).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from helmlog import (
    Agent,
    MiddlewareDecision,
    Tool,
    ToolMiddleware,
    ToolResultContext,
    allow,
    ask,
    ask_human,
    check_in_approved,
    check_in_declined,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import MemoryEventStore, Message, ToolCallRequest
from helmlog.runtime.providers import scripted

from .helpers import Recorder, assert_fold_matches, call, calls, of_type, stored

NO_VALUE = "(this tool returned no value)"


class Shelf:
    """A tool with a visible side effect: every execution is counted."""

    def __init__(
        self, result: Any = "shipped", raises: BaseException | None = None
    ) -> None:
        self.result = result
        self.raises = raises
        self.runs: list[dict[str, Any]] = []

        def lookup(order: int) -> Any:
            """Look an order up."""
            self.runs.append({"order": order})
            if self.raises is not None:
                raise self.raises
            return self.result

        self.tool: Tool = tool(lookup)


def result_spy(
    name: str, log: list[Any], answer: Callable[[ToolResultContext], Any] | None = None
) -> ToolMiddleware:
    """A result-only link that records every context it is handed."""

    def on_tool_result(ctx: ToolResultContext) -> Any:
        log.append(ctx)
        return answer(ctx) if answer is not None else allow()

    return ToolMiddleware(name=name, on_tool_result=on_tool_result)


def one_call(order: int = 7) -> list[Any]:
    """A script: one lookup call, then an answer."""
    return [calls(call("c1", "lookup", order=order)), "done"]


def build(
    model: Any, *tools: Tool, links: tuple[Any, ...] = (), **options: Any
) -> Agent:
    builder = Agent.create(provider=model, model="m", **options).system("sys")
    if tools:
        builder = builder.tool(*tools)
    if links:
        builder = builder.tool_middleware(*links)
    return builder.build()


def tool_message(agent: Agent, call_id: str = "c1") -> Message:
    (msg,) = [m for m in agent.last_snapshot().history if m.tool_call_id == call_id]
    return msg


def after_rows(agent: Agent) -> list[MiddlewareDecision]:
    return [
        r
        for r in agent.last_snapshot().middleware_decisions
        if r.moment == "after-tool"
    ]


# -- G18: only for a call that ran -------------------------------------------------


async def test_g18_walk_runs_after_a_normal_return() -> None:
    """G18: a tool that returned normally is walked once, with error=False."""
    shelf, seen = Shelf(), []
    agent = build(scripted(one_call()), shelf.tool, links=(result_spy("audit", seen),))

    assert "done" == await agent.run("where is 7?")

    assert [("shipped", False)] == [(c.result, c.error) for c in seen]
    assert [
        MiddlewareDecision(
            middleware="audit",
            moment="after-tool",
            at="tool",
            iteration=1,
            outcome="allow",
            changed=False,
            tool_name="lookup",
            tool_call_id="c1",
        )
    ] == after_rows(agent)
    await assert_fold_matches(agent)


@pytest.mark.parametrize(
    ("exc", "text"),
    [(ValueError("warehouse offline"), "warehouse offline"), (KeyError(), "KeyError")],
    ids=["message", "empty-message-uses-class-name"],
)
async def test_g18_a_raised_tool_is_walked_with_error_true(
    exc: Exception, text: str
) -> None:
    """G18: a tool that raised is walked with error=True and G7's text as result."""
    shelf, seen = Shelf(raises=exc), []
    agent = build(scripted(one_call()), shelf.tool, links=(result_spy("audit", seen),))

    await agent.run("where is 7?")

    assert [(text, True)] == [(c.result, c.error) for c in seen]
    assert text == tool_message(agent).content
    (end,) = of_type(await stored(agent), "stream.tool_end")
    assert (text, True) == (end.result, end.error)
    await assert_fold_matches(agent)


async def test_g18_walk_runs_on_the_far_side_of_an_approved_ask() -> None:
    """G18: after an approved ask the call runs and its result is walked."""
    shelf, seen = Shelf(), []
    gate = ToolMiddleware(name="gate", on_tool_call=lambda c: ask("may I?"))
    agent = build(
        scripted(one_call()), shelf.tool, links=(gate, result_spy("audit", seen))
    )

    paused = await agent.run("where is 7?")
    assert is_ask_pause(paused)
    assert [] == seen
    out = await agent.resume(paused.checkpoint, check_in_approved(by="dana"))

    assert "done" == out
    assert [("shipped", False, {"order": 7})] == [
        (c.result, c.error, c.args) for c in seen
    ]
    assert ["audit"] == [r.middleware for r in after_rows(agent)]
    await assert_fold_matches(agent)


async def test_g18_walk_runs_on_the_far_side_of_an_approved_check_in() -> None:
    """G18: after an approved check-in the call runs and its result is walked."""
    seen: list[Any] = []
    guarded = Tool(
        "lookup",
        "Look up.",
        {"type": "object", "properties": {"order": {"type": "integer"}}},
        lambda order: f"order {order} shipped",
        check_in=True,
    )
    agent = build(scripted(one_call()), guarded, links=(result_spy("audit", seen),))

    paused = await agent.run("where is 7?")
    assert is_ask_pause(paused)
    assert "check-in" == paused.kind
    await agent.resume(paused.checkpoint, check_in_approved(by="dana"))

    assert [("order 7 shipped", False)] == [(c.result, c.error) for c in seen]
    assert "order 7 shipped" == tool_message(agent).content
    await assert_fold_matches(agent)


async def test_g18_walk_runs_on_an_answered_ask_human() -> None:
    """G18/G70: an ask_human answer is the result, walked with error=False."""
    seen: list[Any] = []

    @tool
    def pick(order: int) -> str:
        """Ask which colour."""
        ask_human("which colour?", detail={"order": order})

    agent = build(
        scripted([calls(call("c1", "pick", order=7)), "done"]),
        pick,
        links=(result_spy("audit", seen, lambda c: allow(c.result.upper(), "shout")),),
    )

    paused = await agent.run("paint 7")
    assert is_ask_pause(paused)
    assert "ask-human" == paused.kind
    assert [] == seen
    await agent.resume(paused.checkpoint, "blue")

    assert [("blue", False, {"order": 7})] == [
        (c.result, c.error, c.args) for c in seen
    ]
    assert "BLUE" == tool_message(agent).content
    (end,) = of_type(await stored(agent), "stream.tool_end")
    assert ("blue", False) == (end.result, end.error)
    await assert_fold_matches(agent)


# Each scenario: a call that never entered execute, with the result spy attached.
Scenario = Callable[[ToolMiddleware, Shelf], Awaitable[Agent]]


async def _unknown(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    model = scripted([calls(call("c1", "missing", order=7)), "done"])
    agent = build(model, shelf.tool, links=(spy,))
    await agent.run("go")
    return agent


async def _permission(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    agent = (
        Agent.create(provider=scripted(one_call()), model="m")
        .tool(shelf.tool)
        .tool_middleware(spy)
        .permissions(lambda c: deny("no"))
        .build()
    )
    await agent.run("go")
    return agent


async def _chain_deny(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    stop = ToolMiddleware(name="stop", on_tool_call=lambda c: deny("not today"))
    agent = build(scripted(one_call()), shelf.tool, links=(stop, spy))
    await agent.run("go")
    return agent


async def _waiting(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    gate = ToolMiddleware(name="gate", on_tool_call=lambda c: ask("may I?"))
    agent = build(scripted(one_call()), shelf.tool, links=(gate, spy))
    assert is_ask_pause(await agent.run("go"))
    return agent


async def _declined(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    gate = ToolMiddleware(name="gate", on_tool_call=lambda c: ask("may I?"))
    agent = build(scripted(one_call()), shelf.tool, links=(gate, spy))
    paused = await agent.run("go")
    assert is_ask_pause(paused)
    await agent.resume(paused.checkpoint, check_in_declined(by="dana"))
    return agent


async def _invalid(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    model = scripted([calls(call("c1", "lookup", order="seven")), "done"])
    agent = build(model, shelf.tool, links=(spy,))
    await agent.run("go")
    return agent


async def _no_credentials(spy: ToolMiddleware, shelf: Shelf) -> Agent:
    def lookup(order: int, credentials: dict[str, str]) -> str:
        """Look up with a key."""
        shelf.runs.append({"order": order})
        return "shipped"

    keyed = tool(lookup, credentials=("WAREHOUSE_KEY",))
    agent = build(scripted(one_call()), keyed, links=(spy,), credentials={})
    await agent.run("go")
    return agent


@pytest.mark.parametrize(
    "scenario",
    [
        _unknown,
        _permission,
        _chain_deny,
        _waiting,
        _declined,
        _invalid,
        _no_credentials,
    ],
    ids=[
        "unknown",
        "permission-gate",
        "chain-denial",
        "waiting-on-a-person",
        "declined",
        "rejected-by-validation",
        "blocked-on-credentials",
    ],
)
async def test_g18_no_walk_for_a_call_that_never_ran(scenario: Scenario) -> None:
    """G18: unknown, refused, waiting, declined, invalid, keyless: no walk."""
    shelf, seen = Shelf(), []
    agent = await scenario(result_spy("audit", seen), shelf)

    assert [] == shelf.runs
    assert [] == seen
    assert [] == after_rows(agent)
    assert [] == of_type(await stored(agent), "tool.dispatched")
    await assert_fold_matches(agent)


class HostStopped(BaseException):
    """Stands in for a host dying mid-call: nothing after it runs on that host."""


class StopsAfterDispatch(MemoryEventStore):
    """The stopping host's writes end once it has recorded a dispatch.

    A host that dies records nothing more, not even its failure; an in-process
    stand-in must not either, or the turn reads as ended by ``error.fatal``.
    """

    dead = False

    async def append_sealed(
        self, session_id: str, records: Any, expected_seq: int
    ) -> int:
        if self.dead:
            raise ConnectionError("the host is gone")
        seq = await super().append_sealed(session_id, records, expected_seq)
        self.dead = any(b'"tool.dispatched"' in r.data for r in records)
        return seq


async def test_g18_no_walk_for_a_call_whose_outcome_is_unknown() -> None:
    """G18/R7: a dispatched call without a recorded result is not walked on recovery."""
    shelf, seen = Shelf(raises=HostStopped()), []
    store = StopsAfterDispatch()
    first = build(
        scripted(one_call()),
        shelf.tool,
        links=(result_spy("audit", seen),),
        store=store,
    )
    with pytest.raises(HostStopped):
        await first.run("where is 7?")
    sid = first.session_id
    assert sid is not None
    store.dead = False  # another host, with a working connection, takes over

    # A second host over the same stream takes the session over (R7).
    model = scripted(["I could not confirm it."])
    second = build(
        model, shelf.tool, links=(result_spy("audit", seen),), store=first.store
    )
    assert "I could not confirm it." == await second.recover(sid)

    assert 1 == len(shelf.runs)
    assert [] == seen
    assert [] == after_rows(second)
    unknown = (
        "The outcome of tool 'lookup' (call c1) is unknown: it was dispatched, but the "
        "host running it stopped before its result was recorded. It was not run again; "
        "check whether it took effect before calling it again."
    )
    assert unknown == model.requests[0].messages[-1].content
    assert ["c1"] == [
        e.tool_call_id for e in of_type(await stored(second), "tool.outcome_unknown")
    ]
    await assert_fold_matches(second)


# -- G19: no result hooks, no walk -------------------------------------------------


async def test_g19_no_result_hook_sends_requests_equal_to_no_chain() -> None:
    """G19: with only on_tool_call links nothing is walked after the tool."""
    shelf_a, shelf_b = Shelf(), Shelf()
    governed_model, bare_model = scripted(one_call()), scripted(one_call())
    look = ToolMiddleware(name="look", on_tool_call=lambda c: allow())
    governed = build(governed_model, shelf_a.tool, links=(look,))
    bare = build(bare_model, shelf_b.tool)

    assert await bare.run("go") == await governed.run("go")

    assert bare_model.requests == governed_model.requests
    assert [("look", "before-tool")] == [
        (r.middleware, r.moment) for r in governed.last_snapshot().middleware_decisions
    ]
    await assert_fold_matches(governed)


async def test_g19_a_result_only_link_takes_no_part_in_dispatch() -> None:
    """G19: a link with only on_tool_result files no before-tool row."""
    shelf, seen = Shelf(), []
    agent = build(scripted(one_call()), shelf.tool, links=(result_spy("audit", seen),))

    await agent.run("go")

    assert [("audit", "after-tool")] == [
        (r.middleware, r.moment) for r in agent.last_snapshot().middleware_decisions
    ]
    await assert_fold_matches(agent)


# -- G20: the onion -----------------------------------------------------------------


async def test_g20_links_walk_as_an_onion() -> None:
    """G20: before:outer, middle, inner, then after:inner, middle, outer; rows alike."""
    log: list[str] = []

    def layer(name: str) -> ToolMiddleware:
        def before(ctx: Any) -> Any:
            log.append(f"before:{name}")
            return allow()

        def after(ctx: Any) -> Any:
            log.append(f"after:{name}")
            return allow()

        return ToolMiddleware(name=name, on_tool_call=before, on_tool_result=after)

    shelf = Shelf()
    agent = build(
        scripted(one_call()),
        shelf.tool,
        links=(layer("outer"), layer("middle"), layer("inner")),
    )

    await agent.run("go")

    expected = [
        "before:outer",
        "before:middle",
        "before:inner",
        "after:inner",
        "after:middle",
        "after:outer",
    ]
    assert expected == log
    assert expected == [
        f"{r.moment.split('-')[0]}:{r.middleware}"
        for r in agent.last_snapshot().middleware_decisions
    ]
    await assert_fold_matches(agent)


# -- G21: the result context --------------------------------------------------------


async def test_g21_the_result_context_carries_the_call_and_the_raw_result() -> None:
    """G21: call fields, the args the tool ran with, the raw result as left."""
    shelf, seen = Shelf(result={"status": "shipped", "eta": 3}), []
    bump = ToolMiddleware(
        name="bump",
        on_tool_call=lambda c: allow({"order": c.args["order"] + 1}, "next"),
    )
    inner = result_spy("inner", [], lambda c: allow({**c.result, "eta": 4}, "recount"))
    outer = result_spy("outer", seen)
    model = scripted(one_call(order=7))
    agent = build(model, shelf.tool, links=(outer, bump, inner))

    await agent.run("where is 7?", identity={"user": "ann"})

    (ctx,) = seen
    proposed = Message(
        role="assistant",
        content="",
        tool_calls=(ToolCallRequest(id="c1", name="lookup", args={"order": 7}),),
    )
    expected = ToolResultContext(
        tool_name="lookup",
        tool_source=None,
        tool_call_id="c1",
        iteration=1,
        args={"order": 8},
        history=(Message(role="user", content="where is 7?"), proposed),
        identity={"user": "ann"},
        result={"status": "shipped", "eta": 4},
        error=False,
    )
    assert expected == ctx
    assert [{"order": 8}] == shelf.runs
    await assert_fold_matches(agent)


async def test_g21_identity_defaults_to_the_session_id() -> None:
    """G21/G13: without run(identity=...), identity is {"session_id": <session id>}."""
    shelf, seen = Shelf(), []
    agent = build(scripted(one_call()), shelf.tool, links=(result_spy("audit", seen),))

    await agent.run("go")

    assert [{"session_id": agent.session_id}] == [c.identity for c in seen]


# -- G22: a result transform --------------------------------------------------------


async def test_g22_a_result_transform_replaces_what_the_model_reads() -> None:
    """G22: allow(value, why) files before/after; the model reads the value."""
    shelf = Shelf(result={"status": "shipped", "card": "4111"})
    strip = result_spy(
        "strip", [], lambda c: allow({"status": c.result["status"]}, "pan")
    )
    model = scripted(one_call())
    agent = build(model, shelf.tool, links=(strip,))

    await agent.run("go")

    assert [
        MiddlewareDecision(
            middleware="strip",
            moment="after-tool",
            at="tool",
            iteration=1,
            outcome="allow",
            changed=True,
            tool_name="lookup",
            tool_call_id="c1",
            why="pan",
            before={"status": "shipped", "card": "4111"},
            after={"status": "shipped"},
        )
    ] == after_rows(agent)
    assert '{"status":"shipped"}' == model.requests[1].messages[-1].content
    await assert_fold_matches(agent)


async def test_g22_allow_none_with_a_reason_passes_through() -> None:
    """G22: allow(None, why) is a pass-through carrying its reason."""
    shelf = Shelf()
    looked = result_spy("looked", [], lambda c: allow(None, "nothing secret"))
    model = scripted(one_call())
    agent = build(model, shelf.tool, links=(looked,))

    await agent.run("go")

    assert [("allow", False, "nothing secret", None, None)] == [
        (r.outcome, r.changed, r.why, r.before, r.after) for r in after_rows(agent)
    ]
    assert "shipped" == model.requests[1].messages[-1].content
    await assert_fold_matches(agent)


# -- G23: an after-tool refusal hides an answer; it undoes nothing -----------------


async def test_g23_an_after_tool_deny_hides_the_answer_and_undoes_nothing() -> None:
    """G23: outer never runs, the model reads the reason, the effect stands."""
    shelf, outer_seen = Shelf(result="card 4111 refunded"), []
    outer = result_spy("outer", outer_seen)
    inner = result_spy("inner", [], lambda c: deny("result withheld: card data"))
    model = scripted(one_call())
    agent = build(model, shelf.tool, links=(outer, inner))

    await agent.run("go")

    assert [] == outer_seen
    assert [{"order": 7}] == shelf.runs
    assert [
        MiddlewareDecision(
            middleware="inner",
            moment="after-tool",
            at="tool",
            iteration=1,
            outcome="deny",
            changed=True,
            tool_name="lookup",
            tool_call_id="c1",
            why="result withheld: card data",
            before="card 4111 refunded",
            after="result withheld: card data",
        )
    ] == after_rows(agent)
    assert "result withheld: card data" == model.requests[1].messages[-1].content
    (end,) = of_type(await stored(agent), "stream.tool_end")
    assert ("card 4111 refunded", False) == (end.result, end.error)
    await assert_fold_matches(agent)


def _raise(ctx: Any) -> Any:
    raise RuntimeError("scanner down")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_raise, "middleware 'inner' threw: scanner down"),
        (
            lambda c: None,
            "middleware 'inner' returned None, which is not allow(), deny() or ask()",
        ),
        (
            lambda c: {"allow": True},
            "middleware 'inner' returned a dict, which is not allow(), deny() or ask()",
        ),
    ],
    ids=["throw", "returns-none", "returns-a-dict"],
)
async def test_g23_a_throw_or_malfunction_after_the_tool_is_a_refusal(
    answer: Callable[[Any], Any], reason: str
) -> None:
    """G23: a throw or a malfunction stops the walk and hides the result like a deny."""
    shelf, outer_seen = Shelf(), []
    model = scripted(one_call())
    agent = build(
        model,
        shelf.tool,
        links=(result_spy("outer", outer_seen), result_spy("inner", [], answer)),
    )

    await agent.run("go")

    assert [] == outer_seen
    assert [("inner", "deny", True, reason, "shipped", reason)] == [
        (r.middleware, r.outcome, r.changed, r.why, r.before, r.after)
        for r in after_rows(agent)
    ]
    assert reason == model.requests[1].messages[-1].content
    await assert_fold_matches(agent)


# -- G24: no ask after the tool ran -------------------------------------------------


async def test_g24_an_ask_after_the_tool_ran_is_a_denial() -> None:
    """G24: ask() from on_tool_result is G23's denial with the no-pause reason."""
    shelf = Shelf()
    late = result_spy("late", [], lambda c: ask("show this to the user?"))
    model = scripted(one_call())
    agent = build(model, shelf.tool, links=(late,))

    out = await agent.run("go")

    reason = (
        "middleware 'late' asked a person to decide, and there is no pause here to "
        "carry that ask: show this to the user?"
    )
    assert "done" == out
    assert [("deny", True, reason, "shipped", reason)] == [
        (r.outcome, r.changed, r.why, r.before, r.after) for r in after_rows(agent)
    ]
    assert reason == model.requests[1].messages[-1].content
    assert [] == of_type(await stored(agent), "pause.request")
    await assert_fold_matches(agent)


# -- G25: what the model reads, what the events say --------------------------------


@pytest.mark.parametrize(
    ("value", "reads"),
    [
        ("plain text", "plain text"),
        ("", ""),
        (None, NO_VALUE),
        ({"b": 1, "a": "café"}, '{"b":1,"a":"café"}'),
        ([1, "two"], '[1,"two"]'),
        (42, "42"),
        (False, "false"),
    ],
    ids=["str", "empty-str", "none", "dict-compact-unsorted", "list", "int", "bool"],
)
async def test_g25_the_model_reads_the_verdict_rendered(value: Any, reads: str) -> None:
    """G25: a str verbatim, None as the no-value text, anything else as compact JSON."""
    shelf = Shelf(result=value)
    model = scripted(one_call())
    watcher = Recorder()
    agent = (
        Agent.create(provider=model, model="m").tool(shelf.tool).watch(watcher).build()
    )

    await agent.run("go")

    assert reads == model.requests[1].messages[-1].content
    (end,) = watcher.of("stream.tool_end")
    assert (value, False) == (end.result, end.error)
    await assert_fold_matches(agent)


async def test_g25_history_holds_the_verdict_and_the_stream_what_the_tool_did() -> None:
    """G25: after a transform of a raised tool's text, tool_end keeps the real error."""
    shelf = Shelf(raises=ValueError("db password is hunter2"))
    scrub = result_spy("scrub", [], lambda c: allow("lookup failed", "secret in error"))
    model = scripted(one_call())
    agent = build(model, shelf.tool, links=(scrub,))

    await agent.run("go")

    assert "lookup failed" == tool_message(agent).content
    assert "lookup failed" == model.requests[1].messages[-1].content
    (end,) = of_type(await stored(agent), "stream.tool_end")
    assert ("db password is hunter2", True) == (end.result, end.error)
    await assert_fold_matches(agent)
