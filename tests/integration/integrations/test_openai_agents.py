"""helmlog's governance inside the OpenAI Agents SDK: the five moments, asks, tools.

Pattern: the real ``Runner`` with the SDK's own scripted test model
         (``agents.testing.ScriptedModel``, its ``Model`` interface played from
         the shared scenario's replies), the scenario's act-table and the
         native loop's rows (``scenario.expected_rows``) to compare with, on
         the memory store and on a real Redis; a second process is a real
         ``helmlog approve`` subprocess.
Role:    integration tests of ``integrations/openai_agents.py``.

Laws: issue 27 items 2, 4, 5, 6; G7 (a raising rule is a denial), G13, G15,
G21, G33, G39, G51, G59–G64, G79, G91, R9, R18 (asks listed from the index),
R19 (verify).
Beyond the rows, the scenario's sessions hold the native loop's event types,
in order, and its committed messages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent as SdkAgent,
)
from agents import (
    FunctionTool,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    RunState,
    ToolGuardrailFunctionOutput,
    Usage,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from helmlog import (
    Agent,
    AskPause,
    Message,
    MessageDeniedError,
    MessageMiddleware,
    Tool,
    ToolMiddleware,
    allow,
    deny,
    sliding_window,
)
from helmlog.events import (
    EventStore,
    LlmEnded,
    MemoryEventStore,
    ToolDispatched,
    ToolEnded,
    fold,
    open_event_store,
)
from helmlog.integrations import Governance
from helmlog.integrations.openai_agents import (
    AgentsGovernance,
    AgentsGovernanceError,
    admitted_output,
    to_input_items,
    to_messages,
    tool_from,
)
from helmlog.runtime.providers import Reply, framework_model, scripted
from helmlog.runtime.providers import ToolCallRequest as Call

from . import scenario as sc
from .conftest import ROOT

set_tracing_disabled(True)

SESSION_AGENT = "tests.integration.integrations.scenario:governance"
USAGE = Usage(requests=1, input_tokens=31, output_tokens=7, total_tokens=38)


def sdk_tools() -> list[FunctionTool]:
    """The scenario's two plain functions as the SDK's function tools."""
    return [function_tool(sc.lookup_order), function_tool(sc.refund)]


def sdk_steps(replies: Sequence[Reply]) -> list[list[Any]]:
    """The scenario's replies as the SDK's normalized model output items."""
    steps: list[list[Any]] = []
    for reply in replies:
        items: list[Any] = []
        if reply.content:
            items.append(assistant_message(reply.content))
        items.extend(
            function_call(call.name, call.args, call_id=call.id)
            for call in reply.tool_calls
        )
        steps.append(items)
    return steps


def desk(
    store: EventStore, name: str, *, skip: int = 0
) -> tuple[AgentsGovernance, SdkAgent[Any], ScriptedModel]:
    """The scenario's governance around an Agents SDK agent playing ``name``
    (its model's first ``skip`` replies already given, in another process)."""
    fts = sdk_tools()
    rules = sc.build_agent(
        store, framework_model("openai-agents"), tools=[tool_from(ft) for ft in fts]
    )
    helm = AgentsGovernance(Governance(rules))
    model = ScriptedModel(sdk_steps(sc.SCRIPTS[name][skip:]), default_usage=USAGE)
    agent = SdkAgent(
        name="refund-desk",
        instructions="You handle refunds.",
        tools=list(fts),
        model=model,
    )
    return helm, helm.govern(agent), model


def sent(model: ScriptedModel) -> list[list[Any]]:
    """What the model was sent, call by call, as helmlog messages."""
    return [list(to_messages(call.input)) for call in model.calls]


async def record(store: EventStore, session_id: str) -> tuple[Any, Any]:
    """A session's event types in order and its committed messages."""
    events = [r.decode() for r in await store.read(session_id)]
    return [e.type for e in events], tuple(fold(events).history)


async def native_record(name: str) -> tuple[Any, Any]:
    """The same, for the native loop's run of conversation ``name``."""
    store = MemoryEventStore()
    await sc.native_record(name, store)
    return await record(store, name)


def helmlog_cli(*args: str, store: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "helmlog.cli", *args, "--store", store],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


# -- the shared scenario, row for row -------------------------------------------


async def test_i6_approved_through_the_sdks_state_the_rows_are_the_native_loops(
    runs_file: Path,
) -> None:
    """Issue 27 items 2, 6: the ask is the SDK's interruption; approved through
    ``state.approve`` (who decided: ``GovernedSession.approve``) and
    ``Runner.run(agent, state)``, the tool runs once, the model saw the
    scrubbed input and the redacted result, the answer is the output rule's,
    and the session's rows are the native loop's, row for row."""
    store = MemoryEventStore()
    helm, agent, model = desk(store, sc.REFUND_800)
    session = helm.session()

    first = await session.run(agent, sc.MESSAGES[sc.REFUND_800])
    (item,) = first.interruptions
    question = await session.question(item)
    assert ("refund", "c2", "four-eyes", "Refund over $500?") == (
        item.tool_name,
        question.tool_call_id,
        question.ask.middleware,
        question.ask.question,
    )
    assert ["lookup_order"] == sc.runs(runs_file)
    state = first.to_state()
    session.approve(state, item, by=sc.APPROVER)
    done = await session.run(agent, state)

    assert sc.FINAL[sc.REFUND_800] == admitted_output(done)
    assert ["lookup_order", "refund"] == sc.runs(runs_file)
    assert session.id is not None
    assert await sc.expected_rows(sc.REFUND_800) == await sc.session_rows(
        store, session.id
    )
    assert await native_record(sc.REFUND_800) == await record(store, session.id)
    scrubbed = sent(model)[0][0].content
    assert "123-45-6789" not in scrubbed and scrubbed.startswith("Refund order 7")
    read = [m.content for m in sent(model)[-1] if m.role == "tool"]
    assert [sc.TOOL_RESULTS["lookup_order"], sc.TOOL_RESULTS["refund"]] == read
    model.assert_complete()


async def test_i6_streamed_the_approve_conversation_files_the_native_rows(
    runs_file: Path,
) -> None:
    """Issue 27 items 2, 6: ``run_streamed`` drives the same hooks: streamed
    and approved through the SDK's state, the rows are the native loop's;
    a streamed run that raises is recorded by ``session.fail``."""
    store = MemoryEventStore()
    helm, agent, _ = desk(store, sc.REFUND_800)
    session = helm.session()
    first = await session.run_streamed(agent, sc.MESSAGES[sc.REFUND_800])
    kinds = [event.type async for event in first.stream_events()]
    assert "run_item_stream_event" in kinds
    (item,) = first.interruptions
    state = first.to_state()
    session.approve(state, item, by=sc.APPROVER)
    done = await session.run_streamed(agent, state)
    async for _ in done.stream_events():
        pass

    assert sc.FINAL[sc.REFUND_800] == admitted_output(done)
    assert ["lookup_order", "refund"] == sc.runs(runs_file)
    assert session.id is not None
    assert await sc.expected_rows(sc.REFUND_800) == await sc.session_rows(
        store, session.id
    )
    await session.fail(RuntimeError("after the turn ended: nothing recorded"))
    types, _ = await record(store, session.id)
    assert "error.fatal" not in types


async def test_i6_denied_the_rows_are_the_native_loops_and_the_model_reads_why(
    runs_file: Path,
) -> None:
    """Issue 27 items 2, 6, G15: the ceiling denies at before-tool; the tool does
    not run; the model reads the refusal as the tool's message; the rows are
    the native loop's."""
    store = MemoryEventStore()
    helm, agent, model = desk(store, sc.REFUND_20000)
    session = helm.session()

    done = await session.run(agent, sc.MESSAGES[sc.REFUND_20000])

    assert [] == done.interruptions
    assert sc.FINAL[sc.REFUND_20000] == admitted_output(done)
    assert [] == sc.runs(runs_file)
    last = sent(model)[-1][-1]
    assert ("tool", "c1", sc.REFUSAL) == (last.role, last.tool_call_id, last.content)
    assert session.id is not None
    assert await sc.expected_rows(sc.REFUND_20000) == await sc.session_rows(
        store, session.id
    )
    assert await native_record(sc.REFUND_20000) == await record(store, session.id)


async def test_i6_approved_by_a_second_process_on_redis_the_run_reads_it_back(
    redis_url: str, runs_file: Path, approver_env: dict[str, str]
) -> None:
    """Issue 27 items 2, 5, 6, R18, R19: on a real Redis, ``helmlog asks`` lists
    the SDK run's ask; ``helmlog approve --agent scenario:governance`` (a real
    subprocess) runs the refund; a fresh governance resumes the SDK's
    serialized ``RunState`` and reads the recorded result: the tool ran
    exactly once. The rows are the native loop's; ``verify`` says intact and
    ``replay`` emits the session."""
    store = open_event_store(redis_url)
    again = open_event_store(redis_url)
    try:
        await _approved_elsewhere(store, again, redis_url, runs_file, approver_env)
    finally:
        await store.close()
        await again.close()


async def _approved_elsewhere(
    store: EventStore,
    again: EventStore,
    redis_url: str,
    runs_file: Path,
    approver_env: dict[str, str],
) -> None:
    helm, agent, _ = desk(store, sc.REFUND_800)
    session = helm.session()
    first = await session.run(agent, sc.MESSAGES[sc.REFUND_800])
    assert ["c2"] == [i.raw_item.call_id for i in first.interruptions]
    saved = first.to_state().to_json()
    sid = session.id
    assert sid is not None

    listed = json.loads(
        helmlog_cli("asks", "--json", store=redis_url, env=approver_env)
    )
    assert [(sid, "refund", "four-eyes")] == [
        (q["session_id"], q["tool_name"], q["middleware"]) for q in listed
    ]
    helmlog_cli(
        "approve", sid, "--agent", SESSION_AGENT, store=redis_url, env=approver_env
    )
    assert ["lookup_order", "refund"] == sc.runs(runs_file)

    # The framework's process again (a new one: nothing held in memory).
    later, agent2, model2 = desk(again, sc.REFUND_800, skip=2)
    state = await RunState.from_json(agent2, saved)
    done = await later.session(sid).run(agent2, state)

    assert sc.FINAL[sc.REFUND_800] == admitted_output(done)
    assert ["lookup_order", "refund"] == sc.runs(runs_file)
    assert sc.TOOL_RESULTS["refund"] == sent(model2)[-1][-1].content
    assert await sc.expected_rows(sc.REFUND_800) == await sc.session_rows(store, sid)
    events = [r.decode() for r in await store.read(sid)]
    assert 1 == sum(
        1 for e in events if isinstance(e, ToolDispatched) and e.tool_call_id == "c2"
    )
    assert "intact" in helmlog_cli("verify", sid, store=redis_url, env=approver_env)
    replayed = helmlog_cli("replay", sid, "--json", store=redis_url, env=approver_env)
    assert len(events) == len(json.loads(replayed))
    assert [] == json.loads(
        helmlog_cli("asks", "--json", store=redis_url, env=approver_env)
    )


async def test_g61_a_decline_through_the_sdks_state_is_recorded_and_the_model_reads_it(
    runs_file: Path,
) -> None:
    """G61, G63, issue 27 item 2: ``GovernedSession.reject`` declines through
    the SDK's ``state.reject``; the resumed run records the decline as the
    native loop does and the model reads helmlog's refusal; no refund."""
    store = MemoryEventStore()
    helm, agent, model = desk(store, sc.REFUND_800)
    session = helm.session()
    first = await session.run(agent, sc.MESSAGES[sc.REFUND_800])
    (item,) = first.interruptions
    state = first.to_state()
    session.reject(state, item, by=sc.APPROVER, note="not this week")
    await session.run(agent, state)

    assert ["lookup_order"] == sc.runs(runs_file)
    assert session.id is not None
    rows = await sc.session_rows(store, session.id)
    asker = [r for r in rows if r.tool_call_id == "c2" and r.middleware == "four-eyes"]
    assert ["ask", "deny"] == [r.outcome for r in asker]
    assert sc.APPROVER in (asker[-1].why or "")
    read = sent(model)[-1][-1]
    assert ("tool", "c2") == (read.role, read.tool_call_id)
    assert "declined" in read.content


@pytest.mark.parametrize("approve", ["both", "the-question-only"])
async def test_g51_a_replys_calls_run_in_order_and_one_behind_a_question_waits(
    runs_file: Path, approve: str
) -> None:
    """G51, G59, issue 27 item 6: a reply proposing two calls, the first of
    which asks: both are the SDK's interruptions (the second waits behind
    the question). Approved (both at once, or the question first and the
    waiting call walked by the run after), they run in order, and the rows
    are the native loop's for the same reply, row for row."""
    both = [
        Reply(
            tool_calls=[
                Call(id="c1", name="refund", args={"order_id": "7", "amount": 800}),
                Call(id="c2", name="lookup_order", args={"order_id": "7"}),
            ]
        ),
        Reply("Refunded."),
    ]
    native_store = MemoryEventStore()
    native = sc.build_agent(native_store, scripted(list(both)))
    paused = await native.run(sc.MESSAGES[sc.REFUND_800], session_id="native")
    assert isinstance(paused, AskPause)
    await native.resume(paused.checkpoint, sc.check_in_approved(by=sc.APPROVER))
    native_runs = sc.runs(runs_file)
    runs_file.unlink()

    store = MemoryEventStore()
    rules = sc.build_agent(
        store,
        framework_model("openai-agents"),
        tools=[tool_from(ft) for ft in sdk_tools()],
    )
    helm = AgentsGovernance(rules)
    model = ScriptedModel(sdk_steps(both))
    agent = helm.govern(SdkAgent(name="desk", tools=sdk_tools(), model=model))
    session = helm.session()
    first = await session.run(agent, sc.MESSAGES[sc.REFUND_800])
    assert ["c1", "c2"] == [i.raw_item.call_id for i in first.interruptions]
    assert [] == sc.runs(runs_file)
    state = first.to_state()
    asked = first.interruptions if approve == "both" else first.interruptions[:1]
    for item in asked:
        session.approve(state, item, by=sc.APPROVER)
    done = await session.run(agent, state)
    if approve != "both":
        assert ["c2"] == [i.raw_item.call_id for i in done.interruptions]
        assert ["refund"] == sc.runs(runs_file)
        done = await session.run(agent, done.to_state())

    assert "Refunded." == admitted_output(done)
    assert native_runs == sc.runs(runs_file) == ["refund", "lookup_order"]
    assert session.id is not None
    assert await sc.session_rows(native_store, "native") == await sc.session_rows(
        store, session.id
    )


# -- moments, refusals, bad input ------------------------------------------------


def _one_tool_desk(
    store: EventStore, replies: list[Reply], **act: Any
) -> tuple[AgentsGovernance, SdkAgent[Any], ScriptedModel]:
    refund = function_tool(sc.refund)
    rules = (
        Agent.create(provider=framework_model("openai-agents"), model="m", store=store)
        .tool(tool_from(refund))
        .act(**act)
        .build()
    )
    helm = AgentsGovernance(rules)
    model = ScriptedModel(sdk_steps(replies))
    agent = SdkAgent(name="desk", instructions="x", tools=[refund], model=model)
    return helm, helm.govern(agent), model


async def test_g7_a_rule_that_raises_is_a_denial_and_the_tool_does_not_run(
    runs_file: Path,
) -> None:
    """G7: a before-tool rule that raises denies the call; the tool never runs
    and the model reads the denial as the tool's message."""

    def broken(call: Any) -> Any:
        raise RuntimeError("rule bug")

    store = MemoryEventStore()
    helm, agent, model = _one_tool_desk(
        store,
        [
            Reply(
                tool_calls=[
                    Call(id="c1", name="refund", args={"order_id": "7", "amount": 5})
                ]
            ),
            Reply("Could not refund."),
        ],
        before_tool=[ToolMiddleware(name="broken", on_tool_call=broken)],
    )
    session = helm.session()
    done = await session.run(agent, "refund 5")

    assert "Could not refund." == admitted_output(done)
    assert [] == sc.runs(runs_file)
    assert session.id is not None
    (row,) = await sc.session_rows(store, session.id)
    assert ("broken", "before-tool", "deny") == (
        row.middleware,
        row.moment,
        row.outcome,
    )
    read = sent(model)[-1][-1]
    assert ("tool", "c1", row.why) == (read.role, read.tool_call_id, read.content)


@pytest.mark.parametrize("sdk_handles_errors", [False, True])
async def test_g18_a_tool_that_raises_is_its_result(sdk_handles_errors: bool) -> None:
    """G18: with ``failure_error_function=None`` a raising SDK tool is recorded
    as the native loop records it (the error is the result, ``error`` true,
    the model reads it); with the SDK's default failure function the SDK has
    turned the raise into text already, and that text is the recorded result."""

    def refund(order_id: str, amount: float) -> str:
        """Refund an amount on an order."""
        raise RuntimeError("the payment service refused")

    ft = (
        function_tool(refund)
        if sdk_handles_errors
        else function_tool(refund, failure_error_function=None)
    )
    store = MemoryEventStore()
    helm = AgentsGovernance(
        Agent.create(provider=framework_model("openai-agents"), model="m", store=store)
        .tool(tool_from(ft))
        .build()
    )
    call = Call(id="c1", name="refund", args={"order_id": "7", "amount": 5})
    model = ScriptedModel(sdk_steps([Reply(tool_calls=[call]), Reply("It failed.")]))
    agent = helm.govern(SdkAgent(name="desk", tools=[ft], model=model))
    session = helm.session()
    await session.run(agent, "refund 5")

    assert session.id is not None
    (ended,) = [
        e
        for e in (r.decode() for r in await store.read(session.id))
        if isinstance(e, ToolEnded)
    ]
    read = sent(model)[-1][-1]
    assert (not sdk_handles_errors) == ended.error
    assert str(ended.result) == read.content
    if not sdk_handles_errors:
        assert "the payment service refused" == read.content


async def test_g33_a_refused_input_trips_the_sdks_input_wire_before_the_model() -> None:
    """G33, G37: an input rule's denial is the SDK's tripwire (its info the
    ``MessageDeniedError``, never the refused text); the model is not called."""
    store = MemoryEventStore()
    no_secrets = MessageMiddleware(
        name="no-secrets",
        on_message=lambda m: deny("no secrets") if "secret" in m.content else allow(),
    )
    helm, agent, model = _one_tool_desk(store, [Reply("never")], input=[no_secrets])
    with pytest.raises(InputGuardrailTripwireTriggered) as raised:
        await helm.session().run(agent, "the secret is 42")
    refused = raised.value.guardrail_result.output.output_info
    assert isinstance(refused, MessageDeniedError)
    assert ("input", "no-secrets") == (refused.phase, refused.middleware)
    assert () == model.calls


async def test_g39_a_refused_answer_trips_the_sdks_output_guardrail() -> None:
    """G39: the output rule's denial is the SDK's output tripwire; the turn is
    recorded as the native loop records a refused answer."""
    store = MemoryEventStore()
    helm, agent, _ = _one_tool_desk(
        store, [Reply("PROJECT-X ships Monday")], output=sc.rules()["output"]
    )
    session = helm.session()
    with pytest.raises(OutputGuardrailTripwireTriggered) as raised:
        await session.run(agent, "when?")
    refused = raised.value.guardrail_result.output.output_info
    assert isinstance(refused, MessageDeniedError)
    assert ("output", "codenames") == (refused.phase, refused.middleware)
    assert session.id is not None
    rows = await sc.session_rows(store, session.id)
    assert ("codenames", "output", "deny") == (
        rows[-1].middleware,
        rows[-1].moment,
        rows[-1].outcome,
    )


async def test_model_replies_are_recorded_with_the_sdks_usage() -> None:
    """Issue 27 item 2: each model response is ``stream.llm_end`` with the SDK's
    usage, through the governed agent's hooks."""
    store = MemoryEventStore()
    helm, agent, _ = desk(store, sc.REFUND_20000)
    session = helm.session()
    await session.run(agent, sc.MESSAGES[sc.REFUND_20000])
    assert session.id is not None
    ended = [r.decode() for r in await store.read(session.id)]
    usage = [e.usage for e in ended if isinstance(e, LlmEnded)]
    assert 2 * [{"input_tokens": 31, "output_tokens": 7}] == usage


def _chat_desk(
    store: EventStore, replies: list[str], *, window: Any = None
) -> tuple[AgentsGovernance, SdkAgent[Any], ScriptedModel]:
    builder = Agent.create(
        provider=framework_model("openai-agents"), model="m", store=store
    )
    if window is not None:
        builder = builder.window(window)
    helm = AgentsGovernance(builder.build())
    model = ScriptedModel([[assistant_message(r)] for r in replies])
    return helm, helm.govern(SdkAgent(name="chat", model=model)), model


async def test_i5_a_next_turn_continues_the_helmlog_session_and_the_model_sees_it() -> (
    None
):
    """Issue 27 item 5, G79: a second ``run`` on one session is its next turn;
    the model sees the session's history (helmlog's plan), though the SDK was
    given the new message alone."""
    store = MemoryEventStore()
    helm, agent, model = _chat_desk(store, ["Hello Ann.", "You are Ann."])
    session = helm.session()
    await session.run(agent, "I am Ann")
    await session.run(agent, "Who am I?")

    assert [
        ("user", "I am Ann"),
        ("assistant", "Hello Ann."),
        ("user", "Who am I?"),
    ] == [(m.role, m.content) for m in sent(model)[-1]]
    assert session.id is not None
    (_, history) = await record(store, session.id)
    assert 4 == len(history)


async def test_g79_the_window_moment_decides_what_the_model_sees() -> None:
    """G79, G81: a sliding window on the helmlog agent is the window moment:
    the SDK's model is sent the window's plan (the last turn only), while the
    session keeps the whole history."""
    store = MemoryEventStore()
    helm, agent, model = _chat_desk(
        store, ["Hello Ann.", "I do not know."], window=sliding_window(1)
    )
    session = helm.session()
    first = await session.run(agent, "I am Ann")
    await session.run(agent, [*first.to_input_list(), _user("Who am I?")])

    assert [("user", "Who am I?")] == [(m.role, m.content) for m in sent(model)[-1]]
    assert session.id is not None
    (_, history) = await record(store, session.id)
    assert ["I am Ann", "Hello Ann.", "Who am I?", "I do not know."] == [
        m.content for m in history
    ]


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("streamed", [False, True])
async def test_g91_a_run_that_raises_fails_its_turn_once_and_the_session_goes_on(
    streamed: bool,
) -> None:
    """G91, G66: the SDK's run raising (its model failed) is recorded once as
    the native loop records it (``error.fatal``; streamed: by ``session.fail``
    where the stream raised); the session's next run opens a new turn."""
    store = MemoryEventStore()
    helm = AgentsGovernance(
        Agent.create(
            provider=framework_model("openai-agents"), model="m", store=store
        ).build()
    )
    model = ScriptedModel(
        [RuntimeError("the model's service is down"), [assistant_message("Back.")]]
    )
    agent = helm.govern(SdkAgent(name="chat", model=model))
    session = helm.session()
    with pytest.raises(RuntimeError) as raised:
        if streamed:
            stream = await session.run_streamed(agent, "hello")
            async for _ in stream.stream_events():
                pass
        else:
            await session.run(agent, "hello")
    if streamed:
        await session.fail(raised.value)
    done = await session.run(agent, "hello again")

    assert "Back." == admitted_output(done)
    assert session.id is not None
    types, _ = await record(store, session.id)
    assert 1 == types.count("error.fatal")
    assert 2 == types.count("agent.turn_start")
    assert "agent.turn_end" == types[-1]


@pytest.mark.parametrize("given", ["session", "run-context"])
async def test_g13_the_identity_reaches_every_rule(given: str) -> None:
    """G13: the identity a session names, or the SDK run's mapping context,
    is what the input and before-tool rules see."""
    seen: list[Any] = []

    def spy(call: Any) -> Any:
        seen.append(call.identity)
        return allow()

    def spy_message(msg: Any) -> Any:
        seen.append(msg.identity)
        return allow()

    store = MemoryEventStore()
    helm, agent, _ = _one_tool_desk(
        store,
        [
            Reply(
                tool_calls=[
                    Call(id="c1", name="refund", args={"order_id": "7", "amount": 5})
                ]
            ),
            Reply("Done."),
        ],
        input=[MessageMiddleware(name="spy-in", on_message=spy_message)],
        before_tool=[ToolMiddleware(name="spy", on_tool_call=spy)],
    )
    ann = {"user": "ann", "tenant": "acme"}
    if given == "session":
        await helm.session(identity=ann).run(agent, "refund 5")
    else:
        await helm.session().run(agent, "refund 5", context=dict(ann))
    assert [ann, ann] == [dict(i) for i in seen]


@pytest.mark.parametrize(
    ("make", "reason", "names"),
    [
        (lambda h: AgentsGovernance(object()), "bad-argument", "Governance"),  # type: ignore[arg-type]
        (
            lambda h: AgentsGovernance(h.governance, approver=" "),
            "bad-argument",
            "approver",
        ),
        (lambda h: h.govern("desk"), "bad-argument", "Agent"),
        (
            lambda h: h.govern(SdkAgent(name="web", tools=[WebSearchTool()])),
            "unsupported",
            "WebSearchTool",
        ),
        (
            lambda h: h.govern(
                SdkAgent(
                    name="own", tools=[function_tool(sc.refund, needs_approval=True)]
                )
            ),
            "unsupported",
            "needs_approval",
        ),
        (
            lambda h: h.govern(
                SdkAgent(name="hand", handoffs=[SdkAgent(name="other")])
            ),
            "unsupported",
            "handoffs",
        ),
        (
            lambda h: h.govern(
                SdkAgent(
                    name="guarded",
                    tools=[
                        function_tool(
                            sc.refund,
                            tool_input_guardrails=[
                                tool_input_guardrail(
                                    lambda data: ToolGuardrailFunctionOutput.allow()
                                )
                            ],
                        )
                    ],
                )
            ),
            "unsupported",
            "tool guardrails",
        ),
        (lambda h: h.session(""), "bad-argument", "session_id"),
        (lambda h: h.run_config("fast"), "bad-argument", "RunConfig"),  # type: ignore[arg-type]
        (lambda h: tool_from(sc.refund), "bad-argument", "FunctionTool"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_to_the_adapter_is_a_typed_error_naming_the_problem(
    make: Any, reason: str, names: str
) -> None:
    """Issue 27: bad input gets a clear, typed error (``AgentsGovernanceError``,
    a ``ValueError``), its ``reason`` and message naming what was wrong."""
    helm = AgentsGovernance(sc.build_agent(MemoryEventStore(), framework_model("oa")))
    with pytest.raises(AgentsGovernanceError) as raised:
        make(helm)
    assert reason == raised.value.reason
    assert names in str(raised.value)
    assert isinstance(raised.value, ValueError)


async def test_an_ungoverned_agent_or_an_unnamed_approval_fails_closed() -> None:
    """Governance fails closed: ``run`` refuses an agent ``govern`` did not
    return; an approval given only through ``state.approve`` with nobody named
    is refused before the tool runs (``"no-decider"``); ``approve`` with an
    empty ``by`` is refused."""
    store = MemoryEventStore()
    helm, agent, _ = desk(store, sc.REFUND_800)
    session = helm.session()
    with pytest.raises(AgentsGovernanceError) as ungoverned:
        await session.run(SdkAgent(name="plain"), "hi")
    assert "not-governed" == ungoverned.value.reason

    first = await session.run(agent, sc.MESSAGES[sc.REFUND_800])
    (item,) = first.interruptions
    state = first.to_state()
    with pytest.raises(AgentsGovernanceError) as nobody:
        session.approve(state, item, by="")
    assert "bad-argument" == nobody.value.reason
    state.approve(item)  # the SDK's own approval, nobody named
    with pytest.raises(Exception) as refused:
        await session.run(agent, state)
    cause = refused.value.__cause__ or refused.value
    assert isinstance(cause, AgentsGovernanceError)
    assert "no-decider" == cause.reason
    assert session.id is not None
    assert isinstance(await session.question(item), AskPause)


# -- tools across, messages across ----------------------------------------------------


async def test_i4_tool_from_openai_agents_keeps_the_tool_and_a_native_agent_runs_it(
    runs_file: Path,
) -> None:
    """Issue 27 item 4: ``Tool.from_openai_agents(function_tool)`` keeps the
    name, description and parameters schema; a native helmlog agent runs it
    (through the SDK's own invocation)."""
    ft = function_tool(sc.refund)
    made = Tool.from_openai_agents(ft)
    assert (ft.name, ft.description, ft.params_json_schema) == (
        made.name,
        made.description,
        made.input_schema,
    )
    agent = (
        Agent.create(
            provider=scripted(
                [
                    Reply(
                        tool_calls=[
                            Call(
                                id="c1",
                                name="refund",
                                args={"order_id": "3", "amount": 12},
                            )
                        ]
                    ),
                    "Done.",
                ]
            ),
            model="m",
        )
        .tool(made)
        .build()
    )
    assert "Done." == await agent.run("refund 12 on order 3")
    assert ["refund"] == sc.runs(runs_file)
    tool_message = agent.last_snapshot().history[-2]
    assert "refunded $12.00 on order 3" == tool_message.content


def test_messages_cross_both_ways() -> None:
    """The converters: SDK input items to helmlog messages (a reply's text and
    calls are one message) and back."""
    messages = (
        Message(role="user", content="hi"),
        Message(
            role="assistant",
            content="looking",
            tool_calls=(Call(id="c1", name="lookup_order", args={"order_id": "7"}),),
        ),
        Message(
            role="tool", content="found", tool_call_id="c1", tool_name="lookup_order"
        ),
        Message(role="assistant", content="done"),
    )
    assert messages == to_messages(to_input_items(messages))
    assert (Message(role="user", content="plain"),) == to_messages("plain")
