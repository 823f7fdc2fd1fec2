"""helmlog's governance inside a LangChain v1 agent: the five moments, asks, tools.

``create_agent`` with the real LangGraph runtime and LangChain's own fake chat
model (``FakeMessagesListChatModel`` taught ``bind_tools``, as LangChain's own
agent tests do with their ``FakeToolCallingModel``); the act-table, the
ledger and the session are helmlog's, on its memory store.

Laws: G7, G15, G18, G29, G33, G37, G39, G59, G63, G79; issue 27 items 1, 4, 5.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Annotated, Any

import pydantic
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId
from langchain_core.tools import tool as lc_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from langsmith.run_helpers import tracing_context
from pydantic import Field

from helmlog import (
    Agent,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    deny,
    sliding_window,
)
from helmlog.events import (
    LlmEnded,
    LlmStarted,
    MemoryEventStore,
    MessageCommitted,
    fold,
)
from helmlog.integrations import Governance
from helmlog.integrations.langchain import (
    RECORDED,
    SESSION_KEY,
    HelmlogMiddleware,
    TracedHelmlogMiddleware,
    from_messages,
    governance,
    to_messages,
    tool_from,
)
from helmlog.runtime import WindowPlan
from helmlog.runtime.providers import Reply, framework_model, scripted
from helmlog.runtime.providers import ToolCallRequest as Call


class ScriptedChat(FakeMessagesListChatModel):
    """LangChain's own list-of-replies fake model, with the tool binding
    ``create_agent`` needs (a no-op: the replies are scripted) and a log of
    what it was sent."""

    sent: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.sent.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": i} for i, n, a in calls],
        usage_metadata={"input_tokens": 11, "output_tokens": 7, "total_tokens": 18},
    )


def _model(*replies: AIMessage | str) -> ScriptedChat:
    msgs = [r if isinstance(r, AIMessage) else AIMessage(content=r) for r in replies]
    return ScriptedChat(responses=msgs, sent=[])


class Desk:
    """The framework's tools, counting their runs."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []

        @lc_tool
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.runs.append(("refund", {"order_id": order_id, "amount": amount}))
            return (
                f"Refunded order {order_id}: ${amount:.2f} to card 4111 1111 1111 1111."
            )

        @lc_tool
        def lookup_order(order_id: str) -> dict[str, Any]:
            """Look up an order."""
            self.runs.append(("lookup_order", {"order_id": order_id}))
            return {"order_id": order_id, "total": 800.0}

        self.refund: BaseTool = refund
        self.lookup_order: BaseTool = lookup_order
        self.tools = [refund, lookup_order]


def _ceiling(call: Any) -> Any:
    amount = float(call.args.get("amount", 0))
    if amount > 10_000:
        return deny("refunds over $10,000 go to the finance desk")
    return allow()


def _four_eyes(call: Any) -> Any:
    if float(call.args.get("amount", 0)) > 500:
        return ask("Refund over $500?", detail={"amount": call.args["amount"]})
    return allow()


def _rules(store: MemoryEventStore, **act: Any) -> Agent:
    builder = Agent.create(
        provider=framework_model("langchain"), model="fake-chat", store=store
    )
    if act:
        builder = builder.act(**act)
    return builder.build()


def _agent(
    rules: Agent | Governance, model: ScriptedChat, desk: Desk, **kw: Any
) -> Any:
    return create_agent(
        model,
        desk.tools,
        middleware=[governance(rules)],
        checkpointer=InMemorySaver(),
        **kw,
    )


CFG = {"configurable": {"thread_id": "t-1"}}


async def _state(store: MemoryEventStore, sid: str) -> Any:
    return fold(r.decode() for r in await store.read(sid))


# -- before-tool: deny, throw --------------------------------------------------


