"""helmlog's governance inside a Pydantic AI agent: the five moments, asks, tools.

A real ``pydantic_ai.Agent`` with Pydantic AI's own test models
(``FunctionModel`` replying from a script with fixed tool call ids,
``TestModel``); the act-table, the ledger and the session are helmlog's, on
its memory store, through ``HelmlogCapability``.

Laws: G7, G15, G18, G25, G29, G33, G37, G39, G59, G61, G79, G91; issue 27
items 3, 4, 5.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import ImageUrl, RunContext
from pydantic_ai import Tool as PydanticTool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
from pydantic_ai.toolsets import FunctionToolset

from helmlog import (
    Agent,
    AskPause,
    DecisionRequiredError,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    sliding_window,
    tool,
)
from helmlog.events import (
    LlmEnded,
    LlmStarted,
    MemoryEventStore,
    MiddlewareDecision,
    fold,
)
from helmlog.integrations import Governance
from helmlog.integrations.pydantic_ai import (
    HelmlogCapability,
    HelmlogToolset,
    deferred_results,
    to_messages,
    to_model_messages,
    tool_from,
)
from helmlog.runtime.lowlevel import SteeringError
from helmlog.runtime.providers import Reply, framework_model, scripted
from helmlog.runtime.providers import ToolCallRequest as Call

# -- Pydantic AI's own test model, scripted ------------------------------------


class Script:
    """``FunctionModel``'s function: the scripted replies in order, and a log
    of the messages each request sent (what the model read)."""

    def __init__(self, *replies: ModelResponse) -> None:
        self.replies = list(replies)
        self.sent: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent.append(list(messages))
        return self.replies.pop(0)

    def last_tool_return(self) -> ToolReturnPart:
        last = self.sent[-1][-1]
        assert isinstance(last, ModelRequest)
        part = last.parts[-1]
        assert isinstance(part, ToolReturnPart)
        return part


def calls(*items: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in items]
    )


def text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


class Desk:
    """The framework's tools, counting their executions."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    def add_to(self, agent: PydanticAgent[Any, Any]) -> None:
        @agent.tool_plain
        def lookup_order(order_id: str) -> dict[str, Any]:
            """Look an order up."""
            self.ran.append(("lookup_order", {"order_id": order_id}))
            return {
                "order_id": order_id,
                "status": "paid",
                "card": "4111 1111 1111 1111",
            }

        @agent.tool_plain
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.ran.append(("refund", {"order_id": order_id, "amount": amount}))
            return f"refunded {amount} on order {order_id}"


def _native_lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "status": "paid", "card": "4111 1111 1111 1111"}


def _native_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on order {order_id}"


NATIVE_TOOLS = (
    Tool(
        "lookup_order",
        "Look an order up.",
        tool(_native_lookup_order).input_schema,
        _native_lookup_order,
    ),
    Tool(
        "refund", "Refund an order.", tool(_native_refund).input_schema, _native_refund
    ),
)
"""``Desk``'s tools as the native loop's, for the record to compare with."""


def ceiling(call: Any) -> Any:
    if call.tool_name == "refund" and float(call.args["amount"]) > 10_000:
        return deny("refunds over $10,000 go to the finance desk")
    return allow()


def four_eyes(call: Any) -> Any:
    if call.tool_name == "refund" and float(call.args["amount"]) > 500:
        return ask("Refund over $500?")
    return allow()


RULES: dict[str, Any] = {
    "before_tool": [
        ToolMiddleware(name="refund-ceiling", on_tool_call=ceiling),
        ToolMiddleware(name="four-eyes", on_tool_call=four_eyes),
    ]
}


def governed(
    script: Callable[[list[ModelMessage], AgentInfo], ModelResponse],
    *,
    act: dict[str, Any] | None = None,
    store: MemoryEventStore | None = None,
    window: Any = None,
    **capability: Any,
) -> tuple[PydanticAgent[None, Any], Governance, Desk]:
    builder = Agent.create(
        provider=framework_model("pydantic-ai"),
        model="function",
        store=store or MemoryEventStore(),
    )
    if act:
        builder = builder.act(**act)
    if window is not None:
        builder = builder.window(window)
    governance = Governance(builder.build())
    agent: PydanticAgent[None, Any] = PydanticAgent(
        FunctionModel(script),
        output_type=[str, DeferredToolRequests],
        capabilities=[HelmlogCapability(governance, **capability)],
    )
    desk = Desk()
    desk.add_to(agent)
    return agent, governance, desk


