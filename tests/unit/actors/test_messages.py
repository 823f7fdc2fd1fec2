"""The typed messages of policy and executor calls round-trip (R12, G6, G7).

No Ray here: these are the encoded Structs that cross the actor boundary in
place of pickled helmlog objects; each must decode to what was encoded, and
contexts and outcomes must come back as the objects the walker would see.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import Deny, allow, ask, deny
from helmlog.actors._messages import (
    AllowOut,
    AskedHuman,
    AskOut,
    ChainInfo,
    DenyOut,
    ExecuteIn,
    LinkInfo,
    MessageIn,
    NotAnOutcome,
    Raised,
    RemoteRaised,
    Returned,
    ToolCallIn,
    ToolResultIn,
    call_in,
    context_of,
    decode_call,
    decode_chain,
    decode_execute,
    decode_execute_reply,
    decode_hook_reply,
    encode,
    encode_reply,
    outcome_of,
    raised_text,
    reply_of,
)
from helmlog.events import Message, shape
from helmlog.runtime import MessageContext, ToolCallContext, ToolResultContext
from helmlog.runtime._chain import judged

HISTORY = (
    Message(role="user", content="refund order 7"),
    Message(role="assistant", content="on it"),
)


def _decoder_for(message: msgspec.Struct) -> Any:
    if isinstance(message, ChainInfo):
        return decode_chain
    if isinstance(message, ToolCallIn | ToolResultIn | MessageIn):
        return decode_call
    if isinstance(message, ExecuteIn):
        return decode_execute
    if isinstance(message, Returned | AskedHuman):
        return decode_execute_reply
    return decode_hook_reply


EVERY_MESSAGE: list[msgspec.Struct] = [
    ChainInfo(
        links=(
            LinkInfo(name="quota", on_tool_call=True),
            LinkInfo(name="receipt", on_tool_result=True, on_message=True),
        )
    ),
    ToolCallIn(
        link=0,
        tool_name="refund",
        tool_source="desk",
        tool_call_id="c1",
        iteration=2,
        args={"order": 7, "amount": 12.5, "tags": ["a", "b"], "note": None},
        history=HISTORY,
        identity={"user": "ana", "roles": ["support"]},
    ),
    ToolResultIn(
        link=1,
        tool_name="refund",
        tool_call_id="c1",
        iteration=2,
        args={"order": 7},
        history=HISTORY,
        result={"ok": True, "id": "r-1"},
        error=True,
    ),
    MessageIn(link=0, phase="output", content="Done.", history=HISTORY),
    AllowOut(),
    AllowOut(value={"order": 8}, why="rewrote the order"),
    AllowOut(value={"order": 8}, why="rewrote the order", from_={"order": "person"}),
    DenyOut(reason="the budget is spent"),
    AskOut(question="Refund $800?", detail={"amount": 800}, component_id="form-1"),
    NotAnOutcome(type_name="str"),
    NotAnOutcome(),
    Raised(text="the rate service is down"),
    ExecuteIn(tool_name="refund", args={"order": 7, "token": "s3cr3t"}),
    ExecuteIn(tool_name="refund", args={}, tool_call_id="c1"),
    Returned(value=["refunded", 7]),
    Returned(),
    AskedHuman(question="Which card?", detail={"order": 7}),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_r12_every_message_type_round_trips_through_its_encoding(
    message: msgspec.Struct,
) -> None:
    """R12: each message decodes to exactly what was encoded."""
    data = encode(message)
    assert isinstance(data, bytes)
    assert message == _decoder_for(message)(data)


def test_r12_the_message_list_covers_every_message_type() -> None:
    """R12: no message type of the module is left out of the round trip."""
    covered = {type(m) for m in EVERY_MESSAGE}
    expected = {
        ChainInfo,
        ToolCallIn,
        ToolResultIn,
        MessageIn,
        AllowOut,
        DenyOut,
        AskOut,
        NotAnOutcome,
        Raised,
        ExecuteIn,
        Returned,
        AskedHuman,
    }
    assert expected == covered


def _fields(ctx: Any) -> dict[str, Any]:
    return {name: getattr(ctx, name) for name in ctx.__slots__}


@pytest.mark.parametrize(
    "ctx",
    [
        ToolCallContext(
            tool_name="refund",
            tool_source=None,
            tool_call_id="c1",
            iteration=1,
            args={"order": 7, "lines": [{"sku": "x", "qty": 2}]},
            history=HISTORY,
            identity={"user": "ana"},
        ),
        ToolResultContext(
            tool_name="refund",
            tool_source="mcp:desk",
            tool_call_id="c1",
            iteration=1,
            args={"order": 7},
            history=(),
            identity=None,
            result="refunded order 7",
            error=False,
        ),
        MessageContext(phase="input", content="hi", history=HISTORY, identity=None),
    ],
    ids=lambda c: type(c).__name__,
)
def test_r12_a_context_arrives_as_the_context_the_hook_would_see_inline(
    ctx: Any,
) -> None:
    """R12: context → message → bytes → message → an equal context."""
    arrived = context_of(decode_call(encode(call_in(3, ctx))))
    assert type(ctx) is type(arrived)
    assert _fields(ctx) == _fields(arrived)
    assert 3 == decode_call(encode(call_in(3, ctx))).link


@pytest.mark.parametrize(
    "outcome",
    [
        allow(),
        allow(None, "checked the order"),
        allow({"order": 8}, "rewrote the order"),
        allow({"order": 8}, "the customer typed it", from_={"order": "person"}),
        deny("the budget is spent"),
        ask("Refund $800?", {"amount": 800}),
        ask("Which form?", None, "form-1"),
    ],
    ids=repr,
)
def test_r12_an_outcome_comes_back_equal_to_the_one_the_hook_returned(
    outcome: Any,
) -> None:
    """R12: outcome → message → bytes → message → an equal outcome."""
    assert outcome == outcome_of(decode_hook_reply(encode_reply(reply_of(outcome))))


class Verdict:
    """Not an outcome: what a careless rule might return."""


@pytest.mark.parametrize("returned", ["yes", 1, None, {"ok": True}, Verdict()])
def test_g6_a_non_outcome_comes_back_with_the_shape_the_walker_names(
    returned: Any,
) -> None:
    """G6: the walker's refusal names the same shape as it would inline."""
    back = outcome_of(decode_hook_reply(encode_reply(reply_of(returned))))
    assert shape(returned) == shape(back)