async def test_g15_a_before_tool_denial_is_the_tools_error_and_it_never_runs() -> None:
    """G15: the tool does not run; the model reads the reason as the tool's
    message (``status="error"``), then answers; the row says deny."""
    store = MemoryEventStore()
    desk = Desk()
    rules = _rules(
        store,
        before_tool=[ToolMiddleware(name="refund-ceiling", on_tool_call=_ceiling)],
    )
    model = _model(
        _calls(("c1", "refund", {"order_id": "7", "amount": 20_000})),
        "I can't refund that much.",
    )
    out = await _agent(rules, model, desk).ainvoke(
        {"messages": [HumanMessage("Refund order 7 for $20,000")]}, CFG
    )
    assert [] == desk.runs
    reason = "refunds over $10,000 go to the finance desk"
    tool_msg = out["messages"][2]
    assert (ToolMessage, "error", reason, "c1") == (
        type(tool_msg),
        tool_msg.status,
        tool_msg.content,
        tool_msg.tool_call_id,
    )
    # The model's second request carries the refusal as the tool's message.
    assert reason == model.sent[1][-1].content
    assert "I can't refund that much." == out["messages"][-1].content
    state = await _state(store, out[SESSION_KEY])
    assert [("refund-ceiling", "before-tool", "deny", reason)] == [
        (r.middleware, r.moment, r.outcome, r.why) for r in state.middleware_decisions
    ]


async def test_g7_a_rule_that_raises_is_a_denial_and_the_tool_does_not_run() -> None:
    """G7: a before-tool hook that raises refuses the call with its text."""
    store = MemoryEventStore()
    desk = Desk()

    def broken(call: Any) -> Any:
        raise RuntimeError("rate table unavailable")

    rules = _rules(
        store, before_tool=[ToolMiddleware(name="flaky", on_tool_call=broken)]
    )
    model = _model(_calls(("c1", "lookup_order", {"order_id": "7"})), "Sorry.")
    out = await _agent(rules, model, desk).ainvoke(
        {"messages": [HumanMessage("Where is order 7?")]}, CFG
    )
    assert [] == desk.runs
    text = "middleware 'flaky' threw: rate table unavailable"
    assert ("error", text) == (out["messages"][2].status, out["messages"][2].content)
    rows = (await _state(store, out[SESSION_KEY])).middleware_decisions
    assert [("flaky", "deny", text)] == [(r.middleware, r.outcome, r.why) for r in rows]


# -- input, output, the model's reply --------------------------------------------


def _scrub(msg: Any) -> Any:
    if "123-45-6789" in msg.content:
        return allow(msg.content.replace("123-45-6789", "[SSN]"), "masked an SSN")
    return allow()


def _no_codename(msg: Any) -> Any:
    if msg.phase == "output" and "Bluebird" in msg.content:
        return deny("the answer names a codename")
    if msg.phase == "output" and "internal" in msg.content:
        return allow(msg.content.replace("internal", "our"), "no internal jargon")
    return allow()


async def test_g33_g39_input_and_output_rewrite_the_threads_messages() -> None:
    """G33: the model sees the admitted user message (the thread's too); G39:
    the output verdict is the answer the thread keeps; both rows are filed."""
    store = MemoryEventStore()
    desk = Desk()
    rules = _rules(
        store,
        input=[MessageMiddleware(name="pii", on_message=_scrub)],
        output=[MessageMiddleware(name="codenames", on_message=_no_codename)],
    )
    model = _model("Per internal policy, done.")
    out = await _agent(rules, model, desk).ainvoke(
        {"messages": [HumanMessage("My SSN is 123-45-6789")]}, CFG
    )
    assert "My SSN is [SSN]" == model.sent[0][-1].content
    assert ["My SSN is [SSN]", "Per our policy, done."] == [
        m.content for m in out["messages"]
    ]
    state = await _state(store, out[SESSION_KEY])
    assert [
        ("pii", "input", "allow", True),
        ("codenames", "input", "allow", False),
        ("pii", "output", "allow", False),
        ("codenames", "output", "allow", True),
    ] == [
        (r.middleware, r.moment, r.outcome, r.changed)
        for r in state.middleware_decisions
    ]
    assert ("user", "My SSN is [SSN]") == (
        state.history[0].role,
        state.history[0].content,
    )
    assert "Per our policy, done." == state.history[-1].content


