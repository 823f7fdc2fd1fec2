"""G.8 — the ledger and its facts: a row per decision, a value-free fact per row.

Pattern: law-named unit tests on whole runs with the scripted provider; rows
         are read from ``last_snapshot()``, facts from a watcher, appends from
         a store that notes what it accepted.
Role:    unit tests for the rows the walkers return and the journal files.
Emits:   nothing.

Laws: G44 (every decision files a row, in order, never rewritten), G45 (field
presence), G46 (what ``why`` holds), G47 (what ``changed`` means), G48
(iteration), G49 (the decision fact: one per row, after the row, no value),
G50 (determinism).

Why a noting store: "emitted after the row is appended" is about the order of
two things in two places; the store says what it held at the moment the
watcher heard the fact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    AgentBuilder,
    CheckInDecision,
    MessageDeniedError,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    conversation_redaction,
    deny,
    is_ask_pause,
    sliding_window,
    tool,
)
from helmlog.events import (
    MemoryEventStore,
    MiddlewareDecision,
    MiddlewareDecisionEvent,
    StoredEvent,
)
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from .helpers import Recorder

SECRET = "VALUE-7f3a"


@tool
def refund(order: int, amount: float) -> dict[str, Any]:
    """Refund an order."""
    return {"order": order, "refunded": amount, "card": f"{SECRET}-card"}


def call(call_id: str, amount: float, order: int = 7) -> ToolCallRequest:
    return ToolCallRequest(
        id=call_id, name="refund", args={"order": order, "amount": amount}
    )


def builder(model: ScriptedProvider, **options: Any) -> AgentBuilder:
    return Agent.create(provider=model, model="m", ids=counter_ids(), **options).tool(
        refund
    )


def encoded(row: MiddlewareDecision) -> dict[str, Any]:
    return msgspec.json.decode(msgspec.json.encode(row))


def rows(agent: Agent) -> tuple[MiddlewareDecision, ...]:
    return agent.last_snapshot().middleware_decisions


def ceiling(call: Any) -> Any:
    return deny("over the ceiling") if call.args["amount"] > 100 else allow()


def cap(call: Any) -> Any:
    return allow({**call.args, "amount": 50.0}, "cap at 50")


def mask(res: Any) -> Any:
    return allow({**res.result, "card": "****"}, "mask the card")


def voice(msg: Any) -> Any:
    if msg.phase == "input":
        return allow(msg.content.replace("7", SECRET), "tag the order")
    return allow()


LINKS = (
    ToolMiddleware(name="ceiling", on_tool_call=ceiling),
    ToolMiddleware(name="cap", on_tool_call=cap, on_tool_result=mask),
)


def governed(model: ScriptedProvider, **options: Any) -> Agent:
    return (
        builder(model, **options)
        .tool_middleware(*LINKS)
        .message_middleware(MessageMiddleware(name="voice", on_message=voice))
        .build()
    )


def batch_script() -> ScriptedProvider:
    return scripted([Reply(tool_calls=[call("c1", 80), call("c2", 500)]), "Refunded."])


EXPECTED_ORDER = [
    ("voice", "input", None, "allow"),
    ("ceiling", "before-tool", "c1", "allow"),
    ("cap", "before-tool", "c1", "allow"),
    ("cap", "after-tool", "c1", "allow"),
    ("ceiling", "before-tool", "c2", "deny"),
    ("voice", "output", None, "allow"),
]


def order(agent: Agent) -> list[tuple[str, str, str | None, str]]:
    return [(r.middleware, r.moment, r.tool_call_id, r.outcome) for r in rows(agent)]


# -- G44 --------------------------------------------------------------------


async def test_g44_every_decision_files_a_row_in_decision_order() -> None:
    """G44: pass-throughs included, rows follow the order decisions were made."""
    agent = governed(batch_script())
    assert "Refunded." == await agent.run("refund order 7")
    assert EXPECTED_ORDER == order(agent)


async def test_g44_rows_of_every_turn_oldest_first_never_rewritten() -> None:
    """G44: the snapshot holds every turn's rows; earlier rows stay as they were."""
    model = scripted(
        [Reply(tool_calls=[call("c1", 80), call("c2", 500)]), "Refunded.", "Bye."]
    )
    agent = governed(model)
    await agent.run("refund order 7")
    first = rows(agent)
    await agent.follow_up("thanks")
    second = rows(agent)
    assert first == second[: len(first)]
    assert [("voice", "input", None, "allow"), ("voice", "output", None, "allow")] == [
        (r.middleware, r.moment, r.tool_call_id, r.outcome)
        for r in second[len(first) :]
    ]


