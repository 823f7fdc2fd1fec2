"""helmlog.rules: PII scrub, rate limit, budget, tool allow-list, argument ceiling.

Pattern: law-named unit tests: each rule called on contexts directly, and
         driven through whole agent runs (scripted provider) where what the
         model reads, the rows and the facts are the behaviour; the limits
         are also hosted by an in-process ``PolicyActor``.
Role:    unit tests for ``helmlog/rules/`` (``helmlog.rules``).
Emits:   nothing.

Laws: G2/G49 (a scrub's why counts kinds and holds no value), G7 (a failing
detector or cost denies), G15 (a limit's denial is what the model reads),
G59 (a ceiling with ``over="ask"`` pauses), G78 (the allow-list judges
``tool_source``), R17 (a limit hosted by a PolicyActor shares its state
across sessions), issue 12 item 7.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import (
    Agent,
    MessageDeniedError,
    ToolCallContext,
    ToolResultContext,
    allow,
    deny,
    is_ask_pause,
    tool,
)
from helmlog.actors import PolicyActor
from helmlog.actors._messages import call_in, decode_hook_reply, encode, outcome_of
from helmlog.rules import (
    ArgumentCeiling,
    Budget,
    PiiMatch,
    PiiScrub,
    RateLimit,
    ToolAllowList,
    luhn_valid,
    regex_detector,
)
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import Recorder


def call(
    tool_name: str = "refund",
    source: str | None = None,
    identity: dict[str, Any] | None = None,
    **args: Any,
) -> ToolCallContext:
    return ToolCallContext(tool_name, source, "c1", 1, args, (), identity or {})


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount:g} on {order}"


@tool
def lookup(order: int) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "customer": {"email": "ada@example.com"}, "notes": []}


def proposing(*calls: ToolCallRequest, last: str = "Done.") -> ScriptedProvider:
    return scripted([Reply(tool_calls=calls), last])


def refund_call(call_id: str = "c1", **args: Any) -> ToolCallRequest:
    return ToolCallRequest(id=call_id, name="refund", args=args)


# -- PiiScrub -----------------------------------------------------------------------


async def test_pii_scrub_rewrites_the_input_before_the_model_sees_it() -> None:
    """G33/G2: the model is sent the scrubbed text; the why counts kinds only."""
    model = scripted(["Noted."])
    recorder = Recorder()
    scrub = PiiScrub()
    agent = (
        Agent.create(provider=model, model="m")
        .act(input=[scrub])
        .watch(recorder)
        .build()
    )

    await agent.run("I am ada@example.com, SSN 123-45-6789, card 4111 1111 1111 1111")

    assert (
        "I am [email], SSN [ssn], card [card]" == model.requests[0].messages[0].content
    )
    # G76: an input-only entry files a pass-through row at output.
    row, passed = agent.last_snapshot().middleware_decisions
    assert ("pii-scrub", "input", True, "scrubbed 1 card, 1 email, 1 ssn") == (
        row.middleware,
        row.moment,
        row.changed,
        row.why,
    )
    assert ("pii-scrub", "output", "allow", False, None) == (
        passed.middleware,
        passed.moment,
        passed.outcome,
        passed.changed,
        passed.why,
    )
    facts = recorder.of_type("middleware.decision")
    assert 2 == len(facts)
    assert not any("ada@example.com" in repr(f) for f in facts)


async def test_pii_scrub_rewrites_strings_inside_a_tool_result() -> None:
    """G22: after a tool, every string in the result is scrubbed, nested too."""
    model = proposing(ToolCallRequest(id="c1", name="lookup", args={"order": 7}))
    agent = (
        Agent.create(provider=model, model="m")
        .tool(lookup)
        .act(after_tool=[PiiScrub()])
        .build()
    )

    await agent.run("look up 7")

    assert (
        '{"order":7,"customer":{"email":"[email]"},"notes":[]}'
        == model.requests[1].messages[-1].content
    )


def test_pii_scrub_takes_a_pluggable_detector_and_placeholder() -> None:
    """Item 7: any function from text to PiiMatch spans is a detector."""

    def codenames(text: str) -> list[PiiMatch]:
        at = text.find("Zeus")
        return [] if at < 0 else [PiiMatch("codename", at, at + 4)]

    scrub = PiiScrub(detector=codenames, placeholder="<{kind} removed>")
    combined = PiiScrub(detector=regex_detector({"order-ref": r"ORD-\d{6}"}))

    assert ("Project <codename removed>", {"codename": 1}) == scrub.scrub(
        "Project Zeus"
    )
    assert "see [order-ref]" == combined.scrub("see ORD-123456")[0]


def test_pii_scrub_leaves_a_number_that_fails_luhn() -> None:
    """Item 7: card numbers are Luhn-checked; an order number is not a card."""
    assert (True, False) == (
        luhn_valid("4111 1111 1111 1111"),
        luhn_valid("4111 1111 1111 1112"),
    )
    text = "ref 4111-1111-1111-1112 ok"
    assert (text, {}) == PiiScrub().scrub(text)


async def test_pii_scrub_with_a_failing_detector_refuses_the_message() -> None:
    """G7: a detector that raises is a denial: nothing unscrubbed goes through."""

    def broken(text: str) -> list[PiiMatch]:
        raise RuntimeError("detector service down")

    model = scripted(["never"])
    agent = (
        Agent.create(provider=model, model="m")
        .act(input=[PiiScrub(detector=broken)])
        .build()
    )

    with pytest.raises(MessageDeniedError) as refused:
        await agent.run("I am ada@example.com")

    assert "middleware 'pii-scrub' threw: detector service down" == refused.value.reason
    assert [] == model.requests


def test_pii_scrub_can_scrub_arguments_and_says_so() -> None:
    """Item 7: arguments=True scrubs the arguments' strings before the tool."""
    scrub = PiiScrub(arguments=True, results=False, messages=False)

    verdict = scrub.on_tool_call(call("notify", to="ada@example.com", n=2))

    assert allow({"to": "[email]", "n": 2}, "scrubbed 1 email") == verdict
    assert (None, None) == (scrub.on_message, scrub.on_tool_result)