def test_g94_a_hosted_rewrite_without_a_why_crosses_for_the_walker_to_judge() -> None:
    """G94: a hosted hook's why-less rewrite is not rebuilt into a valid allow;
    it reaches the caller's walker as it was, and the walker refuses it."""
    back = outcome_of(AllowOut(value={"order": 8}))
    judged_out = judged("forger", back)
    assert isinstance(judged_out, Deny)
    assert "breaks its verb" in judged_out.reason


def test_g7_a_raise_comes_back_as_a_raise_with_the_remote_text() -> None:
    """G7: ``str()`` of the rebuilt raise is ``str(exc) or type(exc).__name__``."""
    texts = []
    for exc in (RuntimeError("the rate service is down"), KeyError(), TimeoutError()):
        reply = decode_hook_reply(encode_reply(Raised(text=raised_text(exc))))
        with pytest.raises(RemoteRaised) as caught:
            outcome_of(reply)
        texts.append(str(caught.value))
    assert ["the rate service is down", "KeyError", "TimeoutError"] == texts


def test_r12_an_answer_that_cannot_be_encoded_fails_closed_as_a_raise() -> None:
    """R12: a value msgspec cannot encode comes back as ``Raised``, never pickled."""
    reply = decode_execute_reply(encode_reply(Returned(value=Verdict())))
    assert isinstance(reply, Raised)
    assert reply.text.startswith("its answer cannot cross the actor boundary: ")


# -- the actors' own answers, called directly (no Ray) ------------------------


class _Budget:
    name = "budget"

    def __init__(self) -> None:
        self.left = 1

    def on_tool_call(self, call: Any) -> Any:
        if self.left == 0:
            return deny("spent")
        self.left -= 1
        return allow(None, f"{self.left} left")


class _Stamp:
    name = "stamp"

    async def on_tool_result(self, result: Any) -> Any:
        return allow(f"{result.result}!", "stamped")


def _chain() -> list[Any]:
    return [_Budget(), _Stamp()]


def _call_ctx() -> ToolCallContext:
    return ToolCallContext(
        tool_name="refund",
        tool_source=None,
        tool_call_id="c1",
        iteration=1,
        args={"order": 7},
        history=(),
        identity=None,
    )


