"""The dispatch pipeline: one fixed order per call, and what each step refuses.

Pattern: whole runs on the scripted provider; hooks, the permission checker,
         the check-in predicate, the credential resolver and the tool all
         write to one log, so the order of the steps is observed, not assumed.
Role:    unit tests for SPEC G.9 (G51–G58) through ``helmlog.Agent``.
Emits:   nothing.

Laws: G51 (the fixed order; a refusal skips to ``stream.tool_end``; one start
and one end per call), G52 (batches), G53 (unknown tools are refused before
the chain), G54 (the permission gate and its texts), G55 (validation judges
the chain's arguments; its text), G56 (check-in), G57 (credentials reach
``execute`` only), G58 (``@tool`` and ``Tool(...)``).

Why the stored stream is read for the order of events: listeners are told
after each append, so their order says when a batch was flushed; the stream
says in which order things were recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    MiddlewareAsk,
    Tool,
    ToolCallContext,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.events import MemoryEventStore, Message, ToolCallRequest, encode_event
from helmlog.runtime.providers import ToolSpec, scripted

from .helpers import Recorder, assert_fold_matches, call, calls, of_type, stored

REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}
PERMISSION_FAILED = (
    "[permission denied: Tool 'refund' could not be authorized. This will not change "
    "during this run — do not call it again. Continue without it, or say what you are "
    "unable to do.]"
)


class Desk:
    """A refund tool whose executions are counted, with its script."""

    def __init__(self, **tool_options: Any) -> None:
        self.runs: list[dict[str, Any]] = []

        def refund(order: int, amount: float) -> str:
            """Refund an order."""
            self.runs.append({"order": order, "amount": amount})
            return f"refunded {amount} on {order}"

        self.tool: Tool = tool(refund, **tool_options)


def one_refund(**args: Any) -> list[Any]:
    return [
        calls(call("c1", "refund", **(args or {"order": 7, "amount": 250}))),
        "done",
    ]


def build(
    model: Any, *tools: Tool, links: tuple[Any, ...] = (), **options: Any
) -> Agent:
    checker = options.pop("permissions", None)
    builder = Agent.create(provider=model, model="m", **options).system("You refund.")
    if tools:
        builder = builder.tool(*tools)
    if links:
        builder = builder.tool_middleware(*links)
    if checker is not None:
        builder = builder.permissions(checker)
    return builder.build()


def spy(name: str, log: list[str]) -> ToolMiddleware:
    """A pass-through link with both hooks that logs each visit."""

    def before(ctx: Any) -> Any:
        log.append(f"before:{name}")
        return allow()

    def after(ctx: Any) -> Any:
        log.append(f"after:{name}")
        return allow()

    return ToolMiddleware(name=name, on_tool_call=before, on_tool_result=after)


def tool_reads(model: Any, request: int = 1) -> list[str]:
    """What the model read of each tool message in one request."""
    return [m.content for m in model.requests[request].messages if m.role == "tool"]


def span(types: list[str], first: str, last: str) -> list[str]:
    """The stored types from the first ``first`` through the next ``last``."""
    start = types.index(first)
    end = types.index(last, start)
    return types[start : end + 1]


# -- G51: fixed order per call ------------------------------------------------------


async def test_g51_each_step_runs_in_the_fixed_order() -> None:
    """G51: gate, chain, validation, check-in, credentials, record, execute, after."""
    log: list[str] = []
    store = MemoryEventStore()
    holder: dict[str, Agent] = {}

    async def refund(order: int, amount: float, credentials: dict[str, str]) -> str:
        """Refund an order."""
        records = await store.read(holder["agent"].session_id or "")
        log.append(f"execute after {records[-1].decode().type}")
        return "refunded"

    def checker(ctx: Any) -> Any:
        log.append("permission")
        return allow()

    def check_in(args: Any) -> bool:
        # Validation ran before: the model's int amount arrives as a float.
        log.append(f"check-in {args!r}")
        return False

    def resolve(name: str) -> str:
        log.append(f"credentials {name}")
        return "k-1"

    refund_tool = tool(refund, check_in=check_in, credentials=("DESK_KEY",))
    model = scripted(one_refund(order=7, amount=250))
    agent = build(
        model,
        refund_tool,
        links=(spy("outer", log), spy("inner", log)),
        permissions=checker,
        credentials=resolve,
        store=store,
    )
    holder["agent"] = agent

    assert "done" == await agent.run("refund 7")

    assert [
        "permission",
        "before:outer",
        "before:inner",
        "check-in {'order': 7, 'amount': 250.0}",
        "credentials DESK_KEY",
        "execute after tool.dispatched",
        "after:inner",
        "after:outer",
    ] == log
    assert [
        "stream.tool_start",
        "decision.filed",
        "decision.filed",
        "tool.dispatched",
        "decision.filed",
        "decision.filed",
        "stream.tool_end",
        "message.committed",
    ] == span(
        [e.type for e in await stored(agent)], "stream.tool_start", "message.committed"
    )
    (committed,) = [
        e.message
        for e in of_type(await stored(agent), "message.committed")
        if e.message.role == "tool"
    ]
    assert (
        Message(role="tool", content="refunded", tool_call_id="c1", tool_name="refund")
        == committed
    )
    await assert_fold_matches(agent)


async def test_g51_a_refused_call_skips_to_tool_end_with_what_the_model_reads() -> None:
    """G51: a refusal skips to tool_end, whose result is the text read, error=False."""
    desk, log = Desk(), []
    stop = ToolMiddleware(name="stop", on_tool_call=lambda c: deny("over the limit"))
    model = scripted(one_refund())
    agent = build(model, desk.tool, links=(stop, spy("after", log)))

    await agent.run("refund 7")

    events = await stored(agent)
    assert [
        "stream.tool_start",
        "decision.filed",
        "stream.tool_end",
        "message.committed",
    ] == span([e.type for e in events], "stream.tool_start", "message.committed")
    (end,) = of_type(events, "stream.tool_end")
    assert ("over the limit", False) == (end.result, end.error)
    assert ["over the limit"] == tool_reads(model)
    assert ([], []) == (desk.runs, log)
    await assert_fold_matches(agent)


async def test_g51_tool_start_records_the_arguments_as_proposed() -> None:
    """G51/R13: tool_start carries the proposed args; tool.dispatched the final ones."""
    desk = Desk()
    halve = ToolMiddleware(
        name="halve", on_tool_call=lambda c: allow({**c.args, "amount": 125}, "halved")
    )
    agent = build(scripted(one_refund(order=7, amount=250)), desk.tool, links=(halve,))

    await agent.run("refund 7")

    events = await stored(agent)
    (start,) = of_type(events, "stream.tool_start")
    (dispatched,) = of_type(events, "tool.dispatched")
    assert ("refund", "c1", 1, {"order": 7, "amount": 250}) == (
        start.tool_name,
        start.tool_call_id,
        start.iteration,
        start.args,
    )
    assert {"order": 7, "amount": 125} == dispatched.args
    assert [{"order": 7, "amount": 125.0}] == desk.runs
    await assert_fold_matches(agent)


async def test_g51_one_start_and_one_end_per_call_across_a_pause() -> None:
    """G51: each proposed call gets one tool_start and one tool_end, pauses included."""
    desk = Desk()
    four_eyes = ToolMiddleware(
        name="four-eyes",
        on_tool_call=lambda c: ask("approve?") if c.args["amount"] > 100 else allow(),
    )
    model = scripted(
        [
            calls(
                call("c1", "refund", order=7, amount=250),
                call("c2", "refund", order=8, amount=20),
            ),
            "done",
        ]
    )
    agent = build(model, desk.tool, links=(four_eyes,))

    paused = await agent.run("refund both")
    assert is_ask_pause(paused)
    assert "done" == await agent.resume(paused.checkpoint, check_in_approved(by="dana"))

    events = await stored(agent)
    assert ["c1", "c2"] == [
        e.tool_call_id for e in of_type(events, "stream.tool_start")
    ]
    assert ["c1", "c2"] == [e.tool_call_id for e in of_type(events, "stream.tool_end")]
    await assert_fold_matches(agent)


# -- G52: batches -------------------------------------------------------------------


async def test_g52_a_batch_runs_in_order_and_later_calls_see_earlier_results() -> None:
    """G52: calls run in the model's order; history holds the earlier tool messages."""
    desk, seen = Desk(), []

    def note(ctx: ToolCallContext) -> Any:
        seen.append(
            (
                ctx.tool_call_id,
                [m.tool_call_id for m in ctx.history if m.role == "tool"],
            )
        )
        return allow()

    model = scripted(
        [
            calls(
                call("c1", "refund", order=1, amount=1),
                call("c2", "refund", order=2, amount=2),
                call("c3", "refund", order=3, amount=3),
            ),
            "done",
        ]
    )
    agent = build(
        model, desk.tool, links=(ToolMiddleware(name="note", on_tool_call=note),)
    )

    await agent.run("refund three")

    assert [("c1", []), ("c2", ["c1"]), ("c3", ["c1", "c2"])] == seen
    assert [1, 2, 3] == [r["order"] for r in desk.runs]
    assert 2 == len(model.requests)
    assert [
        "refunded 1.0 on 1",
        "refunded 2.0 on 2",
        "refunded 3.0 on 3",
    ] == tool_reads(model)
    assert ["c1", "c2", "c3"] == [
        m.tool_call_id for m in model.requests[1].messages if m.role == "tool"
    ]
    await assert_fold_matches(agent)


