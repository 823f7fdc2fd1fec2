"""G.1 — the three verbs, their outcome types, and how a walker treats a return.

Pattern: law-named unit tests; the verbs are checked directly, the runtime
         laws (G5–G8) on real agent runs with the scripted provider.
Role:    unit tests for ``runtime/_verbs.py`` and the hook invocation in
         ``runtime/_chain.py``.
Emits:   nothing.

Laws: G1 (``allow()`` passes; ``allow(None, why)``), G2 (a transform must say
why), G3 (a refusal carries a reason), G4 (an ask carries a question), G5 (no
result arm; frozen, by value, checked when constructed directly), G6 (the
union is enforced at runtime), G7 (a throw is a denial), G8 (links cannot
change what flows on by mutation).

Why every runtime test reads ``model.requests``: "the model reads X" is the
law's own definition of what a verdict did, so the tests look exactly there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from helmlog import (
    Agent,
    Allow,
    Ask,
    Deny,
    MessageDeniedError,
    MessageMiddleware,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from .helpers import assert_fold_matches

ARGS = {"order": 7, "amount": 250.0}


def refund_model(
    args: dict[str, Any] | None = None, answer: str = "Done."
) -> ScriptedProvider:
    """One tool round proposing ``refund(args)``, then a final answer."""
    call = ToolCallRequest(id="c1", name="refund", args=dict(args or ARGS))
    return scripted([Reply(tool_calls=[call]), answer])


def build(
    model: ScriptedProvider,
    ran: list[dict[str, Any]],
    *,
    tool_links: tuple[Any, ...] = (),
    message_links: tuple[Any, ...] = (),
    result: Any = None,
) -> Agent:
    """An agent with one recording ``refund`` tool and the given chains."""

    @tool
    def refund(order: int, amount: float) -> Any:
        """Refund an order."""
        ran.append({"order": order, "amount": amount})
        return result if result is not None else f"refunded {amount} on {order}"

    builder = Agent.create(provider=model, model="m", ids=counter_ids()).tool(refund)
    if tool_links:
        builder.tool_middleware(*tool_links)
    if message_links:
        builder.message_middleware(*message_links)
    return builder.build()


def read(model: ScriptedProvider, call_id: str = "c1", request: int = 1) -> str:
    """What the model read for ``call_id`` in request ``request`` (0-based)."""
    for msg in model.requests[request].messages:
        if msg.role == "tool" and msg.tool_call_id == call_id:
            return msg.content
    raise AssertionError(f"no tool message for {call_id} in request {request}")


def rows(agent: Agent) -> list[tuple[Any, ...]]:
    """The ledger as (middleware, moment, outcome, changed, why, before, after)."""
    return [
        (r.middleware, r.moment, r.outcome, r.changed, r.why, r.before, r.after)
        for r in agent.last_snapshot().middleware_decisions
    ]


# -- G1 ---------------------------------------------------------------------


def test_g01_allow_returns_plain_allow() -> None:
    """G1: allow() returns Allow(value=None, why=None)."""
    out = allow()
    assert (Allow, None, None) == (type(out), out.value, out.why)
    assert Allow(value=None, why=None) == out


def test_g01_allow_none_with_why_passes_with_reason() -> None:
    """G1: allow(None, why) is a pass-through carrying a non-empty why."""
    out = allow(None, "looked, fine")
    assert (None, "looked, fine") == (out.value, out.why)


@pytest.mark.parametrize("why", [None, ""])
def test_g01_allow_none_with_no_why_is_plain_allow(why: str | None) -> None:
    """G1: allow(None, None) and allow(None, "") are a plain Allow()."""
    assert (Allow(), None, None) == (
        allow(None, why),
        allow(None, why).value,
        allow(None, why).why,
    )


@pytest.mark.parametrize("why", [0, 1, False, True, [], {}, b"why", 1.5])
def test_g01_allow_none_with_non_str_why_raises(why: Any) -> None:
    """G1: allow(None, why) with a why that is not a str raises ValueError."""
    with pytest.raises(ValueError):
        allow(None, why)


# -- G2 ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", 0, False, {}, [], "x", 1.5, {"a": 1}])
@pytest.mark.parametrize("why", [None, ""])
def test_g02_transform_without_why_raises(value: Any, why: str | None) -> None:
    """G2: allow(value, why) with no non-empty why raises 'must say why'."""
    with pytest.raises(ValueError, match="must say why"):
        allow(value, why)


@pytest.mark.parametrize("why", [1, True, ["why"], b"why"])
def test_g02_transform_with_non_str_why_raises(why: Any) -> None:
    """G2: a transform whose why is not a str raises 'must say why'."""
    with pytest.raises(ValueError, match="must say why"):
        allow({"a": 1}, why)


@pytest.mark.parametrize("value", ["", 0, False, {}, []])
def test_g02_falsy_values_are_transforms(value: Any) -> None:
    """G2: "", 0, False, {} and [] are transform values, kept exactly."""
    out = allow(value, "because")
    assert (value, type(value), "because") == (out.value, type(out.value), out.why)


async def test_g02_none_is_never_a_transform_value() -> None:
    """G2: allow(None, why) at every moment leaves the value as it was."""
    passer = ToolMiddleware(
        name="passer",
        on_tool_call=lambda c: allow(None, "args look fine"),
        on_tool_result=lambda r: Allow(None, "result looks fine"),
    )
    voice = MessageMiddleware(name="voice", on_message=lambda m: allow(None, "ok"))
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(passer,), message_links=(voice,))
    assert "Done." == await agent.run("refund order 7")
    assert [ARGS] == ran
    assert "refunded 250.0 on 7" == read(model)
    assert [False, False, False, False] == [
        r.changed for r in agent.last_snapshot().middleware_decisions
    ]


# -- G3 ---------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", None, 5, ["no"]])
def test_g03_deny_without_reason_raises(reason: Any) -> None:
    """G3: deny(reason) needs a non-empty str, else 'must carry a reason'."""
    with pytest.raises(ValueError, match="must carry a reason"):
        deny(reason)


def test_g03_deny_returns_deny_with_reason() -> None:
    """G3: deny(reason) returns Deny(reason=reason)."""
    assert (Deny(reason="over the limit"), "over the limit") == (
        deny("over the limit"),
        deny("over the limit").reason,
    )


# -- G4 ---------------------------------------------------------------------


@pytest.mark.parametrize("question", ["", None, 3])
def test_g04_ask_without_question_raises(question: Any) -> None:
    """G4: ask(question) needs a non-empty str question."""
    with pytest.raises(ValueError, match="non-empty question"):
        ask(question)


@pytest.mark.parametrize("component_id", ["", 7, ["c"]])
def test_g04_ask_with_bad_component_id_raises(component_id: Any) -> None:
    """G4: a given component_id must be a non-empty str."""
    with pytest.raises(ValueError):
        ask("approve?", None, component_id)


def test_g04_ask_carries_all_three_verbatim() -> None:
    """G4: ask(question, detail, component_id) carries all three verbatim."""
    detail = {"amount": 250, "lines": [1, 2]}
    out = ask("approve?", detail, "refund-card")
    assert (Ask, "approve?", {"amount": 250, "lines": [1, 2]}, "refund-card") == (
        type(out),
        out.question,
        out.detail,
        out.component_id,
    )
    assert (None, None) == (ask("q").detail, ask("q").component_id)


# -- G5 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "field"),
    [(Allow({"a": 1}, "w"), "value"), (Deny("r"), "reason"), (Ask("q"), "question")],
)
def test_g05_outcomes_are_frozen(outcome: Any, field: str) -> None:
    """G5: Allow, Deny and Ask are frozen."""
    with pytest.raises(AttributeError):
        setattr(outcome, field, "changed")
    with pytest.raises(AttributeError):
        outcome.extra = 1


def test_g05_outcomes_compare_by_value() -> None:
    """G5: outcomes compare by value, not identity."""
    assert Allow({"a": [1]}, "w") == Allow({"a": [1]}, "w")
    assert Allow({"a": [1]}, "w") != Allow({"a": [2]}, "w")
    assert Deny("r") == Deny("r")
    assert Deny("r") != Deny("s")
    assert Ask("q", {"d": 1}, "c") == Ask("q", {"d": 1}, "c")
    assert Ask("q", {"d": 1}, "c") != Ask("q", {"d": 1}, None)
    assert Allow() != Deny("r")


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda: Allow({"a": 1}), "must say why"),
        (lambda: Allow("", ""), "must say why"),
        (lambda: Deny(""), "must carry a reason"),
        (lambda: Ask(""), "non-empty question"),
        (lambda: Ask("q", None, ""), "component_id"),
    ],
)
def test_g05_direct_construction_is_checked(make: Any, text: str) -> None:
    """G5: constructing an outcome directly applies G1–G4's checks."""
    with pytest.raises(ValueError, match=text):
        make()