async def test_g29_g37_a_refused_answer_raises_message_denied_error() -> None:
    """G29/G37: an output denial raises ``MessageDeniedError`` out of ``ainvoke``;
    the refused text is in no error field."""
    store = MemoryEventStore()
    rules = _rules(
        store, output=[MessageMiddleware(name="codenames", on_message=_no_codename)]
    )
    with pytest.raises(MessageDeniedError) as caught:
        await _agent(rules, _model("Project Bluebird ships."), Desk()).ainvoke(
            {"messages": [HumanMessage("What ships?")]}, CFG
        )
    err = caught.value
    assert ("output", "codenames", "the answer names a codename") == (
        err.phase,
        err.middleware,
        err.reason,
    )
    assert "Bluebird" not in str(err)


async def test_model_replies_are_recorded_with_tool_call_ids_and_usage() -> None:
    """Issue 27 item 1: the reply's content, calls (with ids) and usage are the
    session's ``stream.llm_*`` events and its committed assistant message."""
    store = MemoryEventStore()
    desk = Desk()
    model = _model(_calls(("c1", "lookup_order", {"order_id": "7"})), "Order 7: $800.")
    out = await _agent(_rules(store), model, desk).ainvoke(
        {"messages": [HumanMessage("Where is order 7?")]}, CFG
    )
    assert [("lookup_order", {"order_id": "7"})] == desk.runs
    events = [r.decode() for r in await store.read(out[SESSION_KEY])]
    started = [e for e in events if isinstance(e, LlmStarted)]
    ended = [e for e in events if isinstance(e, LlmEnded)]
    assert [(1, "langchain"), (2, "langchain")] == [
        (e.iteration, e.provider) for e in started
    ]
    assert {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18} == ended[
        0
    ].usage
    assert 1 == ended[0].tool_call_count
    committed = [e.message for e in events if isinstance(e, MessageCommitted)]
    assert (Call(id="c1", name="lookup_order", args={"order_id": "7"}),) == committed[
        1
    ].tool_calls
    assert ("tool", "c1") == (committed[2].role, committed[2].tool_call_id)
    assert "Order 7: $800." == committed[-1].content


async def test_a_thread_is_one_session_and_its_next_turn_continues_it() -> None:
    """The session id lives in the graph state: the second invoke on the
    thread is the session's second turn; the model sees the whole thread."""
    store = MemoryEventStore()
    model = _model("First.", "Second.")
    agent = _agent(_rules(store), model, Desk())
    one = await agent.ainvoke({"messages": [HumanMessage("one")]}, CFG)
    two = await agent.ainvoke({"messages": [HumanMessage("two")]}, CFG)
    assert one[SESSION_KEY] == two[SESSION_KEY]
    state = await _state(store, two[SESSION_KEY])
    assert 2 == state.turn
    assert ["one", "First.", "two", "Second."] == [m.content for m in state.history]
    assert ["one", "First.", "two"] == [m.content for m in model.sent[1]]


async def test_g79_the_window_plans_what_the_framework_model_is_sent() -> None:
    """G79: a sliding window over the record shapes the LangChain model request."""
    store = MemoryEventStore()
    model = _model("First.", "Second.")
    rules = _rules(store, window=sliding_window(keep_recent_turns=1))
    agent = _agent(rules, model, Desk())
    await agent.ainvoke({"messages": [HumanMessage("one")]}, CFG)
    out = await agent.ainvoke({"messages": [HumanMessage("two")]}, CFG)
    assert [["one"], ["two"]] == [[m.content for m in sent] for sent in model.sent]
    # The thread and the record keep every message; only the request shrank.
    assert ["one", "First.", "two", "Second."] == [m.content for m in out["messages"]]


# -- ask: the LangGraph way --------------------------------------------------------


def _ask_rules(store: MemoryEventStore) -> Agent:
    return _rules(
        store,
        before_tool=[
            ToolMiddleware(name="refund-ceiling", on_tool_call=_ceiling),
            ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
        ],
    )


