"""The row's honesty fields: ``from`` when declared, ``changed_keys`` on rewrites.

Pattern: whole runs over a scripted provider; the rows, their encoding, the
         facts a watcher hears, an OTel decision record and the replay
         timeline are each read for the two fields.
Role:    unit tests of seed 003's honesty fields as SPEC G93 states them.
Emits:   nothing.

Laws: G93 (a row carries ``from`` only when the link declared it, and
``changed_keys`` — names, never values — for a before-tool rewrite; both are
facts), G49 (the fact still carries no value), R10 (rows written before the
fields existed decode with both absent).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)

from helmlog import Agent, MessageMiddleware, ToolMiddleware, allow, tool
from helmlog.events import MiddlewareDecision, decode_event
from helmlog.events.lowlevel import fact_for
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.sinks import OtelSink

from .helpers import Recorder

SECRET = "4111-secret-card"


@tool
def refund(order: int, amount: float, currency: str = "USD", note: str = "") -> str:
    """Refund an order."""
    return f"refunded {amount} {currency} on order {order}"


def call_script(args: dict[str, Any]) -> Any:
    return scripted(
        [Reply(tool_calls=[ToolCallRequest(id="c1", name="refund", args=args)]), "ok"]
    )


def person_amount(call: Any) -> Any:
    """A rewrite that declares its new amount came from a person."""
    args = {**call.args, "amount": 120.0}
    args.pop("note", None)
    return allow(args, "the customer confirmed $120", from_={"amount": "person"})


def build(model: Any, *links: Any, watchers: tuple[Any, ...] = ()) -> Agent:
    return (
        Agent.create(provider=model, model="m")
        .tool(refund)
        .tool_middleware(*links)
        .watch(*watchers)
        .build()
    )


async def test_g93_a_before_tool_rewrite_files_from_and_changed_keys() -> None:
    """G93: the row holds the declared origins and the names of what changed."""
    ran: list[dict[str, Any]] = []
    link = ToolMiddleware(name="confirm", on_tool_call=person_amount)
    spy = ToolMiddleware(
        name="spy", on_tool_call=lambda c: ran.append(dict(c.args)) or allow()
    )
    agent = build(
        call_script({"order": 7, "amount": 987.65, "note": SECRET}), link, spy
    )
    await agent.run("refund")
    row = agent.last_snapshot().middleware_decisions[0]
    assert {"amount": "person"} == row.from_
    assert ("amount", "note") == row.changed_keys
    assert [{"order": 7, "amount": 120.0}] == ran
    encoded = msgspec.json.decode(msgspec.json.encode(row))
    assert {"amount": "person"} == encoded["from"]
    assert "from_" not in encoded
    assert ["amount", "note"] == encoded["changed_keys"]


async def test_g93_from_is_absent_unless_declared() -> None:
    """G93: a rewrite that declares nothing files no ``from``."""
    link = ToolMiddleware(
        name="round",
        on_tool_call=lambda c: allow({**c.args, "amount": 100.0}, "rounded down"),
    )
    agent = build(call_script({"order": 7, "amount": 101.5}), link)
    await agent.run("refund")
    row = agent.last_snapshot().middleware_decisions[0]
    assert (None, ("amount",)) == (row.from_, row.changed_keys)
    assert "from" not in msgspec.json.decode(msgspec.json.encode(row))


async def test_g93_pass_throughs_and_after_tool_rewrites_name_no_keys() -> None:
    """G93: changed_keys is a before-tool rewrite's; a pass-through and an
    after-tool rewrite file none, and a rewrite that changes nothing names none."""
    same = ToolMiddleware(
        name="same", on_tool_call=lambda c: allow(dict(c.args), "re-checked")
    )
    looked = ToolMiddleware(name="looked", on_tool_call=lambda c: allow())
    masked = ToolMiddleware(
        name="mask",
        on_tool_result=lambda c: allow(
            "[masked]", "hid the receipt", from_={"result": "app"}
        ),
    )
    agent = build(call_script({"order": 7, "amount": 5.0}), same, looked, masked)
    await agent.run("refund")
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("same", "before-tool", ()),
        ("looked", "before-tool", None),
        ("mask", "after-tool", None),
    ] == [(r.middleware, r.moment, r.changed_keys) for r in rows]
    assert {"result": "app"} == rows[2].from_


async def test_g93_a_message_rewrite_carries_its_declaration() -> None:
    """G93: ``from_`` is the link's declaration at a message moment too."""
    fill = MessageMiddleware(
        name="fill",
        on_message=lambda m: (
            allow(
                m.content + " (EUR)", "default currency", from_={"currency": "default"}
            )
            if m.phase == "input"
            else allow()
        ),
    )
    agent = (
        Agent.create(provider=scripted(["hi"]), model="m")
        .message_middleware(fill)
        .build()
    )
    await agent.run("refund 5")
    first = agent.last_snapshot().middleware_decisions[0]
    assert ({"currency": "default"}, None) == (first.from_, first.changed_keys)