async def test_g05_no_verb_answers_for_a_tool_that_did_not_run() -> None:
    """G5: a link 'answering' with allow(value) only rewrites arguments."""
    forger = ToolMiddleware(
        name="forger", on_tool_call=lambda c: allow("refunded 1000000 on 7", "forged")
    )
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(forger,))
    await agent.run("refund order 7")
    assert [] == ran
    assert (
        "Invalid arguments for tool 'refund' — the call was not executed.\n"
        "- arguments: expected an object, got a str\n"
        "Fix the arguments to match the tool's input schema and call it again."
    ) == read(model)


# -- G6 ---------------------------------------------------------------------


class Allow_:
    """Looks like an Allow, is not one."""

    def __init__(self) -> None:
        self.value = None
        self.why = None


Allow_.__name__ = "Allow"

LOOKALIKES = [
    (None, "None"),
    ({"value": None, "why": None}, "a dict"),
    ("allow", "a str"),
    (Allow_(), "an Allow"),
    (True, "a bool"),
]


def not_a_verdict(name: str, shaped: str) -> str:
    return (
        f"middleware '{name}' returned {shaped}, which is not allow(), deny() or ask()"
    )


@pytest.mark.parametrize(("returned", "shaped"), LOOKALIKES)
async def test_g06_before_tool_lookalike_is_a_denial(
    returned: Any, shaped: str
) -> None:
    """G6: a before-tool return that is not an outcome is a denial naming it."""
    odd = ToolMiddleware(name="odd", on_tool_call=lambda c: returned)
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(odd,))
    assert "Done." == await agent.run("refund order 7")
    reason = not_a_verdict("odd", shaped)
    assert ([], reason) == (ran, read(model))
    assert [("odd", "before-tool", "deny", False, reason, None, None)] == rows(agent)