# -- G53: unknown tools are refused before the chain --------------------------------


async def test_g53_an_unknown_tool_is_refused_before_the_gate_and_the_chain() -> None:
    """G53: no permission check, no link, no row; the model reads the tool names."""
    log: list[str] = []

    def zeta() -> str:
        """Z."""
        return "z"

    def alpha() -> str:
        """A."""
        return "a"

    model = scripted([calls(call("c1", "refnud", order=7)), "done"])
    agent = build(
        model,
        tool(zeta),
        tool(alpha),
        links=(spy("audit", log),),
        permissions=lambda c: log.append("permission") or allow(),
    )

    await agent.run("refund 7")

    assert ["Unknown tool: refnud. Available tools: zeta, alpha."] == tool_reads(model)
    assert [] == log
    assert () == agent.last_snapshot().middleware_decisions
    (end,) = of_type(await stored(agent), "stream.tool_end")
    assert ("Unknown tool: refnud. Available tools: zeta, alpha.", False) == (
        end.result,
        end.error,
    )
    await assert_fold_matches(agent)


async def test_g53_an_agent_without_tools_lists_none() -> None:
    """G53: with no registered tools the list reads `none`."""
    model = scripted([calls(call("c1", "refund", order=7)), "done"])
    agent = build(model)

    await agent.run("refund 7")

    assert ["Unknown tool: refund. Available tools: none."] == tool_reads(model)
    await assert_fold_matches(agent)