# -- RateLimit ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_limit_denies_past_the_window_and_recovers() -> None:
    """Item 7: at most N calls per window; the reason says when to try again."""
    clock = Clock()
    limit = RateLimit(max_calls=2, per_s=60, clock=clock)

    first = [limit.on_tool_call(call()) for _ in range(3)]
    clock.now += 45
    still = limit.on_tool_call(call())
    clock.now += 16
    later = limit.on_tool_call(call())

    assert [
        allow(),
        allow(),
        deny("rate limit: at most 2 calls to 'refund' per 60 s; try again in 60.0 s"),
    ] == first
    assert (
        deny("rate limit: at most 2 calls to 'refund' per 60 s; try again in 15.0 s")
        == still
    )
    assert allow() == later


def test_rate_limit_counts_per_key_and_only_its_tools() -> None:
    """Item 7: key= splits the window (per user); tools= limits only those."""
    limit = RateLimit(
        max_calls=1,
        per_s=60,
        tools={"refund"},
        key=lambda c: (c.identity or {}).get("user"),
        clock=Clock(),
    )

    outcomes = [
        type(limit.on_tool_call(call(identity={"user": u}))).__name__
        for u in ("ada", "bob", "ada")
    ]

    assert ["Allow", "Allow", "Deny"] == outcomes
    assert allow() == limit.on_tool_call(call("lookup", identity={"user": "ada"}))


async def test_rate_limit_denial_is_what_the_model_reads() -> None:
    """G15: the second call in the window is refused; the model reads why."""
    model = proposing(
        refund_call("c1", order=1, amount=5), refund_call("c2", order=2, amount=5)
    )
    agent = (
        Agent.create(provider=model, model="m")
        .tool(refund)
        .act(before_tool=[RateLimit(max_calls=1, per_s=3600)])
        .build()
    )

    await agent.run("two refunds")

    reads = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert "refunded 5 on 1" == reads[0]
    assert reads[1].startswith("rate limit: at most 1 calls to 'refund' per 3600 s")


# -- Budget -------------------------------------------------------------------------


def test_budget_spends_an_argument_and_refuses_to_overspend() -> None:
    """Item 7: cost by argument; a call that would overspend is denied."""
    budget = Budget("refund-budget", limit=300, cost="amount", unit="USD")

    outcomes = [budget.on_tool_call(call(amount=a)) for a in (250, 100, 50)]

    assert [
        allow(None, "50 USD left"),
        deny(
            "budget 'refund-budget' has 50 USD left of 300 USD, less than this "
            "call needs; do not retry it in this run"
        ),
        allow(None, "0 USD left"),
    ] == outcomes
    assert 300 == budget.spent()


@pytest.mark.parametrize("amount", ["250", -5, True, None])
async def test_budget_fails_closed_on_a_cost_it_cannot_read(amount: Any) -> None:
    """G7: a cost that is not a number >= 0 denies the call; nothing is spent."""
    model = proposing(refund_call(order=1, amount=amount))
    agent = (
        Agent.create(provider=model, model="m")
        .tool(refund)
        .act(before_tool=[Budget(limit=300, cost="amount")])
        .build()
    )

    await agent.run("refund")

    (row,) = agent.last_snapshot().middleware_decisions
    assert (
        "deny",
        "middleware 'budget' threw: budget 'budget' could not price "
        "this call: its cost is not a number >= 0",
    ) == (row.outcome, row.why)