async def _asked(store: MemoryEventStore, desk: Desk) -> tuple[Any, dict[str, Any]]:
    model = _model(
        _calls(("c2", "refund", {"order_id": "7", "amount": 800})), "Refunded."
    )
    agent = _agent(_ask_rules(store), model, desk)
    out = await agent.ainvoke({"messages": [HumanMessage("Refund order 7")]}, CFG)
    (pending,) = out["__interrupt__"]
    return agent, pending.value


@pytest.mark.parametrize(
    "answer",
    [
        check_in_approved("dana@ops", "verified"),
        {"approved": True, "by": "dana@ops", "note": "verified"},
    ],
    ids=["check-in-decision", "plain-dict"],
)
async def test_g59_g63_an_ask_interrupts_and_command_resume_runs_the_real_tool(
    answer: Any,
) -> None:
    """G59: an ask is a LangGraph interrupt carrying the question, the rule, the
    call and the checkpoint; G63: resuming with an approval runs the tool once."""
    store = MemoryEventStore()
    desk = Desk()
    agent, value = await _asked(store, desk)
    assert [] == desk.runs
    assert {
        "type": "helmlog_ask",
        "kind": "ask",
        "question": "Refund over $500?",
        "detail": {"amount": 800},
        "rule": "four-eyes",
        "tool": "refund",
        "tool_call_id": "c2",
        "args": {"order_id": "7", "amount": 800},
        "session_id": value["session_id"],
    } == {k: v for k, v in value.items() if k != "checkpoint"}
    assert value["session_id"] in value["checkpoint"]
    out = await agent.ainvoke(Command(resume=answer), CFG)
    assert [("refund", {"order_id": "7", "amount": 800.0})] == desk.runs
    assert "Refunded order 7: $800.00" in out["messages"][2].content
    assert "Refunded." == out["messages"][-1].content
    rows = (await _state(store, out[SESSION_KEY])).middleware_decisions
    assert [
        ("refund-ceiling", "allow", None),
        ("four-eyes", "ask", "Refund over $500?"),
        ("four-eyes", "allow", "approved by dana@ops: verified"),
    ] == [(r.middleware, r.outcome, r.why) for r in rows]


@pytest.mark.parametrize("traced", [False, True], ids=["inline", "traced"])
async def test_both_hook_forms_govern_alike_and_tracing_picks_the_form(
    traced: bool,
) -> None:
    """Issue 27: LangChain runs each wrap hook under langsmith's ``traceable``,
    which takes an ``async def`` through two thread hops a call; so the hooks
    are plain methods returning their coroutines, unless LangSmith traces,
    where ``governance`` builds the ``async def`` form (each span covers its
    hook's work). G59/G63: an ask and its approved resume, the same rows in
    both."""
    store = MemoryEventStore()
    desk = Desk()
    with tracing_context(enabled=traced):
        middleware = governance(_ask_rules(store))
    hooks = (type(middleware).awrap_model_call, type(middleware).awrap_tool_call)
    assert (traced, [traced, traced]) == (
        isinstance(middleware, TracedHelmlogMiddleware),
        [inspect.iscoroutinefunction(hook) for hook in hooks],
    )
    model = _model(
        _calls(("c2", "refund", {"order_id": "7", "amount": 800})), "Refunded."
    )
    agent = create_agent(
        model, desk.tools, middleware=[middleware], checkpointer=InMemorySaver()
    )
    out = await agent.ainvoke({"messages": [HumanMessage("Refund order 7")]}, CFG)
    assert ([], "Refund over $500?") == (
        desk.runs,
        out["__interrupt__"][0].value["question"],
    )
    out = await agent.ainvoke(Command(resume=check_in_approved("dana@ops")), CFG)
    assert [("refund", {"order_id": "7", "amount": 800.0})] == desk.runs
    rows = (await _state(store, out[SESSION_KEY])).middleware_decisions
    assert [
        ("refund-ceiling", "allow"),
        ("four-eyes", "ask"),
        ("four-eyes", "allow"),
    ] == [(r.middleware, r.outcome) for r in rows]