async def rows(governance: Governance, session_id: str) -> list[MiddlewareDecision]:
    events = [r.decode() for r in await governance.store.read(session_id)]
    return list(fold(events).middleware_decisions)


def brief(
    decisions: list[MiddlewareDecision],
) -> list[tuple[str, str, str, str | None]]:
    return [(r.middleware, r.moment, r.outcome, r.why) for r in decisions]


# -- tool moments ---------------------------------------------------------------


async def test_g15_before_tool_deny_does_not_run_the_tool_and_the_model_reads_it() -> (
    None
):
    """G15: a before-tool denial: the tool never runs; the model reads the
    refusal as the tool's message (a failed ToolReturnPart), the ledger holds
    the row."""
    script = Script(
        calls(("c1", "refund", {"order_id": "7", "amount": 20_000})), text("Sorry.")
    )
    agent, governance, desk = governed(script, act=RULES)

    result = await agent.run("Refund order 7 for $20,000")

    assert "Sorry." == result.output
    assert [] == desk.ran
    returned = script.last_tool_return()
    assert "failed" == returned.outcome
    assert "refunds over $10,000 go to the finance desk" in returned.content
    assert [
        (
            "refund-ceiling",
            "before-tool",
            "deny",
            "refunds over $10,000 go to the finance desk",
        )
    ] == brief(await rows(governance, result.conversation_id))


async def test_g7_a_rule_that_raises_is_a_denial() -> None:
    """G7: a before-tool link that raises denies the call; the tool does not
    run and the model reads a failed tool message."""

    def broken(call: Any) -> Any:
        raise KeyError("amount")

    script = Script(
        calls(("c1", "refund", {"order_id": "7", "amount": 5})), text("Sorry.")
    )
    agent, governance, desk = governed(
        script,
        act={"before_tool": [ToolMiddleware(name="broken", on_tool_call=broken)]},
    )

    result = await agent.run("Refund order 7 for $5")

    assert [] == desk.ran
    assert "failed" == script.last_tool_return().outcome
    (row,) = await rows(governance, result.conversation_id)
    assert ("broken", "before-tool", "deny") == (
        row.middleware,
        row.moment,
        row.outcome,
    )


async def test_g18_after_tool_transform_is_what_the_model_reads() -> None:
    """G18/G25: an after-tool transform replaces the result the model reads;
    the tool ran once with the model's arguments."""

    def mask(res: Any) -> Any:
        if isinstance(res.result, dict) and "card" in res.result:
            return allow({**res.result, "card": "[card]"}, "card numbers are masked")
        return allow()

    script = Script(calls(("c1", "lookup_order", {"order_id": "7"})), text("Paid."))
    agent, governance, desk = governed(
        script,
        act={"after_tool": [ToolMiddleware(name="mask-cards", on_tool_result=mask)]},
    )

    result = await agent.run("Where is order 7?")

    assert [("lookup_order", {"order_id": "7"})] == desk.ran
    returned = script.last_tool_return()
    assert '{"order_id":"7","status":"paid","card":"[card]"}' == returned.content
    assert [("mask-cards", "after-tool", "allow", "card numbers are masked")] == brief(
        await rows(governance, result.conversation_id)
    )


# -- asks: Pydantic AI's deferred tool approval -----------------------------------


