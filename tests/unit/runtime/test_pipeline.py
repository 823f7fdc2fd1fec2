"""The one tool-call pipeline: entered at a step, under a caller's rules.

Pattern: the pipeline driven directly (``helmlog.runtime.lowlevel``) with a
         recorder that keeps what it is given, and hooks, predicate, resolver
         and tool that write to one log, so where an entry starts and which
         steps it runs is observed, not assumed.
Role:    unit tests for ``runtime/_pipeline.py``; the agent-level behaviour
         of the same steps is defended by ``test_dispatch.py``,
         ``test_pause_resume.py``, ``test_recover.py`` and
         ``tests/unit/gateway/test_serve.py``.
Emits:   nothing.

Laws: G51 (the fixed order; rows are recorded before the dispatch record),
G53, G54, G56, G62 (an approved ask walks on from the next link), G64 (asking
no more), G65, G70 (an answer is walked, the tool not entered), R7 (a
re-dispatch counts its attempt; recorded arguments that no longer validate
are refused before anything is recorded), S4–S5 (``SERVED``: an ask is a
denial, check-in refuses, ``ask_human`` is a tool error).

Why a recorder of lists and not a journal: the pipeline's contract with its
caller is the two calls of ``CallRecorder``; the journal's side of it is
defended by the agent-level tests above.
"""

from __future__ import annotations

from typing import Any

from helmlog import (
    Tool,
    ToolMiddleware,
    allow,
    ask,
    ask_human,
    check_in_approved,
    check_in_declined,
    deny,
)
from helmlog.events import MiddlewareDecision, PendingPause
from helmlog.runtime.lowlevel import (
    IN_AGENT,
    SERVED,
    CallRules,
    CallSite,
    Entry,
    Paused,
    Ran,
    Refused,
    Step,
    ToolPipeline,
    as_tool_link,
    ask_human_text,
)


class Recorder:
    """A ``CallRecorder`` that keeps what it is given, in order, in ``log``."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        self.log.extend(("row", r.middleware, r.outcome) for r in rows)

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        self.log.append(("dispatched", tool_call_id, attempt))


def link(name: str, log: list[Any], verdict: Any = None) -> ToolMiddleware:
    def on_tool_call(ctx: Any) -> Any:
        log.append(("before", name))
        return allow() if verdict is None else verdict

    def on_tool_result(ctx: Any) -> Any:
        log.append(("after", name, ctx.result))
        return allow()

    return ToolMiddleware(
        name=name, on_tool_call=on_tool_call, on_tool_result=on_tool_result
    )


def make(
    log: list[Any],
    *,
    verdicts: dict[str, Any] | None = None,
    rules: CallRules = IN_AGENT,
    check_in: Any = None,
    permissions: Any = None,
    credentials: Any = None,
    execute: Any = None,
) -> tuple[ToolPipeline, Tool]:
    def run(order: int, **kw: Any) -> str:
        log.append(("execute", order))
        return f"order {order}"

    def trips(kwargs: Any) -> bool:
        log.append(("check-in", kwargs["order"]))
        return bool(check_in)

    t = Tool(
        "lookup",
        "Look an order up.",
        {
            "type": "object",
            "properties": {"order": {"type": "integer"}},
            "required": ["order"],
        },
        execute or run,
        check_in=None if check_in is None else trips,
    )
    v = verdicts or {}
    links = [link(n, log, v.get(n)) for n in ("a", "b", "c")]
    pipeline = ToolPipeline(
        {t.name: t},
        [as_tool_link(lk) for lk in links],
        rules,
        permissions=permissions,
        credentials=credentials,
        clock=lambda: 0,
    )
    return pipeline, t


SITE = CallSite("lookup", None, "c1", 1, (), None)


async def test_g51_a_fresh_call_walks_every_step_in_order() -> None:
    """G51: gate, before-tool walk, validation, check-in, dispatch, execute, after."""
    log: list[Any] = []

    def checker(ctx: Any) -> Any:
        log.append(("gate", ctx.tool_name))
        return allow()

    pipeline, t = make(log, permissions=checker, check_in=False)
    out = await pipeline.run(t, SITE, Entry.fresh({"order": 7}), Recorder(log))
    assert Ran("order 7", False, "order 7") == out
    assert [
        ("gate", "lookup"),
        ("before", "a"),
        ("before", "b"),
        ("before", "c"),
        ("row", "a", "allow"),
        ("row", "b", "allow"),
        ("row", "c", "allow"),
        ("check-in", 7),
        ("dispatched", "c1", 1),
        ("execute", 7),
        ("after", "c", "order 7"),
        ("after", "b", "order 7"),
        ("after", "a", "order 7"),
        ("row", "c", "allow"),
        ("row", "b", "allow"),
        ("row", "a", "allow"),
    ] == log


async def test_g53_an_unknown_tool_is_refused_at_its_own_step() -> None:
    """G53: the lookup refuses an unknown tool before any other step."""
    pipeline, _ = make([])
    out = pipeline.lookup("nope")
    assert (
        Refused(Step.UNKNOWN_TOOL, "Unknown tool: nope. Available tools: lookup.")
        == out
    )


async def test_g62_an_approved_ask_enters_at_the_next_link_and_asks_no_more() -> None:
    """G62, G64: the walk starts after the asker; a later ask is a denial."""
    log: list[Any] = []
    pipeline, t = make(log, verdicts={"c": ask("again?")})
    entry = Entry.approved_ask({"order": 7}, 2, "b")
    out = await pipeline.run(t, SITE, entry, Recorder(log))
    assert isinstance(out, Refused) and Step.BEFORE_TOOL == out.step
    assert [("before", "c"), ("row", "c", "deny")] == log


async def test_g65_an_approved_ask_meets_a_tripping_check_in_as_two_gates() -> None:
    """G65: after an approved ask, a tool's own tripping check-in refuses."""
    log: list[Any] = []
    pipeline, t = make(log, check_in=True)
    out = await pipeline.run(
        t, SITE, Entry.approved_ask({"order": 7}, 3, "b"), Recorder(log)
    )
    assert isinstance(out, Refused) and Step.CHECK_IN == out.step
    assert [("check-in", 7)] == log


