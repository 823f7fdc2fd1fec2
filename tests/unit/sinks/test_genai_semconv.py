"""Exported telemetry, field by field, against the GenAI semantic conventions v1.41.

Pattern: real governed sessions (memory store; one on a real Redis across two
         hosts) watched by ``OtelProcess``, the sink in its export child as
         production attaches it, sending OTLP/HTTP protobuf to a real receiver
         (``tests/otlp_receiver.py``); what the receiver decoded is checked
         against the conventions' span names, kinds and required attributes.
Role:    unit tests for ``sinks/_otel.py`` (issue 26 item 6).
Emits:   nothing.

Laws: R16 (GenAI spans and a record per fact), R6 (times and ids from the
record), issue 8 item 8 (one trace per turn across hosts), issue 26 item 6
(``gen_ai.provider.name`` on every GenAI span, one root per trace, a refused
call is an error span, every decision record carries its trace and span id,
usage tokens where the provider reports them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from helmlog import (
    Agent,
    AskPause,
    MessageDeniedError,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    deny,
    tool,
)
from helmlog.events import (
    DecisionFiled,
    EventStore,
    LlmStarted,
    MemoryEventStore,
    SessionImported,
    ToolCallRequest,
    TurnStarted,
    open_event_store,
)
from helmlog.runtime import ProviderError
from helmlog.runtime.providers import Reply, openai_chat, scripted
from helmlog.sinks import OtelProcess, OtlpExport, export
from tests.otlp_receiver import Receiver, attributes, otlp_receiver
from tests.replay.streams import FIXTURES, load_records
from tests.unit.runtime.chat_server import (
    ChatServer,
    JsonAnswer,
    completion,
    function_call,
)

INTERNAL = Span.SpanKind.SPAN_KIND_INTERNAL
CLIENT = Span.SpanKind.SPAN_KIND_CLIENT
ERROR = Status.StatusCode.STATUS_CODE_ERROR
UNSET = Status.StatusCode.STATUS_CODE_UNSET
SCRIPTED = "helmlog.scripted"
FRAUD = "orders marked bad go to the fraud desk"
CARDS = "results naming a card go nowhere"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}" + (" to card 4242" if order == "leaky" else "")


def gate(call: Any) -> Any:
    order = call.args["order"]
    if order == "bad":
        return deny(FRAUD)
    return ask("a big refund: ok?") if order == "big" else allow()


def scrub(call: Any) -> Any:
    return deny(CARDS) if "4242" in str(call.result) else allow()


def calls(*orders: tuple[str, str]) -> Reply:
    return Reply(
        tool_calls=[
            ToolCallRequest(id=call_id, name="refund", args={"order": order})
            for call_id, order in orders
        ],
        usage={"input_tokens": 31, "output_tokens": 7},
    )


def desk(
    *watchers: object,
    replies: list[Any],
    store: EventStore | None = None,
) -> Agent:
    """Refunds behind an input, a before-tool, an after-tool and an output rule."""
    polite = MessageMiddleware(
        name="polite",
        on_message=lambda m: deny("no shouting") if m.content.isupper() else allow(),
    )
    return (
        Agent.create(provider=scripted(replies), model="m", store=store)
        .tool(refund)
        .act(
            input=[polite],
            before_tool=[ToolMiddleware(name="gate", on_tool_call=gate)],
            after_tool=[ToolMiddleware(name="scrub", on_tool_result=scrub)],
            output=[polite],
        )
        .watch(*watchers)
        .build()
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as taken:
        yield taken


@pytest.fixture
def children(receiver: Receiver) -> Iterator[list[OtelProcess]]:
    """Export children made in a test, closed (again) before the receiver
    stops, so a failing test leaves no child exporting into the void."""
    made: list[OtelProcess] = []
    yield made
    for process in made:
        process.close()


def child(receiver: Receiver, children: list[OtelProcess]) -> OtelProcess:
    """An ``OtelSink`` in its export child, sending to ``receiver``."""
    process = OtelProcess(receiver.url)
    children.append(process)
    return process


def exported(
    receiver: Receiver, process: OtelProcess
) -> tuple[list[Span], list[LogRecord]]:
    process.close()  # the child has sent everything when it returns
    return receiver.spans(), receiver.log_records()


def by_operation(spans: list[Span]) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = defaultdict(list)
    for span in sorted(spans, key=lambda s: s.start_time_unix_nano):
        grouped[str(attributes(span.attributes)["gen_ai.operation.name"])].append(span)
    return grouped


def assert_one_root_per_trace(spans: list[Span]) -> None:
    """Each trace has one root, and every other span's parent is in it."""
    traces: dict[bytes, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span.trace_id].append(span)
    for members in traces.values():
        ids = {s.span_id for s in members}
        roots = [s for s in members if not s.parent_span_id]
        assert 1 == len(roots), [s.name for s in roots]
        assert all(s.parent_span_id in ids for s in members if s.parent_span_id)