async def test_g59_an_ask_is_a_deferred_approval_and_runs_once_when_approved() -> None:
    """G59: an ask ends the run with DeferredToolRequests (the question in its
    metadata); the next run's DeferredToolResults approves it, signed: the
    tool runs once, the row names who approved."""
    script = Script(
        calls(("c1", "refund", {"order_id": "7", "amount": 800})), text("Refunded.")
    )
    agent, governance, desk = governed(script, act=RULES)

    first = await agent.run("Refund order 7 for $800")

    asked = first.output
    assert isinstance(asked, DeferredToolRequests)
    assert ["c1"] == [c.tool_call_id for c in asked.approvals]
    meta = asked.metadata["c1"]["helmlog"]
    assert {
        "session_id": first.conversation_id,
        "question": "Refund over $500?",
        "middleware": "four-eyes",
        "kind": "ask",
    } == {k: meta[k] for k in ("session_id", "question", "middleware", "kind")}
    assert [] == desk.ran

    done = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=deferred_results(asked, by="dana@ops", note="verified"),
    )

    assert "Refunded." == done.output
    assert [("refund", {"order_id": "7", "amount": 800.0})] == desk.ran
    assert "refunded 800.0 on order 7" == script.last_tool_return().content
    assert [
        ("refund-ceiling", "before-tool", "allow", None),
        ("four-eyes", "before-tool", "ask", "Refund over $500?"),
        ("four-eyes", "before-tool", "allow", "approved by dana@ops: verified"),
    ] == brief(await rows(governance, first.conversation_id))


async def test_g59_a_tool_denied_answer_is_helmlogs_decline() -> None:
    """G59/G61: Pydantic AI's ToolDenied is recorded as a decline by the named
    person; the tool never runs; the model reads helmlog's refusal."""
    script = Script(
        calls(("c1", "refund", {"order_id": "7", "amount": 800})), text("Not refunded.")
    )
    agent, governance, desk = governed(script, act=RULES)
    first = await agent.run("Refund order 7 for $800")

    done = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=deferred_results(
            first.output, by="eve@ops", approved=False, note="not this one"
        ),
    )

    assert "Not refunded." == done.output
    assert [] == desk.ran
    returned = script.last_tool_return()
    assert "denied" == returned.outcome
    history = await _events_history(governance, first.conversation_id)
    refusal = next(m for m in history if m.role == "tool" and m.tool_call_id == "c1")
    decisions = brief(await rows(governance, first.conversation_id))
    assert (
        "four-eyes",
        "before-tool",
        "deny",
        "declined by eve@ops: not this one",
    ) == (decisions[-1])
    assert refusal.content == returned.content


async def test_r9_an_approval_that_names_nobody_is_a_typed_error() -> None:
    """R9/G61: helmlog records who decided; Pydantic AI's bare ``True`` names
    nobody: DecisionRequiredError, nothing runs; the ask stays pending."""
    script = Script(calls(("c1", "refund", {"order_id": "7", "amount": 800})))
    agent, governance, desk = governed(script, act=RULES)
    first = await agent.run("Refund order 7 for $800")

    with pytest.raises(DecisionRequiredError, match="names nobody"):
        await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"c1": True}),
        )

    assert [] == desk.ran
    state = fold(
        [r.decode() for r in await governance.store.read(first.conversation_id)]
    )
    assert state.pending is not None
    assert "c1" == state.pending.tool_call_id


async def test_r9_the_capabilitys_approver_signs_a_bare_approval() -> None:
    """R9: ``HelmlogCapability(approver=...)`` names who decided when the
    answer's metadata does not."""
    script = Script(
        calls(("c1", "refund", {"order_id": "7", "amount": 800})), text("Ok.")
    )
    agent, governance, desk = governed(script, act=RULES, approver="desk-bot")
    first = await agent.run("Refund order 7 for $800")

    await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"c1": True}),
    )

    assert 1 == len(desk.ran)
    assert (
        "approved by desk-bot"
        == (await rows(governance, first.conversation_id))[-1].why
    )