# -- G54: the permission gate decides first -----------------------------------------


async def test_g54_a_permission_denial_runs_no_link_and_files_no_row() -> None:
    """G54: on a deny no link runs, no row is filed, the model reads the reason."""
    desk, log = Desk(), []
    model = scripted(one_refund())
    agent = build(
        model,
        desk.tool,
        links=(spy("audit", log),),
        permissions=lambda c: deny("refunds are closed on Sundays"),
    )

    await agent.run("refund 7")

    assert ["[permission denied: refunds are closed on Sundays]"] == tool_reads(model)
    assert ([], []) == (log, desk.runs)
    assert () == agent.last_snapshot().middleware_decisions
    await assert_fold_matches(agent)


def _raises(ctx: Any) -> Any:
    raise RuntimeError("directory unreachable")


@pytest.mark.parametrize(
    "checker",
    [_raises, lambda c: None, lambda c: ask("sure?"), lambda c: "yes", lambda c: True],
    ids=["raises", "returns-none", "returns-ask", "returns-a-str", "returns-true"],
)
async def test_g54_a_checker_that_fails_reads_could_not_be_authorized(
    checker: Callable[[Any], Any],
) -> None:
    """G54: a raise or a return but Allow/Deny reads could-not-be-authorized."""
    desk = Desk()
    model = scripted(one_refund())
    agent = build(model, desk.tool, permissions=checker)

    await agent.run("refund 7")

    assert [PERMISSION_FAILED] == tool_reads(model)
    assert [] == desk.runs
    await assert_fold_matches(agent)