@pytest.mark.parametrize(("returned", "shaped"), LOOKALIKES)
async def test_g06_after_tool_lookalike_is_a_denial(returned: Any, shaped: str) -> None:
    """G6: an after-tool return that is not an outcome is a denial, never a value."""
    odd = ToolMiddleware(name="odd", on_tool_result=lambda r: returned)
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(odd,))
    await agent.run("refund order 7")
    reason = not_a_verdict("odd", shaped)
    assert ([ARGS], reason) == (ran, read(model))
    assert [
        ("odd", "after-tool", "deny", True, reason, "refunded 250.0 on 7", reason)
    ] == rows(agent)


@pytest.mark.parametrize(("returned", "shaped"), LOOKALIKES)
async def test_g06_message_lookalike_is_a_denial(returned: Any, shaped: str) -> None:
    """G6: a message hook's non-outcome return refuses the message."""
    odd = MessageMiddleware(name="odd", on_message=lambda m: returned)
    model, ran = refund_model(), []
    agent = build(model, ran, message_links=(odd,))
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("refund order 7")
    assert ("input", "odd", not_a_verdict("odd", shaped)) == (
        caught.value.phase,
        caught.value.middleware,
        caught.value.reason,
    )
    assert [] == model.requests


async def test_g06_async_hooks_are_awaited() -> None:
    """G6: an async hook's outcome is awaited and acted on."""

    async def double(call: Any) -> Allow:
        return allow({**call.args, "amount": call.args["amount"] * 2}, "double it")

    async def shout(result: Any) -> Allow:
        return allow(result.result.upper(), "shout")

    link = ToolMiddleware(name="async", on_tool_call=double, on_tool_result=shout)
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(link,))
    await agent.run("refund order 7")
    assert ([{"order": 7, "amount": 500.0}], "REFUNDED 500.0 ON 7") == (
        ran,
        read(model),
    )


async def test_g06_async_hook_returning_a_lookalike_is_a_denial() -> None:
    """G6: an awaited return is checked like a plain one."""

    async def sloppy(call: Any) -> dict[str, Any]:
        return {"allow": True}

    model, ran = refund_model(), []
    agent = build(
        model, ran, tool_links=(ToolMiddleware(name="s", on_tool_call=sloppy),)
    )
    await agent.run("refund order 7")
    assert ([], not_a_verdict("s", "a dict")) == (ran, read(model))