async def test_g66_a_batch_waits_behind_its_ask_and_files_the_native_record() -> None:
    """G66: a reply proposing an asking refund and a lookup: both wait (the
    lookup behind the ask, as a deferred approval too); approved, both run
    once, and the record is the native loop's, row for row, event for event."""
    batch = calls(
        ("c1", "refund", {"order_id": "7", "amount": 800}),
        ("c2", "lookup_order", {"order_id": "7"}),
    )
    agent, governance, desk = governed(Script(batch, text("Done.")), act=RULES)

    first = await agent.run("Refund and look up order 7", conversation_id="batch")

    asked = first.output
    assert isinstance(asked, DeferredToolRequests)
    assert ["c1", "c2"] == [c.tool_call_id for c in asked.approvals]
    assert "c1" == asked.metadata["c2"]["helmlog"]["waits_on"]
    assert [] == desk.ran
    done = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=deferred_results(asked, by="dana@ops"),
    )
    assert "Done." == done.output
    assert ["refund", "lookup_order"] == [name for name, _ in desk.ran]

    native_store = MemoryEventStore()
    native = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(id=p.tool_call_id, name=p.tool_name, args=p.args)
                            for p in batch.tool_calls
                        ]
                    ),
                    "Done.",
                ]
            ),
            model="function",
            store=native_store,
        )
        .tool(*NATIVE_TOOLS)
        .act(**RULES)
        .build()
    )
    paused = await native.run("Refund and look up order 7", session_id="batch")
    assert isinstance(paused, AskPause)
    await native.resume(paused.checkpoint, check_in_approved(by="dana@ops"))
    native_events = [r.decode() for r in await native_store.read("batch")]
    events = [r.decode() for r in await governance.store.read("batch")]
    assert fold(native_events).middleware_decisions == fold(events).middleware_decisions
    assert [e.type for e in native_events] == [e.type for e in events]


async def test_g55_arguments_the_framework_refuses_are_walked_and_refused() -> None:
    """G55/G66: a call whose arguments Pydantic AI refuses never reaches the
    toolset; helmlog walks it (before-tool, then its own validation refuses
    it), the model reads the invalid-arguments text as a failed tool message,
    the tool never runs; the record is the native loop's, event for event."""
    passes = {
        "before_tool": [ToolMiddleware(name="log", on_tool_call=lambda c: allow())]
    }
    replies = [
        calls(("c1", "refund", {"order_id": 7, "amount": 5})),
        calls(("c2", "refund", {"order_id": "7", "amount": 5})),
        text("Done."),
    ]
    script = Script(*replies)
    agent, governance, desk = governed(script, act=passes)

    result = await agent.run("Refund order 7 for $5", conversation_id="args")

    assert "Done." == result.output
    assert [("refund", {"order_id": "7", "amount": 5.0})] == desk.ran
    refused = script.sent[1][-1].parts[-1]
    assert isinstance(refused, ToolReturnPart)
    assert "failed" == refused.outcome
    assert refused.content.startswith("Invalid arguments for tool 'refund'")

    native_store = MemoryEventStore()
    native = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(id=p.tool_call_id, name=p.tool_name, args=p.args)
                            for p in r.tool_calls
                        ]
                    )
                    for r in replies[:2]
                ]
                + ["Done."]
            ),
            model="function",
            store=native_store,
        )
        .tool(*NATIVE_TOOLS)
        .act(**passes)
        .build()
    )
    assert "Done." == await native.run("Refund order 7 for $5", session_id="args")
    native_events = [r.decode() for r in await native_store.read("args")]
    events = [r.decode() for r in await governance.store.read("args")]
    assert fold(native_events).middleware_decisions == fold(events).middleware_decisions
    assert [e.type for e in native_events] == [e.type for e in events]
    assert fold(native_events).history[2] == fold(events).history[2]  # G55's text


async def test_g25_a_tool_that_raises_is_an_error_the_model_reads() -> None:
    """G25/G18: a framework tool that raises: the error is recorded as the
    native loop records a raising tool, the model reads it as a failed tool
    message, and the run goes on."""

    def broken(order_id: str) -> str:
        """Look an order up (the backend is down)."""
        raise ConnectionError("orders backend unreachable")

    replies = [calls(("c1", "broken", {"order_id": "7"})), text("Try later.")]
    script = Script(*replies)
    agent, governance, _ = governed(script)
    agent.tool_plain(broken)
    native_store = MemoryEventStore()
    native = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(id="c1", name="broken", args={"order_id": "7"})
                        ]
                    ),
                    "Try later.",
                ]
            ),
            model="function",
            store=native_store,
        )
        .tool(tool(broken))
        .build()
    )

    result = await agent.run("Where is order 7?", conversation_id="raises")
    assert "Try later." == await native.run("Where is order 7?", session_id="raises")

    assert "Try later." == result.output
    returned = script.last_tool_return()
    assert "failed" == returned.outcome
    native_events = [r.decode() for r in await native_store.read("raises")]
    events = [r.decode() for r in await governance.store.read("raises")]
    assert [e.type for e in native_events] == [e.type for e in events]
    assert fold(native_events).history[2] == fold(events).history[2]
    assert returned.content == fold(events).history[2].content