async def test_g44_no_rows_when_no_chain_was_consulted() -> None:
    """G44: when the permission gate refuses every call, the ledger is ()."""
    agent = (
        builder(batch_script())
        .tool_middleware(*LINKS)
        .permissions(lambda c: deny("read-only session"))
        .build()
    )
    recorder = Recorder()
    agent.attach(recorder)
    assert "Refunded." == await agent.run("refund order 7")
    assert ((), []) == (rows(agent), recorder.of("middleware.decision"))


# -- G45 --------------------------------------------------------------------

TOOL_KEYS = {"middleware", "moment", "at", "iteration", "outcome", "changed"}


async def test_g45_field_presence_on_encoded_rows() -> None:
    """G45: phase on message rows, tool fields on tool rows, values on changes."""
    agent = governed(batch_script())
    await agent.run("refund order 7")
    keys = [set(encoded(r)) for r in rows(agent)]
    message = TOOL_KEYS | {"phase"}
    tool_row = TOOL_KEYS | {"tool_name", "tool_call_id"}
    assert [
        message | {"why", "before", "after"},
        tool_row,
        # G93: a before-tool rewrite names the arguments it changed.
        tool_row | {"why", "before", "after", "changed_keys"},
        tool_row | {"why", "before", "after"},
        tool_row | {"why"},
        message,
    ] == keys
    assert {"iteration": 0, "changed": True} == {
        k: encoded(rows(agent)[0])[k] for k in ("iteration", "changed")
    }


async def test_g45_changed_false_and_iteration_zero_are_encoded() -> None:
    """G45: changed=False and iteration=0 are always encoded."""
    agent = (
        builder(scripted(["Hi."]))
        .message_middleware(MessageMiddleware(name="m", on_message=lambda m: allow()))
        .build()
    )
    await agent.run("hello")
    assert {
        "middleware": "m",
        "moment": "input",
        "at": "message",
        "phase": "input",
        "iteration": 0,
        "outcome": "allow",
        "changed": False,
    } == encoded(rows(agent)[0])


async def test_g45_component_id_only_on_the_resume_side_row() -> None:
    """G45: component_id is absent on the ask row and present on the resume row."""
    asker = ToolMiddleware(
        name="four-eyes", on_tool_call=lambda c: ask("ok?", None, "card-1")
    )
    agent = (
        builder(scripted([Reply(tool_calls=[call("c1", 80)]), "Done."]))
        .tool_middleware(asker)
        .build()
    )
    paused = await agent.run("refund")
    assert is_ask_pause(paused)
    await agent.resume(paused.checkpoint, check_in_approved(by="dana"))
    ask_row, resume_row = (encoded(r) for r in rows(agent))
    assert ("component_id" in ask_row, resume_row.get("component_id")) == (
        False,
        "card-1",
    )


async def test_g45_no_row_has_moment_window() -> None:
    """G45: moment is never 'window', even when the window engaged."""
    model = scripted([Reply(tool_calls=[call("c1", 80)]), "One.", "Two.", "Three."])
    agent = (
        builder(model)
        .tool_middleware(*LINKS)
        .message_middleware(MessageMiddleware(name="voice", on_message=voice))
        .window(sliding_window(keep_recent_turns=1))
        .build()
    )
    await agent.run("first")
    await agent.follow_up("second")
    await agent.follow_up("third")
    snapshot = agent.last_snapshot()
    assert 0 < len(snapshot.window_records)
    assert {"input", "before-tool", "after-tool", "output"} == {
        r.moment for r in rows(agent)
    }


# -- G46 / G47 --------------------------------------------------------------


def raiser(ctx: Any) -> Any:
    raise LookupError("no such rate")


BEFORE_CASES = [
    (lambda c: allow(), None, False, "allow"),
    (lambda c: allow(None, "in budget"), "in budget", False, "allow"),
    (lambda c: allow({"order": 7, "amount": 1.0}, "shrink"), "shrink", True, "allow"),
    (lambda c: deny("no refunds today"), "no refunds today", False, "deny"),
    (raiser, "middleware 'rule' threw: no such rate", False, "deny"),
    (
        lambda c: [],
        "middleware 'rule' returned a list, which is not allow(), deny() or ask()",
        False,
        "deny",
    ),
    (lambda c: ask("refund this?"), "refund this?", False, "ask"),
]


@pytest.mark.parametrize(("hook", "why", "changed", "outcome"), BEFORE_CASES)
async def test_g46_g47_before_tool_why_and_changed(
    hook: Any, why: str | None, changed: bool, outcome: str
) -> None:
    """G46/G47: before-tool rows: why per verdict; changed only for a transform."""
    agent = (
        builder(scripted([Reply(tool_calls=[call("c1", 80)]), "Done."]))
        .tool_middleware(ToolMiddleware(name="rule", on_tool_call=hook))
        .build()
    )
    await agent.run("refund")
    (row,) = rows(agent)
    assert (outcome, changed, why) == (row.outcome, row.changed, row.why)


