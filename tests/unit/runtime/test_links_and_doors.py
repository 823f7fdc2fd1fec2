"""G.2 — what a link is, the two doors that attach links, and the two chains.

Pattern: law-named unit tests over the link constructors, the builder's doors
         and whole runs with the scripted provider.
Role:    unit tests for ``runtime/_links.py`` and ``AgentBuilder``'s doors.
Emits:   nothing.

Laws: G9 (what a link is; constructors and structural ``isinstance``), G10
(the doors check every link before attaching any, append in order, return the
builder), G11 (two chains; no links means no walk, no row, no fact, and equal
provider requests; pass-through links also send equal requests).

Why governed and ungoverned agents are run side by side: G11 is a statement
about equality with an agent that has no governance, so the test builds that
agent and compares what both models were sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import (
    Agent,
    AgentBuilder,
    AgentBuildError,
    Allow,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    tool,
)
from helmlog.events import HelmlogError
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from .helpers import Recorder, stored_types


def noop(ctx: Any) -> Allow:
    return allow()


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order}"


@tool
def lookup(order: int) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "status": "shipped"}


def two_round_script() -> ScriptedProvider:
    """A batch of two calls, a second round of one call, then an answer."""
    return scripted(
        [
            Reply(
                content="Let me check.",
                tool_calls=[
                    ToolCallRequest(id="c1", name="lookup", args={"order": 7}),
                    ToolCallRequest(
                        id="c2", name="refund", args={"order": 7, "amount": 5}
                    ),
                ],
            ),
            Reply(
                tool_calls=[ToolCallRequest(id="c3", name="lookup", args={"order": 8})]
            ),
            "Refunded order 7.",
        ]
    )


def builder(model: ScriptedProvider) -> AgentBuilder:
    return (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .system("sys")
        .tool(lookup, refund)
    )


def tool_rows(agent: Agent) -> list[tuple[str, str, str | None]]:
    return [
        (r.middleware, r.moment, r.tool_call_id)
        for r in agent.last_snapshot().middleware_decisions
    ]


# -- G9 ---------------------------------------------------------------------


def test_g09_tool_middleware_builds_a_link() -> None:
    """G9: ToolMiddleware(name, on_tool_call, on_tool_result) is a tool link."""

    def result_hook(res: Any) -> Allow:
        return allow()

    link = ToolMiddleware(name="ceiling", on_tool_call=noop, on_tool_result=result_hook)
    assert ("ceiling", noop, result_hook) == (
        link.name,
        link.on_tool_call,
        link.on_tool_result,
    )
    only_result = ToolMiddleware(name="scrub", on_tool_result=result_hook)
    assert (None, True) == (
        only_result.on_tool_call,
        isinstance(only_result, ToolMiddleware),
    )


def test_g09_message_middleware_builds_a_link() -> None:
    """G9: MessageMiddleware(name, on_message) is a message link."""
    link = MessageMiddleware(name="scrub", on_message=noop)
    assert ("scrub", noop, True) == (
        link.name,
        link.on_message,
        isinstance(link, MessageMiddleware),
    )


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_g09_tool_middleware_refuses_a_blank_name(name: Any) -> None:
    """G9: ToolMiddleware raises ValueError for a blank or non-str name."""
    with pytest.raises(ValueError):
        ToolMiddleware(name=name, on_tool_call=noop)


def test_g09_tool_middleware_refuses_no_hook() -> None:
    """G9: ToolMiddleware raises ValueError without any hook."""
    with pytest.raises(ValueError):
        ToolMiddleware(name="empty")


@pytest.mark.parametrize("name", ["", "  ", None])
def test_g09_message_middleware_refuses_a_blank_name(name: Any) -> None:
    """G9: MessageMiddleware raises ValueError for a blank name."""
    with pytest.raises(ValueError):
        MessageMiddleware(name=name, on_message=noop)


def test_g09_message_middleware_refuses_no_hook() -> None:
    """G9: MessageMiddleware raises ValueError without on_message."""
    with pytest.raises(ValueError):
        MessageMiddleware(name="empty", on_message=None)  # type: ignore[arg-type]


class CallRule:
    name = "class-ceiling"

    def on_tool_call(self, call: Any) -> Allow:
        return allow()


class ResultRule:
    name = "class-scrub"

    def on_tool_result(self, res: Any) -> Allow:
        return allow()


class MessageRule:
    name = "class-voice"

    def on_message(self, msg: Any) -> Allow:
        return allow()


class Nameless:
    name = ""

    def on_tool_call(self, call: Any) -> Allow:
        return allow()


class Hookless:
    name = "nothing-here"
    on_tool_call = None


@pytest.mark.parametrize(
    ("obj", "is_tool", "is_message"),
    [
        (CallRule(), True, False),
        (ResultRule(), True, False),
        (MessageRule(), False, True),
        (Nameless(), False, False),
        (Hookless(), False, False),
        (object(), False, False),
        (ToolMiddleware(name="t", on_tool_call=noop), True, False),
        (MessageMiddleware(name="m", on_message=noop), False, True),
    ],
)
def test_g09_isinstance_recognizes_links_structurally(
    obj: Any, is_tool: bool, is_message: bool
) -> None:
    """G9: any object with a non-empty name and the hooks is a link."""
    assert (is_tool, is_message) == (
        isinstance(obj, ToolMiddleware),
        isinstance(obj, MessageMiddleware),
    )


async def test_g09_a_class_with_the_attributes_is_a_link() -> None:
    """G9: a plain class with name and hooks attaches and files rows by its name."""
    model = two_round_script()
    agent = (
        builder(model)
        .tool_middleware(CallRule(), ResultRule())
        .message_middleware(MessageRule())
        .build()
    )
    assert "Refunded order 7." == await agent.run("refund order 7")
    assert [
        ("class-voice", "input", None),
        ("class-ceiling", "before-tool", "c1"),
        ("class-scrub", "after-tool", "c1"),
        ("class-ceiling", "before-tool", "c2"),
        ("class-scrub", "after-tool", "c2"),
        ("class-ceiling", "before-tool", "c3"),
        ("class-scrub", "after-tool", "c3"),
        ("class-voice", "output", None),
    ] == tool_rows(agent)


# -- G10 --------------------------------------------------------------------


def test_g10_agent_build_error_is_a_value_error() -> None:
    """G10: AgentBuildError is a ValueError (and a helmlog error with a code)."""
    assert (True, True, "ERR_AGENT_BUILD") == (
        issubclass(AgentBuildError, ValueError),
        issubclass(AgentBuildError, HelmlogError),
        AgentBuildError.code,
    )


def test_g10_doors_return_the_same_builder() -> None:
    """G10: each door returns the builder it was called on."""
    b = builder(scripted(reply="hi"))
    assert b is b.tool_middleware(CallRule())
    assert b is b.message_middleware(MessageRule())
    assert b is b.tool_middleware()


async def test_g10_repeated_door_calls_append_in_order() -> None:
    """G10: repeated calls append links in the order given."""
    names = ["a", "b", "c", "d"]
    links = [ToolMiddleware(name=n, on_tool_call=noop) for n in names]
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="lookup", args={"order": 1})]
            ),
            "ok",
        ]
    )
    agent = (
        builder(model)
        .tool_middleware(links[0])
        .tool_middleware(links[1], links[2])
        .tool_middleware(links[3])
        .build()
    )
    await agent.run("look")
    assert [(n, "before-tool", "c1") for n in names] == tool_rows(agent)


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (Nameless(), "non-empty name"),
        (Hookless(), "'nothing-here' has neither on_tool_call nor on_tool_result"),
        (MessageRule(), "'class-voice' has neither on_tool_call nor on_tool_result"),
        (object(), "non-empty name"),
    ],
)
def test_g10_tool_door_names_the_problem(bad: Any, text: str) -> None:
    """G10: .tool_middleware() refuses a bad link with AgentBuildError naming it."""
    with pytest.raises(AgentBuildError) as caught:
        builder(scripted(reply="hi")).tool_middleware(bad)
    assert text in str(caught.value)


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (Nameless(), "non-empty name"),
        (CallRule(), "'class-ceiling' has no on_message hook"),
        (object(), "non-empty name"),
    ],
)
def test_g10_message_door_names_the_problem(bad: Any, text: str) -> None:
    """G10: .message_middleware() refuses a bad link naming the problem."""
    with pytest.raises(AgentBuildError) as caught:
        builder(scripted(reply="hi")).message_middleware(bad)
    assert text in str(caught.value)


async def test_g10_a_refused_door_call_attaches_nothing() -> None:
    """G10: when one link is bad, none of the links in that call attach."""
    called: list[str] = []

    def good_hook(ctx: Any) -> Allow:
        called.append(getattr(ctx, "phase", "tool"))
        return allow()

    good_tool = ToolMiddleware(name="good", on_tool_call=good_hook)
    good_msg = MessageMiddleware(name="good-msg", on_message=good_hook)
    model = two_round_script()
    b = builder(model)
    with pytest.raises(AgentBuildError):
        b.tool_middleware(good_tool, Hookless())
    with pytest.raises(AgentBuildError):
        b.message_middleware(good_msg, CallRule())
    agent = b.build()
    recorder = Recorder()
    agent.attach(recorder)
    assert "Refunded order 7." == await agent.run("refund order 7")
    assert ([], (), []) == (
        called,
        agent.last_snapshot().middleware_decisions,
        recorder.of("middleware.decision"),
    )


# -- G11 --------------------------------------------------------------------


async def test_g11_no_links_no_walk_no_row_no_fact() -> None:
    """G11: with no links nothing is walked, filed or announced."""
    agent = builder(two_round_script()).tool_middleware().message_middleware().build()
    recorder = Recorder()
    agent.attach(recorder)
    assert "Refunded order 7." == await agent.run("refund order 7")
    types = await stored_types(agent)
    assert ((), [], False, False) == (
        agent.last_snapshot().middleware_decisions,
        recorder.of("middleware.decision"),
        "decision.filed" in types,
        "middleware.decision" in types,
    )


async def test_g11_empty_doors_send_the_requests_of_no_governance() -> None:
    """G11: an agent whose doors were called empty sends equal requests."""
    plain_model, empty_model = two_round_script(), two_round_script()
    plain = builder(plain_model).build()
    empty = builder(empty_model).tool_middleware().message_middleware().build()
    assert await plain.run("refund order 7") == await empty.run("refund order 7")
    assert 3 == len(plain_model.requests)
    assert plain_model.requests == empty_model.requests
    assert await stored_types(plain) == await stored_types(empty)


async def test_g11_pass_through_chains_send_equal_requests() -> None:
    """G11: pass-through links send the same requests; only the ledger differs."""

    def why_not(ctx: Any) -> Allow:
        return allow(None, "looked, fine")

    plain_model, governed_model = two_round_script(), two_round_script()
    plain = builder(plain_model).build()
    governed = (
        builder(governed_model)
        .tool_middleware(
            ToolMiddleware(name="both", on_tool_call=noop, on_tool_result=why_not),
            ToolMiddleware(name="call", on_tool_call=why_not),
            ToolMiddleware(name="result", on_tool_result=noop),
        )
        .message_middleware(MessageMiddleware(name="voice", on_message=why_not))
        .build()
    )
    plain_answer = await plain.run("refund order 7")
    governed_answer = await governed.run("refund order 7")
    assert (plain_answer, plain_model.requests) == (
        governed_answer,
        governed_model.requests,
    )
    assert plain.last_snapshot().history == governed.last_snapshot().history
    assert () == plain.last_snapshot().middleware_decisions
    assert 2 + 3 * 4 == len(governed.last_snapshot().middleware_decisions)


async def test_g11_pass_through_tool_chain_adds_only_ledger_events() -> None:
    """G11: a pass-through tool chain's stream differs only by the ledger."""
    plain = builder(two_round_script()).build()
    governed = (
        builder(two_round_script())
        .tool_middleware(
            ToolMiddleware(name="both", on_tool_call=noop, on_tool_result=noop)
        )
        .build()
    )
    await plain.run("refund order 7")
    await governed.run("refund order 7")
    ledger = {"decision.filed", "middleware.decision"}
    governed_types = [t for t in await stored_types(governed) if t not in ledger]
    assert await stored_types(plain) == governed_types