async def test_concurrent_runs_of_one_agent_are_separate_sessions() -> None:
    """Issue 27 item 5: one governed agent, two conversations at once: each
    run holds its own turn (``for_run``), each session its own record."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = messages[0].parts[-1].content  # type: ignore[union-attr]
        if len(messages) == 1:
            order = "7" if "7" in prompt else "9"
            return calls((f"c-{order}", "lookup_order", {"order_id": order}))
        return text(f"Looked up: {prompt}")

    agent, governance, _ = governed(respond)

    seven, nine = await asyncio.gather(
        agent.run("order 7", conversation_id="s-7"),
        agent.run("order 9", conversation_id="s-9"),
    )

    assert ("Looked up: order 7", "Looked up: order 9") == (seven.output, nine.output)
    for sid, order in (("s-7", "7"), ("s-9", "9")):
        history = await _events_history(governance, sid)
        assert [f"c-{order}"] == [m.tool_call_id for m in history if m.role == "tool"]


async def test_g13_the_capabilitys_identity_is_what_the_rules_see() -> None:
    """G13/G28: ``HelmlogCapability(identity=...)`` is the turn's identity:
    the input and before-tool rules read it."""
    seen: list[Any] = []

    def who(call: Any) -> Any:
        seen.append(call.identity.get("desk"))
        return allow()

    def who_speaks(msg: Any) -> Any:
        seen.append(msg.identity.get("desk"))
        return allow()

    script = Script(calls(("c1", "lookup_order", {"order_id": "7"})), text("Paid."))
    agent, _, _ = governed(
        script,
        act={
            "input": [MessageMiddleware(name="who-speaks", on_message=who_speaks)],
            "before_tool": [ToolMiddleware(name="who", on_tool_call=who)],
        },
        identity={"desk": "refunds-emea"},
    )

    await agent.run("Where is order 7?")

    assert ["refunds-emea", "refunds-emea"] == seen  # input, then before-tool


# -- message moments --------------------------------------------------------------


def _scrub(msg: Any) -> Any:
    if "123-45-6789" in msg.content:
        return allow(msg.content.replace("123-45-6789", "[ssn]"), "an SSN is masked")
    return allow()


async def test_g33_the_model_reads_the_admitted_prompt() -> None:
    """G33: the input chain runs before anything is committed; the model and
    the run's history hold the admitted text, never the SSN."""
    script = Script(text("Noted."))
    agent, governance, _ = governed(
        script, act={"input": [MessageMiddleware(name="scrub", on_message=_scrub)]}
    )

    result = await agent.run("My SSN is 123-45-6789")

    first = script.sent[0][0]
    assert isinstance(first, ModelRequest)
    assert ["My SSN is [ssn]"] == [
        p.content for p in first.parts if isinstance(p, UserPromptPart)
    ]
    assert "123-45-6789" not in str(result.all_messages())
    # G26: one message list, two phases (the answer passes it too).
    assert [
        ("scrub", "input", "allow", "an SSN is masked"),
        ("scrub", "output", "allow", None),
    ] == brief(await rows(governance, result.conversation_id))


async def test_g37_a_refused_prompt_raises_and_never_reaches_the_model() -> None:
    """G35/G37: an input denial raises MessageDeniedError from the run; the
    model is never called; the row is filed."""
    no_pii = MessageMiddleware(
        name="no-pii",
        on_message=lambda m: deny("no SSNs here") if "123-45" in m.content else allow(),
    )
    script = Script(text("never"))
    agent, governance, _ = governed(script, act={"input": [no_pii]})

    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("My SSN is 123-45-6789", conversation_id="s-denied")

    assert ("no-pii", "input") == (caught.value.middleware, caught.value.phase)
    assert [] == script.sent
    assert [("no-pii", "input", "deny", "no SSNs here")] == brief(
        await rows(governance, "s-denied")
    )