def assert_records_traced(records: list[LogRecord], spans: list[Span]) -> None:
    """Every decision record names a span that was exported, in its trace."""
    trace_of = {s.span_id: s.trace_id for s in spans}
    for record in records:
        assert 16 == len(record.trace_id) and any(record.trace_id)
        assert record.span_id in trace_of, record.body.string_value
        assert trace_of[record.span_id] == record.trace_id


def tool_span(spans: list[Span], call_id: str) -> Span:
    (span,) = [
        s
        for s in spans
        if attributes(s.attributes).get("gen_ai.tool.call.id") == call_id
    ]
    return span


async def test_issue26_a_governed_session_exports_genai_spans_field_by_field(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6, R16: names, kinds and required attributes of
    ``invoke_agent``, ``chat`` and ``execute_tool`` (v1.41), the provider on
    each, usage tokens, one root per trace, refused calls as error spans and
    every decision record traced, as the export child sends them."""
    process = child(receiver, children)
    agent = desk(
        process,
        replies=[
            calls(("c1", "bad"), ("c2", "good"), ("c3", "leaky")),
            calls(("c4", "big")),
            Reply("Done.", usage={"input_tokens": 52, "output_tokens": 2}),
            Reply("Sure.", usage={"input_tokens": 60, "output_tokens": 1}),
        ],
    )
    out = await agent.run("refund my orders")
    assert isinstance(out, AskPause)
    assert "Done." == await agent.resume(out.checkpoint, check_in_approved("dana"))
    assert "Sure." == await agent.follow_up("thanks")
    assert agent.session_id is not None
    sid = agent.session_id
    stream = [r.decode() for r in await agent.store.read(sid)]
    spans, records = exported(receiver, process)

    assert_one_root_per_trace(spans)
    turns = [e for e in stream if isinstance(e, TurnStarted)]
    assert [(True, SCRIPTED)] * 2 == [(t.trace_minted, t.provider) for t in turns]
    assert {SCRIPTED} == {e.provider for e in stream if isinstance(e, LlmStarted)}
    # Two turns, two traces: each turn's root takes its minted context's ids.
    roots = [s for s in spans if not s.parent_span_id]
    assert sorted(t.traceparent for t in turns) == sorted(
        f"00-{r.trace_id.hex()}-{r.span_id.hex()}-01" for r in roots
    )

    ops = by_operation(spans)
    assert {"invoke_agent", "chat", "execute_tool"} == set(ops)
    for span in spans:  # required on every GenAI span (and set on tools too)
        assert SCRIPTED == attributes(span.attributes)["gen_ai.provider.name"]
    # invoke_agent: the turn, its continuation after the ask, the follow-up.
    assert 3 == len(ops["invoke_agent"])
    for span in ops["invoke_agent"]:
        assert ("invoke_agent helmlog", INTERNAL) == (span.name, span.kind)
        assert {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": SCRIPTED,
            "gen_ai.agent.name": "helmlog",
            "gen_ai.conversation.id": sid,
            "gen_ai.request.model": "m",
        }.items() <= attributes(span.attributes).items()
        assert UNSET == span.status.code
    first, resumed, follow_up = ops["invoke_agent"]
    assert resumed.parent_span_id == first.span_id  # the ask's continuation
    assert True is attributes(resumed.attributes)["helmlog.resumed"]
    assert not follow_up.parent_span_id and follow_up.trace_id != first.trace_id
    # chat: one per model call, with what the provider reported.
    chats = ops["chat"]
    assert [("chat m", CLIENT)] * 4 == [(s.name, s.kind) for s in chats]
    assert [(31, 7), (31, 7), (52, 2), (60, 1)] == [
        (
            attributes(s.attributes)["gen_ai.usage.input_tokens"],
            attributes(s.attributes)["gen_ai.usage.output_tokens"],
        )
        for s in chats
    ]
    for span in chats:
        assert {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": SCRIPTED,
            "gen_ai.request.model": "m",
            "gen_ai.conversation.id": sid,
        }.items() <= attributes(span.attributes).items()
    # execute_tool: a refused call is an error span, not one that ran.
    tools = ops["execute_tool"]
    for span in tools:
        assert ("execute_tool refund", INTERNAL) == (span.name, span.kind)
        assert {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund",
        }.items() <= attributes(span.attributes).items()
    denied, ran, leaky = (tool_span(tools, c) for c in ("c1", "c2", "c3"))
    assert (ERROR, FRAUD) == (denied.status.code, denied.status.message)
    assert {"error.type": "denied", "helmlog.refused_by": "gate"}.items() <= (
        attributes(denied.attributes).items()
    )
    assert (ERROR, CARDS) == (leaky.status.code, leaky.status.message)
    assert "result_denied" == attributes(leaky.attributes)["error.type"]
    assert UNSET == ran.status.code
    assert "error.type" not in attributes(ran.attributes)
    # c4 paused (its span ends at the ask) and ran once approved.
    asked = [
        s for s in tools if attributes(s.attributes)["gen_ai.tool.call.id"] == "c4"
    ]
    assert [UNSET, UNSET] == [s.status.code for s in asked]
    assert asked[1].parent_span_id == resumed.span_id

    # Every decision is a record, each with its trace and span id; the
    # input walk's record is in the turn it opened.
    facts = [e for e in stream if isinstance(e, DecisionFiled)]
    assert len(facts) == len(records)
    assert_records_traced(records, spans)
    inputs = [
        r for r in records if attributes(r.attributes)["helmlog.moment"] == "input"
    ]
    assert [first.span_id, follow_up.span_id] == [r.span_id for r in inputs]
    refusal = next(
        r for r in records if attributes(r.attributes).get("helmlog.outcome") == "deny"
    )
    assert denied.span_id == refusal.span_id


async def test_issue26_a_declined_ask_ends_its_call_in_an_error_span(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6: a person's decline is the call's outcome: an
    ``execute_tool`` span with ``error.type`` ``declined``, in the turn's trace."""
    process = child(receiver, children)
    agent = desk(process, replies=[calls(("c1", "big")), "Not refunded."])
    out = await agent.run("refund order big")
    assert isinstance(out, AskPause)
    answer = await agent.resume(out.checkpoint, check_in_declined("dana"))
    assert "Not refunded." == answer
    spans, records = exported(receiver, process)

    assert_one_root_per_trace(spans)
    assert_records_traced(records, spans)
    declined = [
        s for s in spans if attributes(s.attributes).get("error.type") == "declined"
    ]
    assert 1 == len(declined)
    assert ("execute_tool refund", ERROR) == (
        declined[0].name,
        declined[0].status.code,
    )
    assert "c1" == attributes(declined[0].attributes)["gen_ai.tool.call.id"]


async def test_issue26_a_refused_input_is_an_invoke_agent_that_failed(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6: an input the rules refuse opens no turn; its walk is
    exported as a root ``invoke_agent`` span in error, and its record is
    traced under it (before, the record had no trace). ``error.fatal`` names
    no provider (G91 pins its fields): the span says the one the sink last
    saw, and ``unknown`` before it saw any."""
    process = child(receiver, children)
    agent = desk(process, replies=["Hello.", "never"])
    with pytest.raises(MessageDeniedError):
        await agent.run("REFUND EVERYTHING")
    assert "Hello." == await agent.run("hello")
    with pytest.raises(MessageDeniedError):
        await agent.run("REFUND IT ALL")
    spans, records = exported(receiver, process)

    assert_one_root_per_trace(spans)
    assert_records_traced(records, spans)
    failed = sorted(
        (s for s in spans if s.status.code == ERROR),
        key=lambda s: s.start_time_unix_nano,
    )
    assert 2 == len(failed)
    for span in failed:
        assert ("invoke_agent helmlog", INTERNAL, b"") == (
            span.name,
            span.kind,
            span.parent_span_id,
        )
        assert {
            "gen_ai.operation.name": "invoke_agent",
            "error.type": "ERR_MESSAGE_DENIED",
        }.items() <= attributes(span.attributes).items()
        (record,) = [r for r in records if r.span_id == span.span_id]
        assert "deny" == attributes(record.attributes)["helmlog.outcome"]
    assert ["unknown", SCRIPTED] == [
        attributes(s.attributes)["gen_ai.provider.name"] for s in failed
    ]


async def test_issue26_openai_chat_names_its_provider_and_its_usage(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6: with ``openai_chat`` (the real ``openai`` SDK against
    a local Chat Completions server) every span says ``openai`` and the chat
    spans carry the tokens the server reported."""
    server = ChatServer()
    server.start()
    try:
        server.answer(
            JsonAnswer(
                completion(
                    None,
                    tool_calls=[function_call("c1", "refund", '{"order": "good"}')],
                    finish_reason="tool_calls",
                    prompt_tokens=21,
                    completion_tokens=4,
                )
            ),
            JsonAnswer(completion("Done.", prompt_tokens=30, completion_tokens=2)),
        )
        process = child(receiver, children)
        async with openai_chat(
            base_url=server.base_url, api_key="sk-test", max_retries=0
        ) as model:
            agent = (
                Agent.create(provider=model, model="gpt-test")
                .tool(refund)
                .watch(process)
                .build()
            )
            assert "Done." == await agent.run("refund order good")
    finally:
        server.stop()
    spans, records = exported(receiver, process)

    assert_one_root_per_trace(spans)
    assert 4 == len(spans)
    assert {"openai"} == {
        attributes(s.attributes)["gen_ai.provider.name"] for s in spans
    }
    chats = by_operation(spans)["chat"]
    assert [(21, 4), (30, 2)] == [
        (
            attributes(s.attributes)["gen_ai.usage.input_tokens"],
            attributes(s.attributes)["gen_ai.usage.output_tokens"],
        )
        for s in chats
    ]
    assert [] == records  # no rules: no decisions


async def test_issue26_a_resume_on_a_store_without_the_session_is_its_own_root(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6: a pause resumed where the store lacks the session is
    imported (``session.imported``, a minted context); the continuation's
    ``invoke_agent`` takes that context's ids, the root of its trace."""
    asking = desk(replies=[calls(("c1", "big"))])
    out = await asking.run("refund order big")
    assert isinstance(out, AskPause)
    process = child(receiver, children)
    elsewhere = desk(process, replies=["Done."], store=MemoryEventStore())
    answer = await elsewhere.resume(out.checkpoint, check_in_approved("dana"))
    assert "Done." == answer
    stream = [r.decode() for r in await elsewhere.store.read(out.checkpoint.session_id)]
    spans, records = exported(receiver, process)

    (imported,) = [e for e in stream if isinstance(e, SessionImported)]
    assert imported.trace_minted
    assert_one_root_per_trace(spans)
    assert_records_traced(records, spans)
    (root,) = [s for s in spans if not s.parent_span_id]
    assert "invoke_agent helmlog" == root.name
    assert imported.traceparent == f"00-{root.trace_id.hex()}-{root.span_id.hex()}-01"


@pytest.mark.redis
async def test_issue26_two_hosts_on_redis_export_one_rooted_trace(
    redis_url: str,
) -> None:
    """Issue 26 item 6, issue 8 item 8, on a real Redis: host A runs the turn
    to its ask, host B resumes it; each exports through its own child, and
    the one trace they make has one root (A's turn) with B's continuation
    under it, every record traced."""
    with otlp_receiver() as receiver:
        store_a, store_b = open_event_store(redis_url), open_event_store(redis_url)
        host_a, host_b = OtelProcess(receiver.url), OtelProcess(receiver.url)
        try:
            a = desk(host_a, replies=[calls(("c1", "big"))], store=store_a)
            out = await a.run("refund order big")
            assert isinstance(out, AskPause)
            b = desk(host_b, replies=["Done."], store=store_b)
            answer = await b.resume(out.checkpoint.to_json(), check_in_approved("d"))
            assert "Done." == answer
        finally:
            await store_a.close()
            await store_b.close()
        host_a.close()
        spans, records = exported(receiver, host_b)

    assert 1 == len({s.trace_id for s in spans})
    assert_one_root_per_trace(spans)
    assert_records_traced(records, spans)
    first, continuation = by_operation(spans)["invoke_agent"]
    assert continuation.parent_span_id == first.span_id
    assert {SCRIPTED} == {
        attributes(s.attributes)["gen_ai.provider.name"] for s in spans
    }


async def test_issue26_a_model_call_that_fails_ends_its_chat_span_in_error(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6: the conventions' ``error.type`` is conditionally
    required when the operation failed: a provider that raises ends the
    ``chat`` span and the turn's span in error, with the run's error code."""

    def broken(request: Any) -> Reply:
        raise ProviderError("the model is down")

    process = child(receiver, children)
    agent = (
        Agent.create(provider=scripted(respond=broken), model="m")
        .watch(process)
        .build()
    )
    with pytest.raises(ProviderError):
        await agent.run("hello")
    spans, _ = exported(receiver, process)

    assert_one_root_per_trace(spans)
    ops = by_operation(spans)
    (chat,) = ops["chat"]
    (turn,) = ops["invoke_agent"]
    for span in (chat, turn):
        assert ERROR == span.status.code
        assert ProviderError.code == attributes(span.attributes)["error.type"]


async def test_issue26_served_calls_export_one_rooted_span_each_with_their_records(
    receiver: Receiver,
) -> None:
    """Issue 26 item 6: ``mcp_serve`` records no turn (rows and a dispatch per
    call); exported as ``helmlog replay --otlp`` does, each call is an
    ``execute_tool`` span, the root of its own trace, a refused one in
    error, and every record carries its call's trace and span id (before,
    no span was exported and two of three records had none)."""
    from mcp.client import Client

    from helmlog.gateway import mcp_serve

    gate = ToolMiddleware(
        name="gate",
        on_tool_call=lambda c: deny(FRAUD) if c.args["order"] == "bad" else allow(),
        on_tool_result=lambda r: allow(),
    )
    served = mcp_serve([refund], name="desk", tool_middleware=[gate])
    async with Client(served.memory_streams(), cache=None) as client:
        ran = await client.call_tool("refund", {"order": "good"})
        refused = await client.call_tool("refund", {"order": "bad"})
    assert (False, True) == (bool(ran.is_error), bool(refused.is_error))
    (sid,) = served.session_ids
    records = await served.store.read(sid)
    with OtlpExport(receiver.url) as collector:
        await export(records, collector.sink, target=receiver.url)
    spans, logs = receiver.spans(), receiver.log_records()

    assert_one_root_per_trace(spans)
    assert 2 == len({s.trace_id for s in spans})
    assert_records_traced(logs, spans)
    assert 3 == len(logs)  # before- and after-tool for one, the refusal
    good, bad = sorted(spans, key=lambda s: s.start_time_unix_nano)
    for span in (good, bad):
        assert ("execute_tool refund", INTERNAL) == (span.name, span.kind)
    assert UNSET == good.status.code
    assert (ERROR, FRAUD) == (bad.status.code, bad.status.message)
    assert "denied" == attributes(bad.attributes)["error.type"]


class Verdict(msgspec.Struct):
    order: int
    approved: bool


async def test_issue26_a_structured_streamed_request_says_so_on_its_spans(
    receiver: Receiver, children: list[OtelProcess]
) -> None:
    """Issue 26 item 6: v1.41's conditionally required request attributes:
    ``gen_ai.output.type`` when the request names an output format (an
    ``output_type``: ``json``, on ``chat`` and ``invoke_agent``) and
    ``gen_ai.request.stream`` iff the provider streams to the run (a governed
    run holds its drafts and records the same either way, G41)."""
    process = child(receiver, children)
    typed = (
        Agent.create(
            provider=scripted(
                [Reply(output=Verdict(order=7, approved=True))], stream=True
            ),
            model="m",
            output_type=Verdict,
        )
        .watch(process)
        .build()
    )
    assert '{"order":7,"approved":true}' == await typed.run("decide order 7")
    streamed = (
        Agent.create(provider=scripted(["Hi."], stream=True), model="m")
        .watch(process)
        .build()
    )
    assert "Hi." == await streamed.run("hello")
    plain = desk(process, replies=["Hello."])
    assert "Hello." == await plain.run("hello")
    spans, _ = exported(receiver, process)

    def said(span: Span) -> tuple[Any, Any]:
        got = attributes(span.attributes)
        return got.get("gen_ai.output.type"), got.get("gen_ai.request.stream")

    def of(agent: Agent) -> list[Span]:
        return [
            s
            for s in spans
            if attributes(s.attributes)["gen_ai.conversation.id"] == agent.session_id
        ]

    assert {
        "chat m": ("json", None),
        "invoke_agent helmlog": ("json", None),
    } == {s.name: said(s) for s in of(typed)}
    assert {
        "chat m": (None, True),
        "invoke_agent helmlog": (None, None),
    } == {s.name: said(s) for s in of(streamed)}
    assert [(None, None)] * 2 == [said(s) for s in of(plain)]


async def test_issue26_a_served_pause_exports_rooted_spans_with_their_records(
    receiver: Receiver,
) -> None:
    """Issue 26 item 6, R10: the golden served pause (``mcp_serve``'s ask, no
    turn, no trace context) exported as ``replay --otlp`` does: the call's
    span before the pause and after the approval each root their trace (no
    ``invoke_agent`` opens: no turn does, and none would end), and both
    records name an exported span."""
    records = load_records(FIXTURES / "v3_served_pause.jsonl")
    with OtlpExport(receiver.url) as collector:
        await export(records, collector.sink, target=receiver.url)
    spans, logs = receiver.spans(), receiver.log_records()

    assert ["execute_tool refund"] * 2 == [s.name for s in spans]
    assert_one_root_per_trace(spans)
    assert 2 == len(logs)
    assert_records_traced(logs, spans)