async def test_g11_one_tool_chain_answers_at_both_tool_moments() -> None:
    """G11: links from separate door calls form one tool chain (one onion)."""
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="lookup", args={"order": 1})]
            ),
            "ok",
        ]
    )
    agent = (
        builder(model)
        .tool_middleware(
            ToolMiddleware(name="outer", on_tool_call=noop, on_tool_result=noop)
        )
        .tool_middleware(
            ToolMiddleware(name="inner", on_tool_call=noop, on_tool_result=noop)
        )
        .build()
    )
    await agent.run("look")
    assert [
        ("outer", "before-tool", "c1"),
        ("inner", "before-tool", "c1"),
        ("inner", "after-tool", "c1"),
        ("outer", "after-tool", "c1"),
    ] == tool_rows(agent)


@pytest.mark.parametrize(
    "hooks",
    [
        {"on_tool_call": 5},
        {"on_tool_result": "scrub"},
        {"on_tool_call": noop, "on_tool_result": "scrub"},
        {"on_tool_call": ["not", "callable"], "on_tool_result": noop},
    ],
)
def test_g09_tool_middleware_refuses_a_hook_that_is_not_callable(
    hooks: dict[str, Any],
) -> None:
    """G9: a hook that cannot be called is no hook: ValueError, not a dead link."""
    with pytest.raises(ValueError):
        ToolMiddleware(name="broken", **hooks)