async def test_g63_a_declined_ask_is_a_refusal_the_model_reads() -> None:
    """G63: a decline refuses the call: it never runs, the model reads why."""
    store = MemoryEventStore()
    desk = Desk()
    agent, _ = await _asked(store, desk)
    out = await agent.ainvoke(Command(resume={"approved": False, "by": "eve@ops"}), CFG)
    assert [] == desk.runs
    msg = out["messages"][2]
    # The model reads the native loop's text; the row names the person.
    assert ("error", "declined by human") == (msg.status, msg.content)
    rows = (await _state(store, out[SESSION_KEY])).middleware_decisions
    assert ("four-eyes", "deny", "declined by eve@ops") == (
        rows[-1].middleware,
        rows[-1].outcome,
        rows[-1].why,
    )


async def test_resume_with_recorded_while_the_ask_waits_interrupts_again() -> None:
    """``Command(resume=RECORDED)`` before anyone decided: the run stays paused
    on the same ask (nothing runs, nothing is recorded twice)."""
    store = MemoryEventStore()
    desk = Desk()
    agent, first = await _asked(store, desk)
    again = await agent.ainvoke(Command(resume=RECORDED), CFG)
    (pending,) = again["__interrupt__"]
    assert first == pending.value
    assert [] == desk.runs
    rows = (await _state(store, first["session_id"])).middleware_decisions
    assert 2 == len(rows)


async def test_a_bad_resume_value_is_a_typed_error_and_the_ask_still_waits() -> None:
    """LangGraph checks the resume value against the interrupt's schema: a
    decision with an empty ``by`` is a ``ValidationError``; nothing is saved, so
    a good answer still resumes the run."""
    store = MemoryEventStore()
    desk = Desk()
    agent, _ = await _asked(store, desk)
    with pytest.raises(pydantic.ValidationError):
        await agent.ainvoke(Command(resume={"approved": True, "by": " "}), CFG)
    with pytest.raises(pydantic.ValidationError):
        await agent.ainvoke(Command(resume="yes please"), CFG)
    out = await agent.ainvoke(Command(resume={"approved": True, "by": "dana"}), CFG)
    assert 1 == len(desk.runs)
    assert "Refunded." == out["messages"][-1].content


# -- bad input -----------------------------------------------------------------------


def test_constructors_name_what_they_were_given() -> None:
    """Bad input to the adapter's constructors is a typed error naming it."""
    with pytest.raises(TypeError, match="helmlog Agent or Governance, got a list"):
        governance([])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"traced=\.\.\.\) takes a bool, got a str"):
        governance(_rules(MemoryEventStore()), traced="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Governance, got a str"):
        HelmlogMiddleware("rules")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"LangChain BaseTool .*got a function"):
        tool_from(lambda: 1)  # type: ignore[arg-type]


async def test_a_run_that_does_not_start_on_a_user_message_is_refused() -> None:
    """Fail closed: the input moment needs the user's message to admit."""
    store = MemoryEventStore()
    with pytest.raises(ValueError, match="starts on a user message"):
        await _agent(_rules(store), _model("x"), Desk()).ainvoke(
            {"messages": [AIMessage("hello")]}, CFG
        )


# -- tools across, converters ----------------------------------------------------------


async def test_tool_from_langchain_keeps_the_schema_and_a_native_agent_runs_it() -> (
    None
):
    """Issue 27 item 4: ``Tool.from_langchain`` keeps name, description and the
    input schema; a helmlog native agent calls the LangChain tool through it."""
    desk = Desk()
    t = Tool.from_langchain(desk.refund)
    assert ("refund", "Refund an order.") == (t.name, t.description)
    assert {
        "order_id": {"title": "Order Id", "type": "string"},
        "amount": {
            "title": "Amount",
            "type": "number",
        },
    } == t.input_schema["properties"]
    assert ["order_id", "amount"] == t.input_schema["required"]
    agent = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(
                                id="c1",
                                name="refund",
                                args={"order_id": "9", "amount": 5},
                            )
                        ]
                    ),
                    "Done.",
                ]
            ),
            model="m",
        )
        .tool(t)
        .build()
    )
    assert "Done." == await agent.run("Refund order 9 for $5")
    assert [("refund", {"order_id": "9", "amount": 5.0})] == desk.runs
    tool_msg = agent.last_snapshot().history[2]
    assert "Refunded order 9: $5.00 to card 4111 1111 1111 1111." == tool_msg.content


