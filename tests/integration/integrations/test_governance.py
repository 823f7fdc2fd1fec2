"""``Governance``: the framework-neutral object a framework adapter holds.

Pattern: the shared scenario (``scenario.py``) steered by a small driver
         that plays a framework's loop (its model's replies, its tool calls
         through ``call_tool``), on a memory store; an ask decided by a
         second ``Governance`` on the same store, as an approver's process
         would; ``tool_for``, ``on_store`` and ``resume`` on their own.
Role:    integration tests of ``integrations/_governance.py`` and the
         ``DecidesAsks`` shape ``helmlog serve`` recognises it by.
Emits:   nothing.

Laws: issue 27 items 1–6 (one record: the native loop's rows; an ask decided
elsewhere runs the tool once), G56 (a registered tool's check-in holds),
R9, G61.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helmlog import AskPause, check_in_approved
from helmlog.events import EventStore, MemoryEventStore
from helmlog.gateway.http._service import DecidesAsks
from helmlog.integrations import Governance, GovernanceError
from helmlog.runtime import Tool
from helmlog.runtime.lowlevel import Ran, Refused, SteeredTurn
from helmlog.runtime.providers import framework_model

from . import scenario as sc


async def steer(
    g: Governance, name: str, *, decide: Any = None
) -> tuple[SteeredTurn, list[Any]]:
    """Play conversation ``name`` as a framework would, through ``g``.

    Each call runs the framework's tool (``tool_for`` around the plain
    function); at a pause ``decide(pause)`` resolves it (elsewhere), and the
    call is re-entered, as a framework re-executes its tool node.
    """
    turn = await g.steering.open_turn(sc.MESSAGES[name], session_id=name)
    read: list[Any] = []
    for reply in sc.SCRIPTS[name]:
        await turn.model_request()
        await turn.model_reply(reply.content, reply.tool_calls)
        if not reply.tool_calls:
            read.append(await turn.finish(reply.content))
            break
        for call in reply.tool_calls:
            fn = sc.lookup_order if call.name == "lookup_order" else sc.refund
            out = await turn.call_tool(call, g.tool_for(call.name, fn))
            if isinstance(out, AskPause):
                assert decide is not None
                await decide(out)
                out = await turn.call_tool(call, g.tool_for(call.name, fn))
            read.append(out)
    return turn, read


async def test_a_steered_scenario_files_the_native_loops_rows(runs_file: Path) -> None:
    """Issue 27 items 5–6: both conversations, steered, hold the native
    loop's rows row for row and its event types in order; the ask is
    approved by another governance on the store; each tool ran once."""
    store = MemoryEventStore()
    g = Governance(sc.build_agent(store, framework_model("test")))

    async def elsewhere(pause: AskPause) -> None:
        other = sc.governance(MemoryEventStore()).on_store(store)
        out = await other.resume(pause.checkpoint, check_in_approved(by=sc.APPROVER))
        assert sc.TOOL_RESULTS["refund"] == out

    _, read = await steer(g, sc.REFUND_800, decide=elsewhere)
    assert [
        sc.TOOL_RESULTS["lookup_order"],
        sc.TOOL_RESULTS["refund"],
        sc.FINAL[sc.REFUND_800],
    ] == [getattr(r, "text", r) for r in read]
    _, refused = await steer(g, sc.REFUND_20000)
    assert isinstance(refused[0], Refused)
    assert sc.REFUSAL == refused[0].text
    assert ["lookup_order", "refund"] == sc.runs(runs_file)
    for name in (sc.REFUND_800, sc.REFUND_20000):
        assert await sc.expected_rows(name) == await sc.session_rows(store, name)
        types = [r.decode().type for r in await store.read(name)]
        assert await sc.expected_types(name) == types


async def test_tool_for_keeps_a_registered_tools_schema_and_gate() -> None:
    """G56: the registered tool's schema, description and check-in hold;
    the framework's call is what runs."""
    gated = Tool(
        "refund",
        "Refund (registered).",
        {"type": "object", "properties": {"amount": {"type": "number"}}},
        lambda amount: "native",
        check_in=True,
        idempotent=True,
    )
    agent = sc.build_agent(provider=framework_model("t"), tools=[gated])
    g = Governance(agent)

    def framework_call(amount: float) -> str:
        return "framework"

    made = g.tool_for("refund", framework_call, description="ignored")
    assert (gated.input_schema, "Refund (registered).", True, True) == (
        made.input_schema,
        made.description,
        made.check_in,
        made.idempotent,
    )
    assert framework_call is made.execute
    assert made is g.tool_for("refund", framework_call)