async def test_g54_an_async_checker_sees_the_call_context() -> None:
    """G54: the checker may be async and receives the call's ToolCallContext."""
    desk, seen = Desk(), []

    async def checker(ctx: ToolCallContext) -> Any:
        seen.append(ctx)
        return deny("no") if ctx.args["amount"] > 100 else allow()

    model = scripted(
        [
            calls(
                call("c1", "refund", order=7, amount=250),
                call("c2", "refund", order=8, amount=5),
            ),
            "done",
        ]
    )
    agent = build(model, desk.tool, permissions=checker)

    await agent.run("refund", identity={"user": "ann"})

    assert ["[permission denied: no]", "refunded 5.0 on 8"] == tool_reads(model)
    proposed = model.requests[1].messages[1]
    assert (
        ToolCallContext(
            tool_name="refund",
            tool_source=None,
            tool_call_id="c1",
            iteration=1,
            args={"order": 7, "amount": 250},
            history=(Message(role="user", content="refund"), proposed),
            identity={"user": "ann"},
        )
        == seen[0]
    )
    await assert_fold_matches(agent)


async def test_g54_a_checker_behaves_the_same_with_or_without_chains() -> None:
    """G54: a checker gives equal requests with pass-through links attached."""

    def checker(ctx: Any) -> Any:
        return deny("too big") if ctx.args["amount"] > 100 else allow()

    script = [
        calls(
            call("c1", "refund", order=7, amount=250),
            call("c2", "refund", order=8, amount=5),
        ),
        "done",
    ]
    bare_model, governed_model = scripted(script), scripted(script)
    bare = build(bare_model, Desk().tool, permissions=checker)
    governed = build(
        governed_model, Desk().tool, links=(spy("audit", []),), permissions=checker
    )

    assert await bare.run("refund") == await governed.run("refund")

    assert bare_model.requests == governed_model.requests
    assert ["c2", "c2"] == [
        r.tool_call_id for r in governed.last_snapshot().middleware_decisions
    ]
    await assert_fold_matches(governed)


# -- G55: validation judges the arguments the chain produced ------------------------


def invalid(*issues: str) -> str:
    lines = "".join(f"\n- {issue}" for issue in issues)
    return (
        f"Invalid arguments for tool 'refund' — the call was not executed.{lines}"
        "\nFix the arguments to match the tool's input schema and call it again."
    )


async def test_g55_a_link_can_repair_the_arguments() -> None:
    """G55: validation runs after the chain, so a link can supply a missing field."""
    desk = Desk()
    fill = ToolMiddleware(
        name="fill",
        on_tool_call=lambda c: allow({"amount": 10, **c.args}, "default amount"),
    )
    model = scripted([calls(call("c1", "refund", order=7)), "done"])
    agent = build(model, desk.tool, links=(fill,))

    await agent.run("refund 7")

    assert [{"order": 7, "amount": 10.0}] == desk.runs
    assert ["refunded 10.0 on 7"] == tool_reads(model)
    await assert_fold_matches(agent)


async def test_g55_a_link_can_break_the_arguments_and_nothing_runs() -> None:
    """G55: a transform dropping a field is rejected; no execute, no after-tool."""
    desk, log = Desk(), []
    drop = ToolMiddleware(
        name="drop", on_tool_call=lambda c: allow({"order": 7}, "trim")
    )
    model = scripted(one_refund())
    agent = build(model, desk.tool, links=(drop, spy("audit", log)))

    await agent.run("refund 7")

    assert [invalid("'amount' is required but missing")] == tool_reads(model)
    assert ([], ["before:audit"]) == (desk.runs, log)
    assert [] == of_type(await stored(agent), "tool.dispatched")
    await assert_fold_matches(agent)


async def test_g55_a_non_mapping_is_named_by_its_shape() -> None:
    """G55/G16: a non-mapping reads `arguments: expected an object, got <shape>`."""
    desk = Desk()
    listify = ToolMiddleware(
        name="listify", on_tool_call=lambda c: allow([7, 250], "positional")
    )
    model = scripted(one_refund())
    agent = build(model, desk.tool, links=(listify,))

    await agent.run("refund 7")

    assert [invalid("arguments: expected an object, got a list")] == tool_reads(model)
    assert [] == desk.runs
    await assert_fold_matches(agent)