async def test_tool_from_returns_the_tools_raw_value_to_after_tool_rules() -> None:
    """G21: a helmlog agent's after-tool rule sees the LangChain tool's own
    value (a dict), not LangChain's text rendering of it."""
    desk = Desk()
    seen: list[Any] = []

    def look(call: Any) -> Any:
        seen.append(call.result)
        return allow()

    agent = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(id="c1", name="lookup_order", args={"order_id": "7"})
                        ]
                    ),
                    "ok",
                ]
            ),
            model="m",
        )
        .tool(tool_from(desk.lookup_order))
        .act(after_tool=[ToolMiddleware(name="look", on_tool_result=look)])
        .build()
    )
    await agent.run("where is 7")
    assert [{"order_id": "7", "total": 800.0}] == seen


def test_messages_convert_both_ways() -> None:
    """The converters keep roles, text, tool calls with their ids, tool names."""
    lc = [
        HumanMessage("hi"),
        _calls(("c1", "lookup_order", {"order_id": "7"})),
        ToolMessage("{}", tool_call_id="c1", name="lookup_order"),
        AIMessage("bye"),
    ]
    ours = to_messages(lc)
    assert [
        ("user", "hi"),
        ("assistant", ""),
        ("tool", "{}"),
        ("assistant", "bye"),
    ] == [(m.role, m.content) for m in ours]
    assert (Call(id="c1", name="lookup_order", args={"order_id": "7"}),) == ours[
        1
    ].tool_calls
    back = from_messages(ours)
    assert [type(m) for m in lc] == [type(m) for m in back]
    assert to_messages(back) == ours


async def test_g35_g36_a_refused_input_never_reaches_the_model_on_the_thread() -> None:
    """G35/G36: a refused user message stays in LangGraph's thread state, but
    the next run's model request holds only what the record admitted."""
    store = MemoryEventStore()
    model = _model("Hello.")

    def no_ssn(msg: Any) -> Any:
        return deny("no SSNs here") if "123-45-6789" in msg.content else allow()

    rules = _rules(store, input=[MessageMiddleware(name="no-ssn", on_message=no_ssn)])
    agent = _agent(rules, model, Desk())
    with pytest.raises(MessageDeniedError):
        await agent.ainvoke({"messages": [HumanMessage("SSN 123-45-6789")]}, CFG)
    assert [] == model.sent
    out = await agent.ainvoke({"messages": [HumanMessage("hi")]}, CFG)
    assert [["hi"]] == [[m.content for m in sent] for sent in model.sent]
    assert "Hello." == out["messages"][-1].content


async def test_g64_one_question_per_call_a_later_ask_after_approval_is_a_denial() -> (
    None
):
    """G64, as in the native loop: after the first ask is approved through
    ``Command(resume=...)``, a later link's ask on the same call is a denial;
    one interrupt per call, the tool never runs."""
    store = MemoryEventStore()
    desk = Desk()

    def legal(call: Any) -> Any:
        return ask("Legal sign-off?")

    rules = _rules(
        store,
        before_tool=[
            ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
            ToolMiddleware(name="legal", on_tool_call=legal),
        ],
    )
    model = _model(
        _calls(("c2", "refund", {"order_id": "7", "amount": 800})), "Not refunded."
    )
    agent = _agent(rules, model, desk)
    out = await agent.ainvoke({"messages": [HumanMessage("Refund order 7")]}, CFG)
    assert "four-eyes" == out["__interrupt__"][0].value["rule"]
    out = await agent.ainvoke(Command(resume={"approved": True, "by": "dana"}), CFG)
    assert "__interrupt__" not in out
    assert [] == desk.runs
    text = (
        "middleware 'legal' asked a person to decide, and there is no pause "
        "here to carry that ask: Legal sign-off?"
    )
    assert ("error", text) == (out["messages"][2].status, out["messages"][2].content)
    rows = (await _state(store, out[SESSION_KEY])).middleware_decisions
    assert [
        ("four-eyes", "ask", "Refund over $500?"),
        ("four-eyes", "allow", "approved by dana"),
        ("legal", "deny", text),
    ] == [(r.middleware, r.outcome, r.why) for r in rows]


