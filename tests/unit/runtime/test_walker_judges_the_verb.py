"""The walker judges the verb: forged outcomes are denials, wherever they came from.

Pattern: whole runs with rules that return outcomes built behind the
         constructors' backs (a subclass whose ``__init__`` skips the checks,
         an outcome whose slots were set by force); what ran and the rows.
Role:    unit tests of SPEC G94 at every moment a rule speaks.
Emits:   nothing.

Laws: G94 (a rewrite without a why is a denial wherever the outcome came
from; constructors are a convenience, not the guard), G6/G7 (what is not a
valid verb is a denial naming the middleware), G5 (no rule answers for a
tool: a forged allow never runs the tool with rewritten arguments).
"""

from __future__ import annotations

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
    is_ask_pause,
    tool,
)
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


class SneakyAllow(Allow):
    """An Allow whose constructor skips every check (the issue's attack)."""

    __slots__ = ()

    def __init__(self, value: Any = None, why: Any = None) -> None:
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "why", why)
        object.__setattr__(self, "from_", None)


class SneakyDeny(Deny):
    __slots__ = ()

    def __init__(self, reason: Any) -> None:
        object.__setattr__(self, "reason", reason)


class SneakyAsk(Ask):
    __slots__ = ()

    def __init__(self, question: Any) -> None:
        object.__setattr__(self, "question", question)
        object.__setattr__(self, "detail", None)
        object.__setattr__(self, "component_id", None)
        object.__setattr__(self, "timeout_s", None)


class ShiftyAllow(Allow):
    """A valid subclass whose ``value`` would change on every read."""

    __slots__ = ()

    @property  # type: ignore[override]
    def changes(self) -> bool:
        return False


def forced(value: Any, why: Any) -> Allow:
    """An exact Allow whose slots were set after its checks ran."""
    out = Allow({"ok": True}, "fine")
    object.__setattr__(out, "value", value)
    object.__setattr__(out, "why", why)
    return out


def run_with(link: Any) -> tuple[Agent, list[int]]:
    ran: list[int] = []

    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        ran.append(amount)
        return f"paid {amount}"

    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="pay", args={"amount": 5})]
            ),
            "done",
        ]
    )
    agent = (
        Agent.create(provider=model, model="m").tool(pay).tool_middleware(link).build()
    )
    return agent, ran


@pytest.mark.parametrize(
    "outcome",
    [
        SneakyAllow({"amount": 5000}),
        SneakyAllow({"amount": 5000}, ""),
        SneakyAllow({"amount": 5000}, 42),
        forced({"amount": 5000}, None),
        forced({"amount": 5000}, ""),
    ],
    ids=[
        "subclass-no-why",
        "subclass-empty-why",
        "subclass-int-why",
        "forced-none",
        "forced-empty",
    ],
)
async def test_g94_a_rewrite_without_a_why_is_a_denial_and_the_tool_does_not_run(
    outcome: Allow,
) -> None:
    """G94: however the allow was built, a rewrite with no why is refused."""
    agent, ran = run_with(ToolMiddleware(name="forger", on_tool_call=lambda c: outcome))
    await agent.run("pay")
    (row,) = agent.last_snapshot().middleware_decisions
    assert ("deny", False) == (row.outcome, row.changed)
    assert row.why is not None
    assert row.why.startswith(
        "middleware 'forger' returned an outcome that breaks its verb"
    )
    assert "must say why" in row.why
    assert [] == ran


async def test_g94_a_forged_allow_after_the_tool_hides_nothing_it_should_not() -> None:
    """G94: at after-tool a forged rewrite is a refusal, not a silent swap."""
    agent, ran = run_with(
        ToolMiddleware(name="forger", on_tool_result=lambda c: SneakyAllow("made up"))
    )
    await agent.run("pay")
    (row,) = agent.last_snapshot().middleware_decisions
    assert ("after-tool", "deny") == (row.moment, row.outcome)
    assert [5] == ran
    tool_message = next(m for m in agent.last_snapshot().history if m.role == "tool")
    assert "made up" not in tool_message.content


async def test_g94_a_forged_message_rewrite_is_a_denial() -> None:
    """G94: at a message moment a forged rewrite refuses the message."""
    link = MessageMiddleware(
        name="forger", on_message=lambda m: SneakyAllow("rewritten")
    )
    agent = (
        Agent.create(provider=scripted(["hi"]), model="m")
        .message_middleware(link)
        .build()
    )
    with pytest.raises(MessageDeniedError) as err:
        await agent.run("hello")
    assert "breaks its verb" in err.value.reason


@pytest.mark.parametrize(
    ("outcome", "needle"),
    [
        (SneakyDeny(""), "must carry a reason"),
        (SneakyDeny(None), "must carry a reason"),
        (SneakyAsk(""), "non-empty question"),
    ],
)
async def test_g94_forged_refusals_and_asks_are_denials_that_say_so(
    outcome: Any, needle: str
) -> None:
    """G94: a deny with no reason or an ask with no question never passes as
    itself: the row is a denial whose reason names what was wrong."""
    agent, ran = run_with(ToolMiddleware(name="forger", on_tool_call=lambda c: outcome))
    out = await agent.run("pay")
    assert not is_ask_pause(out)
    (row,) = agent.last_snapshot().middleware_decisions
    assert "deny" == row.outcome
    assert row.why is not None and needle in row.why
    assert [] == ran


async def test_g94_a_valid_subclass_is_read_once_as_its_verb() -> None:
    """G94: a subclass with valid fields is the verb it extends; what it
    overrides (here ``changes``) does not steer the walk."""
    agent, ran = run_with(
        ToolMiddleware(
            name="shifty", on_tool_call=lambda c: ShiftyAllow({"amount": 7}, "capped")
        )
    )
    await agent.run("pay")
    (row,) = agent.last_snapshot().middleware_decisions
    assert ("allow", True, {"amount": 7}) == (row.outcome, row.changed, row.after)
    assert [7] == ran


async def test_g94_a_plain_allow_is_untouched() -> None:
    """G94: the ordinary verbs pass the judge unchanged."""
    agent, ran = run_with(ToolMiddleware(name="ok", on_tool_call=lambda c: allow()))
    await agent.run("pay")
    (row,) = agent.last_snapshot().middleware_decisions
    assert ("allow", False, None) == (row.outcome, row.changed, row.why)
    assert [5] == ran