async def test_g39_an_output_transform_is_the_answer_and_the_history() -> None:
    """G39: the output chain admits the final answer; a transform is the run's
    output and replaces the draft in its message history."""
    codename = MessageMiddleware(
        name="no-codenames",
        on_message=lambda m: (
            allow(m.content.replace("BLUEBIRD", "[project]"), "codename")
            if "BLUEBIRD" in m.content
            else allow()
        ),
    )
    script = Script(text("Filed under BLUEBIRD."))
    agent, governance, _ = governed(script, act={"output": [codename]})

    result = await agent.run("Status?")

    assert "Filed under [project]." == result.output
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    assert "Filed under [project]." == last.text
    history = (await _events_history(governance, result.conversation_id))[-1]
    assert Message(role="assistant", content="Filed under [project].") == history


async def test_g43_a_refused_answer_raises_message_denied_error() -> None:
    """G43: an output denial raises MessageDeniedError; the row is filed."""
    no_codenames = MessageMiddleware(
        name="no-codenames",
        on_message=lambda m: (
            deny("codenames stay inside") if "BLUEBIRD" in m.content else allow()
        ),
    )
    script = Script(text("Filed under BLUEBIRD."))
    agent, governance, _ = governed(script, act={"output": [no_codenames]})

    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("Status?", conversation_id="s-out")

    assert ("no-codenames", "output") == (caught.value.middleware, caught.value.phase)
    assert [
        ("no-codenames", "input", "allow", None),  # G26: one list, two phases
        ("no-codenames", "output", "deny", "codenames stay inside"),
    ] == brief(await rows(governance, "s-out"))


async def test_g41_a_streamed_run_is_refused_before_the_model_is_called() -> None:
    """G41: drafts are held; a streamed answer would reach the caller before
    the output rules: ``run_stream`` is refused (SteeringError
    ``"unsupported"``) before the model is called, the turn closed as failed;
    the conversation goes on with a next run."""
    script = Script(text("Held."))
    agent, governance, _ = governed(script)

    with pytest.raises(SteeringError) as caught:
        async with agent.run_stream("Status?", conversation_id="s-stream") as run:
            await run.get_output()

    assert "unsupported" == caught.value.reason
    assert [] == script.sent
    result = await agent.run("Status?", conversation_id="s-stream")
    assert "Held." == result.output
    events = [r.decode() for r in await governance.store.read("s-stream")]
    assert ["error.fatal", "agent.turn_end"] == [
        e.type for e in events if e.type in ("error.fatal", "agent.turn_end")
    ]


async def _events_history(
    governance: Governance, session_id: str
) -> tuple[Message, ...]:
    events = [r.decode() for r in await governance.store.read(session_id)]
    return tuple(fold(events).history)


# -- the model: the window, the replies --------------------------------------------


async def test_g79_the_window_is_the_models_view_and_the_reply_is_recorded() -> None:
    """G79: the window's plan is what the model is sent (a next turn of the
    same conversation sees the last turn only); LlmStarted names the
    framework's provider and LlmEnded the model's usage."""
    script = Script(text("One."), text("Two."))
    agent, governance, _ = governed(script, window=sliding_window(keep_recent_turns=1))

    first = await agent.run("first question")
    second = await agent.run("second question", message_history=first.all_messages())

    assert first.conversation_id == second.conversation_id
    assert [
        Message(role="user", content="second question"),
    ] == list(to_messages(script.sent[1]))
    events = [r.decode() for r in await governance.store.read(first.conversation_id)]
    started = [e for e in events if isinstance(e, LlmStarted)]
    ended = [e for e in events if isinstance(e, LlmEnded)]
    assert ["pydantic-ai", "pydantic-ai"] == [e.provider for e in started]
    usage = second.all_messages()[-1].usage  # type: ignore[union-attr]
    assert {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    } == (ended[-1].usage)
    assert 2 == fold(events).turn