async def test_tool_for_builds_from_the_frameworks_schema() -> None:
    """Issue 27: a tool the agent does not register is built from the
    framework's description and JSON schema (any object without one)."""
    g = Governance(sc.build_agent(provider=framework_model("t"), tools=[]))
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    made = g.tool_for("search", lambda q: q, description="Search.", input_schema=schema)
    assert ("search", "Search.", schema) == (
        made.name,
        made.description,
        dict(made.input_schema),
    )
    assert {"type": "object"} == dict(g.tool_for("ping", lambda: "").input_schema)


@pytest.mark.parametrize(
    ("name", "execute", "match"),
    [("", lambda: None, "tool's name"), ("t", "not callable", "must be callable")],
)
def test_tool_for_bad_input_is_a_governance_error(
    name: str, execute: Any, match: str
) -> None:
    """Bad input: a typed error naming the problem."""
    g = Governance(sc.build_agent(provider=framework_model("t")))
    with pytest.raises(GovernanceError, match=match) as caught:
        g.tool_for(name, execute)
    assert ("bad-argument", "ERR_GOVERNANCE") == (
        caught.value.reason,
        caught.value.code,
    )


def test_governance_takes_an_agent() -> None:
    """Bad input: ``Governance`` wraps a built helmlog ``Agent``."""
    with pytest.raises(GovernanceError, match="built helmlog Agent"):
        Governance("an agent")  # type: ignore[arg-type]


async def test_on_store_rebuilds_on_the_store_and_keeps_the_rules() -> None:
    """``--agent module:attr`` on a ``Governance``: the same governance on the
    store the command opened (its policy version unchanged, R9)."""
    g = sc.governance(MemoryEventStore())
    other: EventStore = MemoryEventStore()
    moved = g.on_store(other)
    assert other is moved.store
    assert g.agent.policy_version == moved.agent.policy_version
    assert g is g.on_store(g.store)


async def test_resume_without_the_tool_registered_names_it() -> None:
    """Issue 27: the approver runs the real tool; a governance that lacks it
    says which, before anything is appended."""
    store = MemoryEventStore()
    g = Governance(sc.build_agent(store, framework_model("t")))
    paused: list[AskPause] = []

    async def keep(pause: AskPause) -> None:
        paused.append(pause)
        raise _Stop

    with pytest.raises(_Stop):
        await steer(g, sc.REFUND_800, decide=keep)
    lacking = Governance(sc.build_agent(store, framework_model("t"), tools=[]))
    length = len(await store.read(sc.REFUND_800))
    with pytest.raises(GovernanceError, match="'refund'") as caught:
        await lacking.resume(paused[0].checkpoint, check_in_approved(by="dana@ops"))
    assert "no-tool" == caught.value.reason
    assert length == len(await store.read(sc.REFUND_800))


class _Stop(Exception):
    pass


def test_serve_recognises_a_governance_by_its_shape() -> None:
    """``helmlog serve --agent module:governance`` decides its asks
    (``ServedRunner``), by the ``DecidesAsks`` shape, not by importing the
    integrations layer; an ``Agent`` runs its own sessions."""
    g = sc.governance(MemoryEventStore())
    assert isinstance(g, DecidesAsks)
    assert not isinstance(g.agent, DecidesAsks)


async def test_a_second_decision_reads_the_recorded_outcome_back() -> None:
    """R9 + re-entrancy: the framework resumes the pause a person already
    decided elsewhere: the recorded outcome, nothing appended."""
    store = MemoryEventStore()
    g = Governance(sc.build_agent(store, framework_model("test")))
    decided: list[Any] = []

    async def both(pause: AskPause) -> None:
        other = sc.governance(store)
        decided.append(await other.resume(pause.checkpoint, check_in_approved(by="a")))
        length = len(await store.read(sc.REFUND_800))
        again = await g.steering.resume_tool(
            pause.checkpoint, check_in_approved(by="b")
        )
        assert isinstance(again, Ran)
        decided.append(again.text)
        assert length == len(await store.read(sc.REFUND_800))

    await steer(g, sc.REFUND_800, decide=both)
    assert [sc.TOOL_RESULTS["refund"]] * 2 == decided