def test_a_sync_invoke_is_refused_not_run_ungoverned() -> None:
    """Fail closed: the middleware is async; LangGraph refuses a sync
    ``invoke`` before the model is called (nothing runs ungoverned)."""
    model = _model("hello")
    with pytest.raises(TypeError, match="async API"):
        _agent(_rules(MemoryEventStore()), model, Desk()).invoke(
            {"messages": [HumanMessage("hi")]}, CFG
        )
    assert [] == model.sent


async def test_parallel_tool_calls_are_each_governed_and_all_recorded() -> None:
    """One reply, two calls (LangGraph runs them in parallel): each is walked
    and recorded; the record's messages are the thread's."""
    store = MemoryEventStore()
    desk = Desk()
    rules = _rules(
        store, before_tool=[ToolMiddleware(name="pass", on_tool_call=lambda c: allow())]
    )
    model = _model(
        _calls(
            ("c1", "lookup_order", {"order_id": "1"}),
            ("c2", "lookup_order", {"order_id": "2"}),
        ),
        "Both found.",
    )
    out = await _agent(rules, model, desk).ainvoke(
        {"messages": [HumanMessage("Find 1 and 2")]}, CFG
    )
    assert 2 == len(desk.runs)
    state = await _state(store, out[SESSION_KEY])
    assert {"c1", "c2"} == {r.tool_call_id for r in state.middleware_decisions}
    assert to_messages(out["messages"]) == tuple(state.history)


async def test_g18_a_tool_that_raises_is_its_result_with_error_true() -> None:
    """G18: the tool's raise is its result (error=True), the after-tool walk
    sees it, and the model reads it as the tool's error message."""
    store = MemoryEventStore()
    seen: list[tuple[Any, bool]] = []

    @lc_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        raise LookupError(f"no order {order_id}")

    def look(call: Any) -> Any:
        seen.append((call.result, call.error))
        return allow()

    rules = _rules(store, after_tool=[ToolMiddleware(name="look", on_tool_result=look)])
    model = _model(_calls(("c1", "lookup_order", {"order_id": "7"})), "Not found.")
    agent = create_agent(
        model,
        [lookup_order],
        middleware=[governance(rules)],
        checkpointer=InMemorySaver(),
    )
    out = await agent.ainvoke({"messages": [HumanMessage("Where is 7?")]}, CFG)
    assert [("no order 7", True)] == seen
    assert ("error", "no order 7") == (
        out["messages"][2].status,
        out["messages"][2].content,
    )
    assert "Not found." == out["messages"][-1].content


async def test_g79_a_window_that_summarises_sends_its_new_message() -> None:
    """G79: a window whose plan holds a message the history lacks (a summary)
    sends it as a new LangChain message, beside the thread's own."""
    store = MemoryEventStore()

    class Summary:
        name = "summary"

        def plan(
            self,
            messages: tuple[Message, ...],
            *,
            iteration: int,
            paused_call_ids: frozenset[str] = frozenset(),
        ) -> WindowPlan:
            if len(messages) < 3:
                return WindowPlan(messages)
            head = Message(role="user", content=f"(summary of {len(messages) - 1})")
            return WindowPlan((head, messages[-1]))

    model = _model("First.", "Second.")
    agent = _agent(_rules(store, window=Summary()), model, Desk())
    await agent.ainvoke({"messages": [HumanMessage("one")]}, CFG)
    await agent.ainvoke({"messages": [HumanMessage("two")]}, CFG)
    assert [["one"], ["(summary of 2)", "two"]] == [
        [m.content for m in sent] for sent in model.sent
    ]
    assert [HumanMessage, HumanMessage] == [type(m) for m in model.sent[1]]