# -- bad input --------------------------------------------------------------------


def test_bad_input_to_the_capability_is_a_typed_error_naming_it() -> None:
    """Bad input gets a clear, typed error naming the problem."""
    with pytest.raises(TypeError, match="Governance"):
        HelmlogCapability("not a governance")  # type: ignore[arg-type]
    governance = Governance(
        Agent.create(provider=framework_model("pydantic-ai"), model="m").build()
    )
    with pytest.raises(TypeError, match="identity"):
        HelmlogCapability(governance, identity=["dana"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="approver"):
        HelmlogCapability(governance, approver="")
    with pytest.raises(TypeError, match="DeferredToolRequests"):
        deferred_results({"c1": True}, by="dana")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="by="):
        deferred_results(DeferredToolRequests(), by="")
    with pytest.raises(TypeError, match="HelmlogCapability"):
        HelmlogToolset(FunctionToolset([]))


async def test_g31_a_prompt_that_is_not_text_is_a_typed_error() -> None:
    """G31: helmlog governs text; an image prompt is refused before anything
    is recorded."""
    script = Script(text("never"))
    agent, governance, _ = governed(script)

    with pytest.raises(TypeError, match="text"):
        await agent.run(
            ["look", ImageUrl("https://example.com/x.png")], conversation_id="s-img"
        )

    assert [] == script.sent
    assert [] == await governance.store.read("s-img")


# -- tools across -----------------------------------------------------------------


def _lookup(order_id: str, verbose: bool = False) -> dict[str, Any]:
    """Look an order up by its id."""
    return {"order_id": order_id, "status": "paid", "verbose": verbose}


async def test_tool_from_pydantic_ai_keeps_name_description_schema_and_runs() -> None:
    """Issue 27 item 4: ``Tool.from_pydantic_ai`` keeps name, description and
    JSON schema; a native helmlog agent runs it through Pydantic AI."""
    source = PydanticTool(_lookup)
    made = Tool.from_pydantic_ai(source)

    assert ("_lookup", "Look an order up by its id.") == (made.name, made.description)
    assert source.tool_def.parameters_json_schema == made.input_schema

    agent = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(id="c1", name="_lookup", args={"order_id": "7"})
                        ]
                    ),
                    "Paid.",
                ]
            ),
            model="m",
        )
        .tool(made)
        .build()
    )
    assert "Paid." == await agent.run("Where is order 7?")
    tool_message = agent.last_snapshot().history[-2]
    assert '{"order_id":"7","status":"paid","verbose":false}' == tool_message.content


def test_tool_from_refuses_what_it_cannot_carry() -> None:
    """Bad input: not a Pydantic AI tool, or one that needs a RunContext."""
    with pytest.raises(TypeError, match=r"pydantic_ai\.Tool"):
        tool_from(_lookup)  # type: ignore[arg-type]

    def needs_ctx(ctx: RunContext[None], order_id: str) -> str:
        """Needs the run."""
        return order_id

    with pytest.raises(ValueError, match="RunContext"):
        tool_from(PydanticTool(needs_ctx))


def test_messages_convert_both_ways() -> None:
    """The converters keep roles, calls and tool results; consecutive tool
    messages share one request."""
    history = (
        Message(role="user", content="Refund order 7"),
        Message(
            role="assistant",
            tool_calls=(
                Call(id="c1", name="lookup_order", args={"order_id": "7"}),
                Call(id="c2", name="refund", args={"order_id": "7", "amount": 5}),
            ),
        ),
        Message(
            role="tool", content="paid", tool_call_id="c1", tool_name="lookup_order"
        ),
        Message(role="tool", content="done", tool_call_id="c2", tool_name="refund"),
        Message(role="assistant", content="Refunded."),
    )
    model_messages = to_model_messages(history)
    assert [ModelRequest, ModelResponse, ModelRequest, ModelResponse] == [
        type(m) for m in model_messages
    ]
    assert history == to_messages(model_messages)
    with pytest.raises(ValueError, match="role"):
        to_model_messages([Message(role="system", content="x")])