async def test_g93_both_fields_are_facts_and_no_value_rides_them() -> None:
    """G93/G49: a watcher's fact carries both fields and still no value."""
    recorder = Recorder()
    link = ToolMiddleware(name="confirm", on_tool_call=person_amount)
    agent = build(
        call_script({"order": 7, "amount": 987.65, "note": SECRET}),
        link,
        watchers=(recorder,),
    )
    await agent.run("refund")
    (fact,) = recorder.of("middleware.decision")
    assert ({"amount": "person"}, ("amount", "note")) == (fact.from_, fact.changed_keys)
    assert SECRET not in repr(fact)
    assert "987.65" not in msgspec.json.encode(fact).decode()


async def test_g93_otel_decision_records_carry_the_names() -> None:
    """G93: the OTel decision record has ``helmlog.changed_keys`` and one
    ``helmlog.from.<name>`` per declared origin, and no value."""
    logs = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    sink = OtelSink(logger_provider=provider, deferred=False)
    link = ToolMiddleware(name="confirm", on_tool_call=person_amount)
    agent = build(
        call_script({"order": 7, "amount": 987.65, "note": SECRET}),
        link,
        watchers=(sink,),
    )
    await agent.run("refund")
    (record,) = [d.log_record for d in logs.get_finished_logs()]
    attributes = dict(record.attributes or {})
    assert ("amount", "note") == tuple(attributes["helmlog.changed_keys"])
    assert "person" == attributes["helmlog.from.amount"]
    assert SECRET not in repr(attributes)


def test_g93_the_replay_timeline_shows_the_names() -> None:
    """G93: ``helmlog replay`` and ``tail`` print the names and origins."""
    from helmlog._record import timeline_row

    row = MiddlewareDecision(
        middleware="confirm",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=True,
        tool_name="refund",
        tool_call_id="c1",
        why="the customer confirmed",
        before={"amount": 999},
        after={"amount": 120},
        from_={"amount": "person"},
        changed_keys=("amount",),
    )
    fact = fact_for(row, session_id="s", seq=4)
    line = timeline_row(fact)
    assert line is not None
    assert line[2].endswith("[changed: amount; from: amount=person]")
    assert "999" not in line[2]


def test_g93_rows_written_before_the_fields_decode_without_them() -> None:
    """R10/G93: an older stored row has neither field."""
    old = (
        b'{"type":"decision.filed","session_id":"s","seq":3,"timestamp":1,'
        b'"row":{"middleware":"m","moment":"before-tool","at":"tool",'
        b'"iteration":1,"outcome":"allow","changed":true,"why":"w",'
        b'"before":{"a":1},"after":{"a":2}}}'
    )
    event: Any = decode_event(old)
    assert (None, None) == (event.row.from_, event.row.changed_keys)


@pytest.mark.parametrize(
    ("value", "from_", "match"),
    [
        ({"a": 1}, {"a": "robot"}, "must be 'person', 'default' or 'app'"),
        ({"a": 1}, {"": "person"}, "non-empty str names"),
        ({"a": 1}, {}, "non-empty mapping"),
        ({"a": 1}, ["a"], "non-empty mapping"),
        (None, {"a": "person"}, "needs a value to rewrite"),
    ],
)
def test_g93_a_bad_declaration_is_refused_where_it_is_made(
    value: Any, from_: Any, match: str
) -> None:
    """G93: ``allow(value, why, from_=...)`` checks the declaration."""
    with pytest.raises(ValueError, match=match):
        allow(value, "why", from_=from_)