async def test_g13_the_runs_context_is_the_identity_rules_see() -> None:
    """G13: a mapping given as LangGraph's run context is the turn's identity,
    seen by every rule (here a before-tool rule keyed on the caller)."""
    store = MemoryEventStore()
    desk = Desk()
    seen: list[Any] = []

    def who(call: Any) -> Any:
        seen.append(call.identity)
        return allow() if call.identity.get("role") == "agent" else deny("agents only")

    rules = _rules(store, before_tool=[ToolMiddleware(name="who", on_tool_call=who)])
    model = _model(_calls(("c1", "lookup_order", {"order_id": "7"})), "Found.")
    agent = create_agent(
        model,
        desk.tools,
        middleware=[governance(rules)],
        checkpointer=InMemorySaver(),
        context_schema=dict,
    )
    await agent.ainvoke(
        {"messages": [HumanMessage("Where is 7?")]},
        CFG,
        context={"user": "ann", "role": "agent"},
    )
    assert [{"user": "ann", "role": "agent"}] == seen
    assert 1 == len(desk.runs)


async def test_an_ask_declined_on_helmlogs_side_is_read_back_with_recorded() -> None:
    """A decline made through another ``Governance`` on the same store (what
    the approvals page and ``helmlog decline`` call) is read back by
    ``Command(resume=RECORDED)``: the model reads the refusal; nothing ran."""
    store = MemoryEventStore()
    desk = Desk()
    agent, value = await _asked(store, desk)
    page = Governance(
        Agent.create(provider=framework_model("langchain"), model="m", store=store)
        .tool(Tool.from_langchain(desk.refund))
        .act(
            before_tool=[
                ToolMiddleware(name="refund-ceiling", on_tool_call=_ceiling),
                ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes),
            ]
        )
        .build()
    )
    out = await page.resume(value["checkpoint"], check_in_declined("eve@ops"))
    assert "declined by human" == out
    resumed = await agent.ainvoke(Command(resume=RECORDED), CFG)
    assert [] == desk.runs
    assert ("error", "declined by human") == (
        resumed["messages"][2].status,
        resumed["messages"][2].content,
    )
    assert "Refunded." == resumed["messages"][-1].content


async def test_g22_a_tool_that_returns_a_command_has_its_message_governed() -> None:
    """G22: a LangChain tool that answers with a ``Command`` (its own state
    update) keeps it; the ``ToolMessage`` inside carries the after-tool verdict."""
    store = MemoryEventStore()

    @lc_tool
    def note(
        text: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command[Any]:
        """Keep a note."""
        content = f"noted {text} for card 4111 1111 1111 1111"
        return Command(
            update={"messages": [ToolMessage(content, tool_call_id=tool_call_id)]}
        )

    def cards(call: Any) -> Any:
        masked = call.result.replace("4111 1111 1111 1111", "[card]")
        return allow(masked, "masked a card number")

    rules = _rules(
        store, after_tool=[ToolMiddleware(name="cards", on_tool_result=cards)]
    )
    model = _model(_calls(("c1", "note", {"text": "hi"})), "Noted.")
    agent = create_agent(
        model, [note], middleware=[governance(rules)], checkpointer=InMemorySaver()
    )
    out = await agent.ainvoke({"messages": [HumanMessage("Note hi")]}, CFG)
    msg = out["messages"][2]
    assert (ToolMessage, "c1", "noted hi for card [card]") == (
        type(msg),
        msg.tool_call_id,
        msg.content,
    )
    state = await _state(store, out[SESSION_KEY])
    assert "noted hi for card [card]" == state.history[2].content