def shared_budget() -> Budget:
    """A PolicyActor factory (module level: Ray pickles it by reference)."""
    return Budget("shared-budget", limit=2)


async def test_budget_in_a_policy_actor_is_shared_by_every_caller() -> None:
    """R17: one hosted budget, spent by calls from different sessions."""
    actor = PolicyActor(shared_budget)

    async def spend(session: str) -> Any:
        ctx = call(identity={"session_id": session}, amount=1)
        return outcome_of(decode_hook_reply(await actor.call(encode(call_in(0, ctx)))))

    outcomes = [await spend(s) for s in ("s1", "s2", "s3")]

    assert ["Allow", "Allow", "Deny"] == [type(o).__name__ for o in outcomes]
    assert ["1 left", "0 left"] == [o.why for o in outcomes[:2]]


# -- ToolAllowList ------------------------------------------------------------------


def test_allow_list_judges_each_source_s_tools() -> None:
    """G78: own tools by None, a server's by its name; unlisted sources denied."""
    rule = ToolAllowList({None: "*", "github": {"search_issues"}})

    outcomes = [
        rule.on_tool_call(call("refund")),
        rule.on_tool_call(call("search_issues", "github")),
        rule.on_tool_call(call("delete_repo", "github")),
        rule.on_tool_call(call("search_issues", "gitlab")),
    ]

    assert [
        allow(),
        allow(),
        deny(
            "tool 'delete_repo' of source 'github' is not on the allow-list; "
            "do not call it again"
        ),
        deny(
            "tool 'search_issues' is not allowed: source 'gitlab' is not on the "
            "allow-list; do not call it again"
        ),
    ] == outcomes


def test_allow_list_refuses_a_bare_string_of_names() -> None:
    """Item 7: ``{"github": "search"}`` is a mistake (a str is not a set)."""
    with pytest.raises(ValueError, match="must be a collection of names"):
        ToolAllowList({"github": "search_issues"})


# -- ArgumentCeiling ----------------------------------------------------------------


def test_argument_ceiling_denies_above_and_passes_at_or_below() -> None:
    """Item 7: above the ceiling is denied; at it, below it, or absent passes."""
    ceiling = ArgumentCeiling("refund", "amount", 10_000)

    outcomes = [ceiling.on_tool_call(call(amount=a)) for a in (10_001, 10_000, 5)] + [
        ceiling.on_tool_call(call()),
        ceiling.on_tool_call(call("lookup", amount=1e9)),
    ]

    assert [
        deny("'amount' of 'refund' may be at most 10000; ask for 10000 or less"),
        allow(),
        allow(),
        allow(),
        allow(),
    ] == outcomes
    assert "refund-amount-ceiling" == ceiling.name


def test_argument_ceiling_follows_a_path_and_fails_closed_on_text() -> None:
    """Item 7: a dotted path reaches nested arguments; a non-number is denied."""
    ceiling = ArgumentCeiling("pay", "payment.amount", 100)

    assert isinstance(
        ceiling.on_tool_call(call("pay", payment={"amount": 101})), type(deny("x"))
    )
    assert deny(
        "'payment.amount' of 'pay' is not a number, so it cannot be checked "
        "against its ceiling of 100"
    ) == ceiling.on_tool_call(call("pay", payment={"amount": "lots"}))


async def test_argument_ceiling_can_ask_a_person_instead() -> None:
    """G59: over="ask" pauses the run before the tool, with the ceiling's question."""
    model = proposing(refund_call(order=7, amount=25_000))
    agent = (
        Agent.create(provider=model, model="m")
        .tool(refund)
        .act(before_tool=[ArgumentCeiling("refund", "amount", 10_000, over="ask")])
        .build()
    )

    paused = await agent.run("refund 7")

    assert is_ask_pause(paused)
    assert (
        "'amount' of 'refund' may be at most 10000; ask for 10000 or less",
        {"argument": "amount", "ceiling": 10_000},
        "refund-amount-ceiling",
    ) == (paused.ask.question, paused.ask.detail, paused.ask.middleware)


def test_results_context_is_scrubbed_for_errors_too() -> None:
    """G18: a raised tool's error text is a result too, and is scrubbed."""
    ctx = ToolResultContext(
        "lookup", None, "c1", 1, {}, (), {}, "no account for ada@example.com", True
    )

    assert allow(
        "no account for [email]", "scrubbed 1 email"
    ) == PiiScrub().on_tool_result(ctx)