async def test_g55_every_issue_gets_its_own_line() -> None:
    """G55: each missing field is one line, in the schema's order."""
    desk = Desk()
    model = scripted([calls(call("c1", "refund")), "done"])
    agent = build(model, desk.tool)

    await agent.run("refund")

    assert [
        invalid("'order' is required but missing", "'amount' is required but missing")
    ] == tool_reads(model)
    await assert_fold_matches(agent)


async def test_g55_a_direct_tool_is_validated_against_its_schema() -> None:
    """G55: a Tool(...) with a JSON schema is validated by that schema."""
    runs: list[Any] = []
    refund = Tool("refund", "Refund.", REFUND_SCHEMA, lambda **kw: runs.append(kw))
    model = scripted([calls(call("c1", "refund", amount=5)), "done"])
    agent = build(model, refund)

    await agent.run("refund")

    assert [invalid("'order' is required but missing")] == tool_reads(model)
    assert [] == runs
    await assert_fold_matches(agent)


# -- G56: check-in ------------------------------------------------------------------


async def test_g56_check_in_true_pauses_without_a_row() -> None:
    """G56: a tripping check-in pauses with kind check-in, no middleware, no row."""
    desk = Desk(check_in=True)
    watcher = Recorder()
    agent = (
        Agent.create(provider=scripted(one_refund()), model="m")
        .tool(desk.tool)
        .watch(watcher)
        .build()
    )

    paused = await agent.run("refund 7")

    assert is_ask_pause(paused)
    assert ("check-in", "refund", "c1") == (
        paused.kind,
        paused.tool_name,
        paused.tool_call_id,
    )
    assert (
        MiddlewareAsk(
            question="Approve a call to 'refund'?",
            detail={"order": 7, "amount": 250},
            middleware=None,
            component_id=None,
        )
        == paused.ask
    )
    assert [] == desk.runs
    assert () == agent.last_snapshot().middleware_decisions
    assert [] == watcher.of("middleware.decision")
    assert ["check-in"] == [e.kind for e in watcher.of("pause.request")]
    await assert_fold_matches(agent)


async def test_g56_a_predicate_judges_the_validated_arguments() -> None:
    """G56: the predicate sees validated arguments; False runs the tool, True pauses."""
    seen: list[Any] = []

    def big(args: Any) -> bool:
        seen.append(args)
        return args["amount"] > 100

    desk = Desk(check_in=big)
    model = scripted(
        [
            calls(
                call("c1", "refund", order=8, amount=5),
                call("c2", "refund", order=7, amount=250),
            ),
            "done",
        ]
    )
    agent = build(model, desk.tool)

    paused = await agent.run("refund both")

    assert is_ask_pause(paused)
    assert "c2" == paused.tool_call_id
    assert [{"order": 8, "amount": 5.0}, {"order": 7, "amount": 250.0}] == seen
    assert [float, float] == [type(a["amount"]) for a in seen]
    assert [{"order": 8, "amount": 5.0}] == desk.runs
    await assert_fold_matches(agent)


async def test_g56_a_predicate_that_raises_trips() -> None:
    """G56: a raising predicate trips the check-in: a person decides."""

    def broken(args: Any) -> bool:
        raise ValueError("rules file missing")

    desk = Desk(check_in=broken)
    agent = build(scripted(one_refund()), desk.tool)

    paused = await agent.run("refund 7")

    assert is_ask_pause(paused)
    assert ("check-in", []) == (paused.kind, desk.runs)
    await assert_fold_matches(agent)


async def test_g56_approval_continues_at_credentials() -> None:
    """G56: approval resolves credentials, then runs the tool; still no row."""
    log: list[Any] = []

    def refund(order: int, amount: float, credentials: dict[str, str]) -> str:
        """Refund an order."""
        log.append(("execute", credentials))
        return "refunded"

    def resolve(name: str) -> str:
        log.append(("resolve", name))
        return "k-9"

    guarded = tool(refund, check_in=True, credentials=("DESK_KEY",))
    model = scripted(one_refund())
    agent = build(model, guarded, credentials=resolve)

    paused = await agent.run("refund 7")
    assert is_ask_pause(paused)
    assert [] == log
    assert "done" == await agent.resume(paused.checkpoint, check_in_approved(by="dana"))

    assert [("resolve", "DESK_KEY"), ("execute", {"DESK_KEY": "k-9"})] == log
    assert ["refunded"] == tool_reads(model)
    assert () == agent.last_snapshot().middleware_decisions
    await assert_fold_matches(agent)