AFTER_CASES = [
    (lambda r: allow(), None, False, "allow"),
    (lambda r: allow(None, "clean"), "clean", False, "allow"),
    (lambda r: allow("masked", "mask it"), "mask it", True, "allow"),
    (lambda r: deny("hide it"), "hide it", True, "deny"),
    (raiser, "middleware 'rule' threw: no such rate", True, "deny"),
    (
        lambda r: None,
        "middleware 'rule' returned None, which is not allow(), deny() or ask()",
        True,
        "deny",
    ),
    (
        lambda r: ask("show it?"),
        "middleware 'rule' asked a person to decide, and there is no pause here to "
        "carry that ask: show it?",
        True,
        "deny",
    ),
]


@pytest.mark.parametrize(("hook", "why", "changed", "outcome"), AFTER_CASES)
async def test_g46_g47_after_tool_why_and_changed(
    hook: Any, why: str | None, changed: bool, outcome: str
) -> None:
    """G46/G47: after-tool rows: every transform and every refusal is a change."""
    agent = (
        builder(scripted([Reply(tool_calls=[call("c1", 80)]), "Done."]))
        .tool_middleware(ToolMiddleware(name="rule", on_tool_result=hook))
        .build()
    )
    await agent.run("refund")
    (row,) = rows(agent)
    assert (outcome, changed, why) == (row.outcome, row.changed, row.why)


MESSAGE_CASES = [
    (lambda m: allow(), None, False, "allow"),
    (lambda m: allow(None, "polite"), "polite", False, "allow"),
    (lambda m: allow("rewritten", "tone"), "tone", True, "allow"),
    (lambda m: deny("off-topic"), "off-topic", False, "deny"),
    (raiser, "middleware 'rule' threw: no such rate", False, "deny"),
]


@pytest.mark.parametrize(("hook", "why", "changed", "outcome"), MESSAGE_CASES)
async def test_g46_g47_message_why_and_changed(
    hook: Any, why: str | None, changed: bool, outcome: str
) -> None:
    """G46/G47: message rows: a rewrite changes, a refusal does not."""
    agent = (
        builder(scripted(["Hi."]))
        .message_middleware(MessageMiddleware(name="rule", on_message=hook))
        .build()
    )
    with contextlib.suppress(MessageDeniedError):
        await agent.run("hello")
    first = rows(agent)[0]
    assert (outcome, changed, why) == (first.outcome, first.changed, first.why)


@pytest.mark.parametrize(
    ("decision", "why", "outcome"),
    [
        (check_in_approved(by="dana"), "approved by dana", "allow"),
        (check_in_approved(by="dana", note="fine"), "approved by dana: fine", "allow"),
        (check_in_declined(by="lee"), "declined by lee", "deny"),
        (
            check_in_declined(by="lee", note="too much"),
            "declined by lee: too much",
            "deny",
        ),
    ],
)
async def test_g46_g47_resume_side_rows(
    decision: CheckInDecision, why: str, outcome: str
) -> None:
    """G46/G47: resume rows say who decided, and never count as a change."""
    agent = (
        builder(scripted([Reply(tool_calls=[call("c1", 80)]), "Done."]))
        .tool_middleware(
            ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("ok?"))
        )
        .build()
    )
    paused = await agent.run("refund")
    assert is_ask_pause(paused)
    await agent.resume(paused.checkpoint, decision)
    asked, resumed = rows(agent)
    assert ("ask", False, "ok?") == (asked.outcome, asked.changed, asked.why)
    assert ("four-eyes", "before-tool", outcome, False, why) == (
        resumed.middleware,
        resumed.moment,
        resumed.outcome,
        resumed.changed,
        resumed.why,
    )


# -- G48 --------------------------------------------------------------------


async def test_g48_iteration_numbers_across_rounds_and_a_resume() -> None:
    """G48: tool rows carry the proposing call's number; resume continues it."""

    def second_round_asks(c: Any) -> Any:
        return ask("ok?") if c.tool_call_id == "c2" else allow()

    model = scripted(
        [
            Reply(tool_calls=[call("c1", 10)]),
            Reply(tool_calls=[call("c2", 20)]),
            "Both refunded.",
            "Again.",
        ]
    )
    agent = (
        builder(model)
        .tool_middleware(
            ToolMiddleware(
                name="four-eyes",
                on_tool_call=second_round_asks,
                on_tool_result=lambda r: allow(),
            )
        )
        .message_middleware(
            MessageMiddleware(name="voice", on_message=lambda m: allow())
        )
        .build()
    )
    recorder = Recorder()
    agent.attach(recorder)
    paused = await agent.run("refund both")
    assert is_ask_pause(paused)
    assert "Both refunded." == await agent.resume(
        paused.checkpoint, check_in_approved(by="d")
    )
    assert [
        ("input", None, "allow", 0),
        ("before-tool", "c1", "allow", 1),
        ("after-tool", "c1", "allow", 1),
        ("before-tool", "c2", "ask", 2),
        ("before-tool", "c2", "allow", 2),
        ("after-tool", "c2", "allow", 2),
        ("output", None, "allow", 3),
    ] == [(r.moment, r.tool_call_id, r.outcome, r.iteration) for r in rows(agent)]
    assert [1, 2, 3] == [e.iteration for e in recorder.of("stream.llm_start")]
    await agent.follow_up("again")
    assert [("input", 0), ("output", 1)] == [
        (r.moment, r.iteration) for r in rows(agent)[7:]
    ]