async def test_g56_an_approved_check_in_enters_at_credentials() -> None:
    """G56: no gate, no walk, no predicate again: dispatch, execute, after-tool."""
    log: list[Any] = []
    pipeline, t = make(log, check_in=True, permissions=lambda ctx: deny("no"))
    out = await pipeline.run(
        t, SITE, Entry.approved_check_in({"order": 7}), Recorder(log)
    )
    assert isinstance(out, Ran)
    assert [("dispatched", "c1", 1), ("execute", 7)] == log[:2]


async def test_r07_a_redispatch_counts_its_attempt() -> None:
    """R7: entered at dispatch, the call records its attempt and runs once."""
    log: list[Any] = []
    pipeline, t = make(log, check_in=True)
    out = await pipeline.run(t, SITE, Entry.redispatch({"order": 7}, 2), Recorder(log))
    assert isinstance(out, Ran)
    assert [("dispatched", "c1", 2), ("execute", 7)] == log[:2]


async def test_r07_recorded_arguments_that_no_longer_validate_record_nothing() -> None:
    """R7: a re-dispatch whose arguments fail validation is refused, unrecorded."""
    log: list[Any] = []
    pipeline, t = make(log)
    out = await pipeline.run(
        t, SITE, Entry.redispatch({"order": "x"}, 2), Recorder(log)
    )
    assert isinstance(out, Refused) and Step.VALIDATE == out.step
    assert [] == log


async def test_g70_an_answer_enters_at_the_after_tool_walk() -> None:
    """G70: the tool is not entered; the answer is walked as its result."""
    log: list[Any] = []
    pipeline, t = make(log)
    out = await pipeline.run(
        t, SITE, Entry.answered({"order": 7}, "yes"), Recorder(log)
    )
    assert Ran("yes", False, "yes") == out
    assert ("execute", 7) not in log
    assert ("after", "c", "yes") == log[0]


def paused_at(link_index: int, middleware: str) -> PendingPause:
    return PendingPause(
        kind="ask",
        tool_name="lookup",
        tool_call_id="c1",
        middleware=middleware,
        question="ok?",
        detail=None,
        component_id=None,
        link_index=link_index,
        args={"order": 7},
        args_digest="",
        policy_version="",
        iteration=1,
        seq=5,
        timestamp=0,
    )


async def test_g64_a_declined_ask_files_the_askers_denial_and_refuses() -> None:
    """G64: the asker's row says declined; the call is refused, nothing runs."""
    log: list[Any] = []
    pipeline, t = make(log)
    decision = check_in_declined("ann", "no")
    out = await pipeline.resume(t, SITE, paused_at(1, "b"), decision, Recorder(log))
    assert Refused(Step.BEFORE_TOOL, "declined by human: no") == out
    assert [("row", "b", "deny")] == log


async def test_g62_an_approved_ask_files_the_askers_row_and_walks_on() -> None:
    """G62: the asker's allow row, then the link after it, then execute."""
    log: list[Any] = []
    pipeline, t = make(log)
    decision = check_in_approved("ann")
    out = await pipeline.resume(t, SITE, paused_at(1, "b"), decision, Recorder(log))
    assert isinstance(out, Ran)
    assert [
        ("row", "b", "allow"),
        ("before", "c"),
        ("row", "c", "allow"),
        ("dispatched", "c1", 1),
        ("execute", 7),
    ] == log[:5]


async def test_s4_served_an_ask_is_a_denial_row() -> None:
    """S4: under SERVED the walker files an ask as a denial; nothing pauses."""
    log: list[Any] = []
    pipeline, t = make(log, verdicts={"b": ask("ok?")}, rules=SERVED)
    out = await pipeline.run(t, SITE, Entry.fresh({"order": 7}), Recorder(log))
    assert isinstance(out, Refused) and Step.BEFORE_TOOL == out.step
    assert ("row", "b", "deny") == log[-1]


async def test_s5_served_check_in_refuses_and_ask_human_is_a_tool_error() -> None:
    """S5: a tripped check-in refuses; ``ask_human`` ends as S5's error text."""
    pipeline, t = make([], check_in=True, rules=SERVED)
    out = await pipeline.run(t, SITE, Entry.fresh({"order": 7}), Recorder([]))
    assert isinstance(out, Refused) and Step.CHECK_IN == out.step

    def asks(order: int) -> str:
        ask_human("which one?")

    pipeline, t = make([], rules=SERVED, execute=asks)
    out = await pipeline.run(t, SITE, Entry.fresh({"order": 7}), Recorder([]))
    assert Refused(Step.EXECUTE, ask_human_text("which one?")) == out


async def test_g69_in_an_agent_ask_human_pauses() -> None:
    """G69: under IN_AGENT a tool's ``ask_human`` is an ``ask-human`` pause."""

    def asks(order: int) -> str:
        ask_human("which one?", {"n": 2})

    pipeline, t = make([], execute=asks)
    out = await pipeline.run(t, SITE, Entry.fresh({"order": 7}), Recorder([]))
    assert isinstance(out, Paused)
    assert ("ask-human", "which one?", {"order": 7}) == (
        out.kind,
        out.ask.question,
        out.args,
    )