@pytest.mark.parametrize(
    ("note", "reads"),
    [
        ("not this week", "declined by human: not this week"),
        (None, "declined by human"),
    ],
    ids=["with-note", "without-note"],
)
async def test_g56_a_declined_check_in_is_a_refusal_without_a_row(
    note: str | None, reads: str
) -> None:
    """G56/G64: a decline reads `declined by human[: note]`, files no row."""
    desk = Desk(check_in=True)
    model = scripted(one_refund())
    agent = build(model, desk.tool)

    paused = await agent.run("refund 7")
    assert is_ask_pause(paused)
    out = await agent.resume(paused.checkpoint, check_in_declined(by="dana", note=note))

    assert "done" == out
    assert [reads] == tool_reads(model)
    assert [] == desk.runs
    assert () == agent.last_snapshot().middleware_decisions
    await assert_fold_matches(agent)


# -- G57: credentials ---------------------------------------------------------------

SECRET = "sk-live-7f3a9c"


async def _secret_free_everywhere(agent: Agent, model: Any, watcher: Recorder) -> None:
    """No record the library keeps or serves holds the secret."""
    blobs = [r.data.decode() for r in await agent.store.read(agent.session_id or "")]
    blobs += [encode_event(e).decode() for e in watcher.events]
    blobs += [repr(r) for r in model.requests]
    blobs.append(msgspec.json.encode(agent.last_snapshot()).decode())
    checkpoint = agent.checkpoint()
    blobs.append(checkpoint.to_json() if checkpoint else "")
    assert [] == [b for b in blobs if SECRET in b]


@pytest.mark.parametrize(
    "resolver",
    [{"DESK_KEY": SECRET}, lambda name: SECRET if name == "DESK_KEY" else None],
    ids=["mapping", "callable"],
)
async def test_g57_credential_values_reach_execute_only(resolver: Any) -> None:
    """G57: the value reaches execute; no context, row, event or message holds it."""
    received, contexts = [], []

    def refund(order: int, amount: float, credentials: dict[str, str]) -> str:
        """Refund an order."""
        received.append(credentials)
        return f"refunded {amount} on {order}"

    def look(ctx: Any) -> Any:
        contexts.append(repr(ctx))
        return allow()

    keyed = Tool(
        "refund", "Refund an order.", REFUND_SCHEMA, refund, credentials=("DESK_KEY",)
    )
    watcher = Recorder()
    model = scripted(one_refund())
    agent = (
        Agent.create(provider=model, model="m", credentials=resolver)
        .tool(keyed)
        .tool_middleware(
            ToolMiddleware(name="look", on_tool_call=look, on_tool_result=look)
        )
        .watch(watcher)
        .build()
    )

    assert "done" == await agent.run("refund 7")

    assert [{"DESK_KEY": SECRET}] == received
    assert ["refunded 250 on 7"] == tool_reads(model)
    assert 2 == len(contexts)
    assert [] == [c for c in contexts if SECRET in c]
    await _secret_free_everywhere(agent, model, watcher)
    await assert_fold_matches(agent)


@pytest.mark.parametrize(
    "options",
    [{}, {"credentials": {"OTHER": "x"}}, {"credentials": lambda name: None}],
    ids=["no-resolver", "missing-from-mapping", "callable-returns-none"],
)
async def test_g57_an_unresolved_credential_refuses_the_call(options: Any) -> None:
    """G57: an unresolved credential refuses the call, naming tool and credential."""
    desk = Desk(credentials=("DESK_KEY",))
    model = scripted(one_refund())
    agent = build(model, desk.tool, **options)

    assert "done" == await agent.run("refund 7")

    (text,) = tool_reads(model)
    assert (True, True) == ("'refund'" in text, "'DESK_KEY'" in text)
    assert [] == desk.runs
    assert [] == of_type(await stored(agent), "tool.dispatched")
    await assert_fold_matches(agent)