async def test_g06_ask_after_the_tool_ran_is_a_denial() -> None:
    """G6: an Ask where no pause exists (after-tool) is a denial."""
    late = ToolMiddleware(name="late", on_tool_result=lambda r: ask("show this?"))
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(late,))
    out = await agent.run("refund order 7")
    reason = (
        "middleware 'late' asked a person to decide, and there is no pause here "
        "to carry that ask: show this?"
    )
    assert ("Done.", reason) == (out, read(model))
    assert ["deny"] == [r.outcome for r in agent.last_snapshot().middleware_decisions]


# -- G7 ---------------------------------------------------------------------


def boom(message: str) -> Any:
    def hook(ctx: Any) -> Any:
        raise RuntimeError(message)

    return hook


class QuietError(Exception):
    """An exception whose text is empty."""


def quiet(ctx: Any) -> Any:
    raise QuietError()


@pytest.mark.parametrize(
    ("hook", "text"), [(boom("db down"), "db down"), (quiet, "QuietError")]
)
async def test_g07_before_tool_throw_is_a_denial(hook: Any, text: str) -> None:
    """G7: a before-tool hook that raises denies with 'threw: <text>'."""
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(ToolMiddleware(name="t", on_tool_call=hook),))
    assert "Done." == await agent.run("refund order 7")
    reason = f"middleware 't' threw: {text}"
    assert ([], reason) == (ran, read(model))
    assert [("t", "before-tool", "deny", False, reason, None, None)] == rows(agent)


@pytest.mark.parametrize(
    ("hook", "text"), [(boom("parse failed"), "parse failed"), (quiet, "QuietError")]
)
async def test_g07_after_tool_throw_is_a_denial(hook: Any, text: str) -> None:
    """G7: an after-tool hook that raises hides the result behind its reason."""
    model, ran = refund_model(), []
    agent = build(
        model, ran, tool_links=(ToolMiddleware(name="t", on_tool_result=hook),)
    )
    await agent.run("refund order 7")
    reason = f"middleware 't' threw: {text}"
    assert ([ARGS], reason) == (ran, read(model))
    assert [
        ("t", "after-tool", "deny", True, reason, "refunded 250.0 on 7", reason)
    ] == rows(agent)


@pytest.mark.parametrize("phase", ["input", "output"])
async def test_g07_message_throw_is_a_denial(phase: str) -> None:
    """G7: a message hook that raises refuses the message at either phase."""

    def hook(msg: Any) -> Any:
        if msg.phase == phase:
            raise ValueError("classifier offline")
        return allow()

    model, ran = refund_model(), []
    agent = build(
        model, ran, message_links=(MessageMiddleware(name="m", on_message=hook),)
    )
    with pytest.raises(MessageDeniedError) as caught:
        await agent.run("refund order 7")
    assert (phase, "m", "middleware 'm' threw: classifier offline") == (
        caught.value.phase,
        caught.value.middleware,
        caught.value.reason,
    )


async def test_g07_throw_after_resume_is_a_denial() -> None:
    """G7: on the resume path, a later link that raises is a denial."""
    asker = ToolMiddleware(name="asker", on_tool_call=lambda c: ask("ok?"))
    thrower = ToolMiddleware(name="thrower", on_tool_call=boom("late failure"))
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=(asker, thrower))
    paused = await agent.run("refund order 7")
    assert is_ask_pause(paused)
    assert "Done." == await agent.resume(
        paused.checkpoint, check_in_approved(by="dana")
    )
    reason = "middleware 'thrower' threw: late failure"
    assert ([], reason) == (ran, read(model))
    assert [
        ("asker", "before-tool", "ask", False, "ok?", None, None),
        ("asker", "before-tool", "allow", False, "approved by dana", None, None),
        ("thrower", "before-tool", "deny", False, reason, None, None),
    ] == rows(agent)


# -- G8 ---------------------------------------------------------------------


async def test_g08_mutating_args_in_place_changes_nothing() -> None:
    """G8: a hook that mutates ctx.args in place changes nothing downstream."""
    seen: list[Any] = []

    def vandal(call: Any) -> Allow:
        call.args["amount"] = 1_000_000
        call.args["extra"] = True
        return allow()

    def witness(call: Any) -> Allow:
        seen.append(call.args)
        return allow()

    links = (
        ToolMiddleware(name="vandal", on_tool_call=vandal),
        ToolMiddleware(name="witness", on_tool_call=witness),
    )
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=links)
    await agent.run("refund order 7")
    assert ([ARGS], [ARGS]) == (seen, ran)
    assert "refunded 250.0 on 7" == read(model)
    assert ARGS == model.requests[1].messages[1].tool_calls[0].args