async def test_r17_a_policy_actor_hosts_the_links_in_order_sharing_state() -> None:
    """R17: one actor, links in declaration order, each hook's state kept."""
    from helmlog.actors import PolicyActor

    actor = PolicyActor(_chain)
    info = decode_chain(await actor.describe())
    assert [("budget", True, False, False), ("stamp", False, True, False)] == [
        (i.name, i.on_tool_call, i.on_tool_result, i.on_message) for i in info.links
    ]
    answers = [
        outcome_of(decode_hook_reply(await actor.call(encode(call_in(0, _call_ctx())))))
        for _ in range(2)
    ]
    assert [allow(None, "0 left"), deny("spent")] == answers
    result_ctx = ToolResultContext(
        tool_name="refund",
        tool_source=None,
        tool_call_id="c1",
        iteration=1,
        args={"order": 7},
        history=(),
        identity=None,
        result="refunded",
        error=False,
    )
    stamped = await actor.call(encode(call_in(1, result_ctx)))
    assert allow("refunded!", "stamped") == outcome_of(decode_hook_reply(stamped))


async def test_g7_a_policy_actor_answers_a_raise_with_its_text() -> None:
    """G7: the actor never lets a hook's raise escape; it answers ``Raised``."""
    from helmlog import ToolMiddleware
    from helmlog.actors import PolicyActor

    def boom(call: Any) -> Any:
        raise LookupError("no such order")

    actor = PolicyActor(lambda: ToolMiddleware(name="lookup", on_tool_call=boom))
    reply = decode_hook_reply(await actor.call(encode(call_in(0, _call_ctx()))))
    assert Raised(text="no such order") == reply


@pytest.mark.parametrize(
    ("built", "problem"),
    [
        ([], "a policy factory must build at least one link"),
        ([object()], "a policy factory's links need a non-empty name"),
        ([type("Named", (), {"name": "x"})()], "policy link 'x' has no hook"),
    ],
)
def test_g9_a_policy_factory_must_build_named_links_with_hooks(
    built: list[Any], problem: str
) -> None:
    """G9: what the actor hosts is checked as a link, with the builder's words."""
    from helmlog.actors import PolicyActor

    with pytest.raises(ValueError, match=problem):
        PolicyActor(lambda: built)


async def test_g69_a_tool_executor_answers_returned_raised_or_asked_human() -> None:
    """G18/G69: a result, a raise's text, or ``ask_human``'s question come back."""
    from helmlog import ask_human, tool
    from helmlog.actors import ToolExecutor

    @tool
    def lookup(order: int) -> dict[str, int]:
        """Look an order up."""
        return {"order": order}

    @tool
    def broken(order: int) -> str:
        """Fail."""
        raise ConnectionError(f"backend refused {order}")

    @tool
    def pick(order: int) -> str:
        """Ask a person."""
        ask_human("Which card?", {"order": order})

    executor = ToolExecutor([lookup, broken, pick])
    replies = [
        decode_execute_reply(
            await executor.execute(encode(ExecuteIn(tool_name=name, args={"order": 7})))
        )
        for name in ("lookup", "broken", "pick")
    ]
    assert [
        Returned(value={"order": 7}),
        Raised(text="backend refused 7"),
        AskedHuman(question="Which card?", detail={"order": 7}),
    ] == replies


async def test_g28_a_policy_actor_hosts_a_message_link_too() -> None:
    """G28: a hosted ``on_message`` hook sees the message context and rewrites."""
    from helmlog import MessageMiddleware
    from helmlog.actors import PolicyActor

    def shout(msg: Any) -> Any:
        return allow(msg.content.upper(), f"shouted at {msg.phase}")

    actor = PolicyActor(lambda: MessageMiddleware(name="shout", on_message=shout))
    info = decode_chain(await actor.describe())
    assert [("shout", False, False, True)] == [
        (i.name, i.on_tool_call, i.on_tool_result, i.on_message) for i in info.links
    ]
    ctx = MessageContext(
        phase="output", content="done.", history=HISTORY, identity=None
    )
    reply = decode_hook_reply(await actor.call(encode(call_in(0, ctx))))
    assert allow("DONE.", "shouted at output") == outcome_of(reply)


async def test_r17_a_tool_executor_runs_the_call_under_its_call_id() -> None:
    """R17: the executor's tool runs as its call (``tool_call_id``), as inline,
    never as its tool name (issue 9); a client that predates the id sends
    none, and the name stands in."""
    from helmlog import tool
    from helmlog.actors import ToolExecutor
    from helmlog.runtime.lowlevel import running_tool

    @tool
    def whose_call() -> str:
        """Say which call runs."""
        return f"call {running_tool().get()}"

    executor = ToolExecutor([whose_call])
    sent = ExecuteIn(tool_name="whose_call", args={}, tool_call_id="c-42")
    older = msgspec.msgpack.encode({"tool_name": "whose_call", "args": {}})
    replies = [
        decode_execute_reply(await executor.execute(data))
        for data in (encode(sent), older)
    ]
    assert [Returned(value="call c-42"), Returned(value="call whose_call")] == replies