async def test_g57_a_refusal_for_one_credential_never_shows_another() -> None:
    """G57: a tool with one resolved and one missing credential leaks neither value."""
    desk = Desk(credentials=("DESK_KEY", "BANK_KEY"))
    model = scripted(one_refund())
    watcher = Recorder()
    agent = (
        Agent.create(provider=model, model="m", credentials={"DESK_KEY": SECRET})
        .tool(desk.tool)
        .watch(watcher)
        .build()
    )

    await agent.run("refund 7")

    (text,) = tool_reads(model)
    assert (True, True) == ("'refund'" in text, "'BANK_KEY'" in text)
    assert [] == desk.runs
    await _secret_free_everywhere(agent, model, watcher)
    await assert_fold_matches(agent)


# -- G58: tools ---------------------------------------------------------------------


async def test_g58_tool_decorator_reads_the_function() -> None:
    """G58: @tool takes its name, description and schema from the function."""

    @tool
    def refund(order: int, amount: float, reason: str = "customer request") -> str:
        """Refund an order, in full or in part."""
        return f"{order}:{amount!r}:{reason}"

    model = scripted([calls(call("c1", "refund", order=7, amount=250)), "done"])
    agent = build(model, refund)

    await agent.run("refund 7")

    assert ("refund", "Refund an order, in full or in part.") == (
        refund.name,
        refund.description,
    )
    assert {
        "type": "object",
        "properties": {
            "order": {"type": "integer"},
            "amount": {"type": "number"},
            "reason": {"type": "string", "default": "customer request"},
        },
        "required": ["order", "amount"],
    } == refund.input_schema
    assert (
        ToolSpec("refund", "Refund an order, in full or in part.", refund.input_schema),
    ) == model.requests[0].tools
    assert ["7:250.0:customer request"] == tool_reads(model)
    await assert_fold_matches(agent)


async def test_g58_tool_built_directly_may_be_async_and_has_a_source() -> None:
    """G58/G78: Tool(name, description, schema, execute, source), async execute."""
    sources: list[Any] = []

    async def refund(order: int, amount: float) -> dict[str, Any]:
        return {"order": order, "refunded": amount}

    direct = Tool("refund", "Refund an order.", REFUND_SCHEMA, refund, "billing")
    look = ToolMiddleware(
        name="look", on_tool_call=lambda c: sources.append(c.tool_source) or allow()
    )
    model = scripted(one_refund(order=7, amount=2.5))
    agent = build(model, direct, links=(look,))

    await agent.run("refund 7")

    assert (None, False) == (direct.check_in, direct.idempotent)
    assert ["billing"] == sources
    assert ['{"order":7,"refunded":2.5}'] == tool_reads(model)
    await assert_fold_matches(agent)


def test_g58_tool_keywords_set_check_in_and_idempotence() -> None:
    """G58: Tool(..., *, check_in=..., idempotent=...) keeps what it is given."""

    def pred(args: Any) -> bool:
        return True

    t = Tool(
        "refund",
        "Refund.",
        REFUND_SCHEMA,
        lambda **kw: None,
        check_in=pred,
        idempotent=True,
    )

    assert ("refund", "Refund.", None, pred, True) == (
        t.name,
        t.description,
        t.source,
        t.check_in,
        t.idempotent,
    )


async def test_g58_execute_receives_the_validated_arguments_as_keywords() -> None:
    """G58: execute gets keyword arguments converted to the signature's types."""
    received: list[Any] = []

    @tool
    def refund(order: int, amount: float, tags: list[str]) -> str:
        """Refund."""
        received.append((order, amount, tags))
        return "ok"

    model = scripted(
        [calls(call("c1", "refund", order=7, amount=3, tags=["vip"])), "done"]
    )
    agent = build(model, refund)

    await agent.run("refund")

    assert [(7, 3.0, ["vip"])] == received
    assert [float] == [type(r[1]) for r in received]
    assert (
        ToolCallRequest(
            id="c1", name="refund", args={"order": 7, "amount": 3, "tags": ["vip"]}
        )
        == (model.requests[1].messages[1].tool_calls[0])
    )
    await assert_fold_matches(agent)