async def test_g08_mutating_result_in_place_changes_nothing() -> None:
    """G8: a hook that mutates ctx.result in place changes nothing downstream."""
    seen: list[Any] = []

    def vandal(res: Any) -> Allow:
        res.result["status"] = "forged"
        return allow()

    def witness(res: Any) -> Allow:
        seen.append(res.result)
        return allow()

    # Reverse order: inner 'vandal' sees the result first, outer 'witness' after.
    links = (
        ToolMiddleware(name="witness", on_tool_result=witness),
        ToolMiddleware(name="vandal", on_tool_result=vandal),
    )
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=links, result={"status": "refunded"})
    await agent.run("refund order 7")
    assert ([{"status": "refunded"}], '{"status":"refunded"}') == (seen, read(model))


async def test_g08_mutating_a_returned_transform_later_changes_nothing() -> None:
    """G8: a link cannot change a value after handing it over with allow()."""
    kept: dict[str, Any] = {"order": 7, "amount": 10.0}

    def first(call: Any) -> Allow:
        return allow(kept, "cap the amount")

    def second(call: Any) -> Allow:
        kept["amount"] = 999.0
        call.args["amount"] = 888.0
        return allow()

    links = (
        ToolMiddleware(name="first", on_tool_call=first),
        ToolMiddleware(name="second", on_tool_call=second),
    )
    model, ran = refund_model(), []
    agent = build(model, ran, tool_links=links)
    await agent.run("refund order 7")
    assert [{"order": 7, "amount": 10.0}] == ran
    assert [
        (
            "first",
            "before-tool",
            "allow",
            True,
            "cap the amount",
            ARGS,
            {"order": 7, "amount": 10.0},
        ),
        ("second", "before-tool", "allow", False, None, None, None),
    ] == rows(agent)


async def test_g08_contexts_are_frozen() -> None:
    """G8: assigning to a context field raises; the value flows on unchanged."""
    errors: list[str] = []

    def reassign(ctx: Any) -> Allow:
        for field in ("args", "tool_name") if hasattr(ctx, "args") else ("content",):
            try:
                setattr(ctx, field, "hijacked")
            except dataclasses.FrozenInstanceError:
                errors.append(field)
        if hasattr(ctx, "result"):
            try:
                ctx.result = "hijacked"
            except dataclasses.FrozenInstanceError:
                errors.append("result")
        return allow()

    model, ran = refund_model(), []
    agent = build(
        model,
        ran,
        tool_links=(
            ToolMiddleware(name="r", on_tool_call=reassign, on_tool_result=reassign),
        ),
        message_links=(MessageMiddleware(name="m", on_message=reassign),),
    )
    assert "Done." == await agent.run("refund order 7")
    assert [
        "content",
        "args",
        "tool_name",
        "args",
        "tool_name",
        "result",
        "content",
    ] == errors
    assert ([ARGS], "refunded 250.0 on 7") == (ran, read(model))


async def test_g08_mutating_history_or_identity_changes_nothing() -> None:
    """G8: a hook that mutates its history or identity changes nothing downstream."""
    seen: list[Any] = []

    def vandal(ctx: Any) -> Allow:
        for msg in ctx.history:
            for proposed in msg.tool_calls:
                proposed.args["amount"] = 1_000_000
        ctx.identity["session_id"] = "hijacked"
        return allow()

    def witness(ctx: Any) -> Allow:
        seen.append((ctx.history[-1].tool_calls[0].args, dict(ctx.identity)))
        return allow()

    links = (
        ToolMiddleware(name="vandal", on_tool_call=vandal, on_tool_result=witness),
        ToolMiddleware(name="witness", on_tool_call=witness, on_tool_result=vandal),
    )
    model, ran = refund_model(), []
    agent = build(
        model,
        ran,
        tool_links=links,
        message_links=(MessageMiddleware(name="m", on_message=vandal),),
    )
    assert "Done." == await agent.run("refund order 7")
    assert [ARGS] == ran
    assert [(ARGS, {"session_id": "session-1"})] * 2 == seen
    assert ARGS == model.requests[1].messages[1].tool_calls[0].args
    assert ARGS == agent.last_snapshot().history[1].tool_calls[0].args
    await assert_fold_matches(agent)