# -- G49 --------------------------------------------------------------------

FACT_FIELDS = {
    "middleware",
    "moment",
    "at",
    "phase",
    "tool_name",
    "tool_call_id",
    "iteration",
    "outcome",
    "changed",
    "why",
    "component_id",
    # G93: the honesty fields hold names and origins, never values.
    "from_",
    "changed_keys",
}
ENVELOPE = {"session_id", "seq", "timestamp", "prev_hash", "replayed"}


def test_g49_the_fact_type_has_no_value_fields() -> None:
    """G49: the fact's struct holds exactly the fact fields plus the envelope."""
    assert FACT_FIELDS | ENVELOPE == set(MiddlewareDecisionEvent.__struct_fields__)


def fact_view(row: MiddlewareDecision) -> tuple[Any, ...]:
    return tuple(getattr(row, f) for f in sorted(FACT_FIELDS))


class NotingStore(MemoryEventStore):
    """A memory store that notes the seqs it has accepted, as it accepts them."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted: dict[int, str] = {}

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        last = await super().append_sealed(session_id, records, expected_seq)
        for record in records:
            self.accepted[record.seq] = record.decode().type
        return last


@pytest.mark.parametrize("redact", [False, True])
async def test_g49_one_fact_per_row_after_the_row_without_values(redact: bool) -> None:
    """G49: one fact per row, in row order, after its row is stored, no value."""
    store = NotingStore()
    options: dict[str, Any] = {"store": store}
    if redact:
        options["redact"] = conversation_redaction()
    agent = governed(batch_script(), **options)
    heard: list[tuple[Any, dict[int, str]]] = []
    agent.on("middleware.decision", lambda ev: heard.append((ev, dict(store.accepted))))
    await agent.run("refund order 7")
    facts = [ev for ev, _ in heard]
    assert [fact_view(r) for r in rows(agent)] == [
        tuple(getattr(f, name) for name in sorted(FACT_FIELDS)) for f in facts
    ]
    # R4: each fact carries its row's seq, and is heard once the row is stored.
    assert ["decision.filed"] * len(facts) == [held.get(ev.seq) for ev, held in heard]
    assert len(set(f.seq for f in facts)) == len(facts)
    assert {MiddlewareDecisionEvent} == {type(f) for f in facts}
    assert [] == [f for f in facts if SECRET in msgspec.json.encode(f).decode()]
    # The values the facts must not carry are really in the ledger's rows.
    assert (not redact) == (SECRET in msgspec.json.encode(rows(agent)).decode())


async def test_g49_an_agent_without_links_never_emits_the_fact() -> None:
    """G49: an agent with no links emits no middleware.decision."""
    agent = builder(batch_script()).build()
    recorder = Recorder()
    agent.attach(recorder)
    await agent.run("refund order 7")
    assert (0, 0) == (len(recorder.of("middleware.decision")), len(rows(agent)))


# -- G50 --------------------------------------------------------------------


async def test_g50_same_chains_same_script_equal_ledgers() -> None:
    """G50: two agents with the same chains and script file equal ledgers and facts."""
    ledgers, facts = [], []
    for _ in range(2):
        agent = governed(
            scripted(
                [
                    Reply(tool_calls=[call("c1", 80), call("c2", 500)]),
                    Reply(tool_calls=[call("c3", 20, order=8)]),
                    "Refunded.",
                ]
            )
        )
        recorder = Recorder()
        agent.attach(recorder)
        await agent.run("refund orders 7 and 8")
        ledgers.append(rows(agent))
        facts.append(
            [
                msgspec.structs.replace(f, timestamp=0, prev_hash="")
                for f in recorder.of("middleware.decision")
            ]
        )
    assert 9 == len(ledgers[0])
    assert ledgers[0] == ledgers[1]
    assert facts[0] == facts[1]


def test_g50_rows_are_frozen() -> None:
    """G44/G50: a filed row cannot be rewritten in place."""
    row = MiddlewareDecision(
        middleware="m",
        moment="input",
        at="message",
        iteration=0,
        outcome="allow",
        changed=False,
    )
    with pytest.raises(AttributeError):
        row.outcome = "deny"  # type: ignore[misc]
