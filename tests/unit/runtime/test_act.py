"""G.12 — ``.act()``: the whole wheel in one place, and sugar exactly.

Pattern: law-named unit tests; ``.act()`` is compared with the doors it
         forwards to by running both agents on the same script.
Role:    unit tests for ``runtime/_moments.py`` and ``AgentBuilder.act``.
Emits:   nothing.

Laws: G71 (the moments and the derived keys), G73 (what ``.act()`` refuses,
in checking order), G74 (a refused bundle changes nothing), G75 (sugar,
exactly: forwarding order, equal runs), G76 (phase wrappers), G77 (hooks
decide; buckets are checked). G72 (the completeness lock) is pinned in
``tests/unit/helmlog/test_public_api.py`` with the other surface checks.

Why ``policy_version`` is compared: it digests the ordered links, their hooks,
phase restrictions and the window of a built agent, so two builders that
agree on it attached exactly the same things.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    ACT_KEYS,
    LOOP_MOMENTS,
    Agent,
    AgentBuilder,
    AgentBuildError,
    MessageMiddleware,
    ToolMiddleware,
    act_key_for,
    allow,
    sliding_window,
    tool,
)
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from . import helpers


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} shipped"


def script() -> ScriptedProvider:
    return scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="lookup", args={"order": 7})]
            ),
            "Shipped.",
            Reply(
                tool_calls=[ToolCallRequest(id="c2", name="lookup", args={"order": 8})]
            ),
            "Also shipped.",
        ]
    )


def builder(model: ScriptedProvider | None = None) -> AgentBuilder:
    provider = model if model is not None else script()
    return Agent.create(provider=provider, model="m", ids=counter_ids()).tool(lookup)


def tool_link(
    name: str, log: list[str], *, call: bool = True, result: bool = True
) -> Any:
    """A tool link that logs ``before:<name>`` / ``after:<name>``."""

    def on_call(c: Any) -> Any:
        log.append(f"before:{name}")
        return allow()

    def on_result(r: Any) -> Any:
        log.append(f"after:{name}")
        return allow(f"{r.result}|{name}", f"{name} tagged it")

    return ToolMiddleware(
        name=name,
        on_tool_call=on_call if call else None,
        on_tool_result=on_result if result else None,
    )


def message_link(name: str, log: list[str]) -> Any:
    def hook(m: Any) -> Any:
        log.append(f"{m.phase}:{name}:{m.content}")
        return allow(f"{m.content}+{name}", f"{name} signed")

    return MessageMiddleware(name=name, on_message=hook)


def names(agent: Agent) -> list[tuple[str, str]]:
    return [
        (r.middleware, r.moment) for r in agent.last_snapshot().middleware_decisions
    ]


# -- G71 --------------------------------------------------------------------


def test_g71_the_moments_in_loop_order() -> None:
    """G71: LOOP_MOMENTS lists the five moments in loop order."""
    assert ("input", "before-tool", "after-tool", "window", "output") == LOOP_MOMENTS


@pytest.mark.parametrize(
    ("moment", "key"),
    [("before-tool", "before_tool"), ("input", "input"), ("a-b-c", "a_b_c")],
)
def test_g71_act_key_for_replaces_each_dash(moment: str, key: str) -> None:
    """G71: act_key_for replaces every '-' with '_'."""
    assert key == act_key_for(moment)


def test_g71_act_keys_are_derived_from_the_moments() -> None:
    """G71: ACT_KEYS == tuple(act_key_for(m) for m in LOOP_MOMENTS)."""
    assert ("input", "before_tool", "after_tool", "window", "output") == ACT_KEYS
    assert tuple(act_key_for(m) for m in LOOP_MOMENTS) == ACT_KEYS


# -- G73 --------------------------------------------------------------------


class ResultOnly:
    name = "result-only"

    def on_tool_result(self, r: Any) -> Any:
        return allow()


class CallOnly:
    name = "call-only"

    def on_tool_call(self, c: Any) -> Any:
        return allow()


class Blank:
    name = ""

    def on_message(self, m: Any) -> Any:
        return allow()


@pytest.mark.parametrize("first", [{}, {"input": []}])
def test_g73_a_second_act_is_refused(first: dict[str, Any]) -> None:
    """G73: .act() twice raises, even after an empty .act(), naming the doors."""
    b = builder().act(**first)
    with pytest.raises(AgentBuildError) as caught:
        b.act()
    text = str(caught.value)
    assert [True] * 4 == [
        part in text
        for part in (
            "already called",
            ".tool_middleware()",
            ".message_middleware()",
            ".window()",
        )
    ]


def test_g73_an_unknown_key_is_refused_listing_the_keys() -> None:
    """G73: an unknown key names itself and lists the five keys."""
    with pytest.raises(AgentBuildError) as caught:
        builder().act(before_tools=[CallOnly()])
    text = str(caught.value)
    assert [True] * 6 == ["unknown key 'before_tools'" in text] + [
        k in text for k in ACT_KEYS
    ]


@pytest.mark.parametrize("key", ["input", "before_tool", "after_tool", "output"])
@pytest.mark.parametrize("value", ["rule", CallOnly(), {"a": CallOnly()}, None, 3])
def test_g73_a_list_key_needs_a_list(key: str, value: Any) -> None:
    """G73: a list key whose value is not a list or tuple is refused."""
    with pytest.raises(AgentBuildError, match=f"'{key}' expects a list"):
        builder().act(**{key: value})


@pytest.mark.parametrize(
    ("key", "entry", "text"),
    [
        ("input", Blank(), "non-empty name"),
        ("output", CallOnly(), "'call-only' under 'output' has no on_message hook"),
        ("input", object(), "non-empty name"),
        ("before_tool", ResultOnly(), "belongs under 'after_tool'"),
        ("after_tool", CallOnly(), "belongs under 'before_tool'"),
        (
            "before_tool",
            MessageMiddleware(name="msg", on_message=lambda m: allow()),
            "'msg' under 'before_tool' has no on_tool_call hook",
        ),
    ],
)
def test_g73_an_entry_needs_a_name_and_its_buckets_hook(
    key: str, entry: Any, text: str
) -> None:
    """G73: an entry without a name or its bucket's hook is refused, with a hint."""
    with pytest.raises(AgentBuildError) as caught:
        builder().act(**{key: [entry]})
    assert text in str(caught.value)


@pytest.mark.parametrize("door", ["window", "act"])
def test_g73_a_second_window_is_refused(door: str) -> None:
    """G73: .act(window=...) when a strategy is set raises naming the first door."""
    b = builder()
    if door == "window":
        b.window(sliding_window(keep_recent_turns=3))
        expected = "already has a window strategy ('sliding-window'), set by .window()"
        with pytest.raises(AgentBuildError) as caught:
            b.act(window=sliding_window(keep_recent_turns=2))
    else:
        b.act(window=sliding_window(keep_recent_turns=3))
        expected = (
            "already has a window strategy ('sliding-window'), set by .act(window=...)"
        )
        with pytest.raises(AgentBuildError) as caught:
            b.window(sliding_window(keep_recent_turns=2))
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("keys", "text"),
    [
        ({"bogus": 1, "input": "not a list"}, "unknown key 'bogus'"),
        ({"input": "not a list", "output": [CallOnly()]}, "'input' expects a list"),
        ({"output": [CallOnly()], "after_tool": "x"}, "'after_tool' expects a list"),
        (
            {"before_tool": [ResultOnly()], "window": "taken"},
            "belongs under 'after_tool'",
        ),
        (
            {
                "input": [MessageMiddleware(name="ok", on_message=allow)],
                "window": "taken",
            },
            "already has a window strategy",
        ),
    ],
)
def test_g73_refusals_come_in_checking_order(keys: dict[str, Any], text: str) -> None:
    """G73: with several problems, the first in checking order is the one raised."""
    b = builder().window(sliding_window(keep_recent_turns=3))
    if keys.get("window") == "taken":
        keys = {**keys, "window": sliding_window(keep_recent_turns=2)}
    with pytest.raises(AgentBuildError) as caught:
        b.act(**keys)
    assert text in str(caught.value)


def test_g73_a_second_call_is_checked_before_unknown_keys() -> None:
    """G73: 'already called' comes before every other refusal."""
    b = builder().act()
    with pytest.raises(AgentBuildError, match="already called"):
        b.act(bogus=1)


# -- G74 --------------------------------------------------------------------


@pytest.mark.parametrize(
    "refused",
    [
        {
            "input": [MessageMiddleware(name="good", on_message=allow)],
            "before_tool": [ResultOnly()],
        },
        {"before_tool": [CallOnly()], "after_tool": [CallOnly()]},
        {"input": [MessageMiddleware(name="good", on_message=allow)], "output": "x"},
        {"before_tool": [CallOnly()], "window": "taken"},
        {"input": [MessageMiddleware(name="good", on_message=allow)], "bogus": []},
    ],
)
async def test_g74_a_refused_bundle_changes_nothing(refused: dict[str, Any]) -> None:
    """G74: after a refusal the builder is as it was and .act() may still be called."""
    log: list[str] = []
    model = script()
    b = builder(model).window(sliding_window(keep_recent_turns=3))
    if refused.get("window") == "taken":
        refused = {**refused, "window": sliding_window(keep_recent_turns=1)}
    with pytest.raises(AgentBuildError):
        b.act(**refused)
    agent = b.act(after_tool=[tool_link("late", log, call=False)]).build()
    reference = (
        builder()
        .window(sliding_window(keep_recent_turns=3))
        .act(after_tool=[tool_link("late", [], call=False)])
        .build()
    )
    assert reference.policy_version == agent.policy_version
    await agent.run("where is order 7?")
    assert ([("late", "after-tool")], ["after:late"]) == (names(agent), log)


# -- G75 --------------------------------------------------------------------


async def run_both_turns(agent: Agent) -> list[Any]:
    answers = [await agent.run("where is order 7?"), await agent.follow_up("and 8?")]
    snapshot = agent.last_snapshot()
    # The clock and the hash chain differ between two agents; the records must not.
    windows = [
        msgspec.structs.replace(w, timestamp=0, prev_hash="")
        for w in snapshot.window_records
    ]
    return [answers, snapshot.middleware_decisions, windows]


async def test_g75_act_equals_the_doors() -> None:
    """G75: .act() and the doors give equal answers, requests, ledgers, windows."""
    act_log: list[str] = []
    door_log: list[str] = []
    act_model, door_model = script(), script()

    def parts(log: list[str]) -> dict[str, Any]:
        both = message_link("both", log)
        return {
            "m0": message_link("m0", log),
            "both": both,
            "t0": tool_link("t0", log),
            "a": tool_link("a", log),
            "b": tool_link("b", log, result=False),
            "c": tool_link("c", log, call=False),
            "t9": tool_link("t9", log),
        }

    p = parts(act_log)
    via_act = (
        builder(act_model)
        .message_middleware(p["m0"])
        .tool_middleware(p["t0"])
        .act(
            input=[p["both"]],
            output=[p["both"]],
            before_tool=[p["a"], p["b"]],
            after_tool=[p["c"], p["a"]],
            window=sliding_window(keep_recent_turns=1),
        )
        .tool_middleware(p["t9"])
        .build()
    )
    q = parts(door_log)
    via_doors = (
        builder(door_model)
        .message_middleware(q["m0"])
        .tool_middleware(q["t0"])
        .window(sliding_window(keep_recent_turns=1))
        .message_middleware(q["both"])
        .tool_middleware(q["a"], q["b"], q["c"])
        .tool_middleware(q["t9"])
        .build()
    )
    assert via_doors.policy_version == via_act.policy_version
    act_result = await run_both_turns(via_act)
    door_result = await run_both_turns(via_doors)
    assert door_result == act_result
    assert door_model.requests == act_model.requests
    assert door_log == act_log
    assert 0 < len(act_result[2])
    assert [
        "before:t0",
        "before:a",
        "before:b",
        "before:t9",
        "after:t9",
        "after:c",
        "after:a",
        "after:t0",
    ] == [e for e in act_log if e.startswith(("before:", "after:"))][:8]


async def test_g75_input_then_output_only_entries_in_order() -> None:
    """G75: the message list is the input entries, then the output-only ones."""
    log: list[str] = []
    i1, both, o1 = (
        message_link("i1", log),
        message_link("both", log),
        message_link("o1", log),
    )
    agent = (
        builder(scripted(["Hi."]))
        .message_middleware(message_link("first", log))
        .act(input=[i1, both], output=[o1, both])
        .message_middleware(message_link("last", log))
        .build()
    )
    await agent.run("hello")
    # The chain is first, i1, both, o1, last; a phase-restricted entry files
    # a pass-through row at the other phase (G76).
    chain = ("first", "i1", "both", "o1", "last")
    assert [(n, "input") for n in chain] + [(n, "output") for n in chain] == names(
        agent
    )


async def test_g75_an_empty_act_equals_no_governance() -> None:
    """G75: .act() with nothing sends the requests of an ungoverned agent."""
    plain_model, act_model = script(), script()
    plain = builder(plain_model).build()
    acted = builder(act_model).act().build()
    assert plain.policy_version == acted.policy_version
    assert await run_both_turns(plain) == await run_both_turns(acted)
    assert plain_model.requests == act_model.requests


# -- G76 --------------------------------------------------------------------


async def test_g76_a_phase_restricted_rule_files_a_pass_through_at_the_other() -> None:
    """G76 (seed 004): input-only and output-only entries are not called at
    the other phase, and each files a plain pass-through row there."""
    log: list[str] = []
    model = scripted(["draft"])
    agent = (
        builder(model)
        .act(input=[message_link("in", log)], output=[message_link("out", log)])
        .build()
    )
    assert "draft+out" == await agent.run("hello")
    assert ["input:in:hello", "output:out:draft"] == log
    rows = agent.last_snapshot().middleware_decisions
    assert [
        ("in", "input", "allow", True),
        ("out", "input", "allow", False),
        ("in", "output", "allow", False),
        ("out", "output", "allow", True),
    ] == [(r.middleware, r.moment, r.outcome, r.changed) for r in rows]
    passes = [r for r in rows if not r.changed]
    assert all(r.why is None and r.before is None for r in passes)
    assert "hello+in" == model.requests[0].messages[0].content


def _phase_guarded(name: str, phase: str, log: list[str]) -> MessageMiddleware:
    """The hand-written spelling of a phase-restricted rule (seed 004)."""
    inner = message_link(name, log)

    def on_message(m: Any) -> Any:
        return inner.on_message(m) if m.phase == phase else allow()

    return MessageMiddleware(name=name, on_message=on_message)


async def test_g76_act_is_sugar_for_the_hand_written_phase_guard() -> None:
    """G75/G76 (seed 004): .act(input=..., output=...) files the ledger the
    hand-written ``phase == ... else allow()`` rules file, row for row and
    byte for byte, and sends the same requests."""
    act_log: list[str] = []
    hand_log: list[str] = []
    act_model, hand_model = scripted(["draft"]), scripted(["draft"])
    acted = (
        builder(act_model)
        .act(
            input=[message_link("in", act_log)],
            output=[message_link("out", act_log)],
        )
        .build()
    )
    handwritten = (
        builder(hand_model)
        .message_middleware(
            _phase_guarded("in", "input", hand_log),
            _phase_guarded("out", "output", hand_log),
        )
        .build()
    )
    assert await handwritten.run("hello") == await acted.run("hello")
    assert hand_log == act_log
    assert hand_model.requests == act_model.requests
    assert [
        msgspec.json.encode(r) for r in handwritten.last_snapshot().middleware_decisions
    ] == [msgspec.json.encode(r) for r in acted.last_snapshot().middleware_decisions]


async def test_g76_the_same_object_under_both_is_attached_once() -> None:
    """G76: one object under input and output equals .message_middleware(rule)."""
    act_log: list[str] = []
    door_log: list[str] = []
    rule = message_link("rule", act_log)
    acted = builder(scripted(["draft"])).act(input=[rule], output=[rule]).build()
    doors = (
        builder(scripted(["draft"]))
        .message_middleware(message_link("rule", door_log))
        .build()
    )
    assert doors.policy_version == acted.policy_version
    assert await doors.run("hello") == await acted.run("hello")
    assert door_log == act_log
    assert [("rule", "input"), ("rule", "output")] == names(acted)


async def test_g76_an_input_only_rule_never_sees_output_content() -> None:
    """G76: an input-only rule is called only with input content."""
    seen: list[tuple[str, str]] = []

    def nosy(m: Any) -> Any:
        seen.append((m.phase, m.content))
        return allow()

    agent = (
        builder(scripted(["the private answer"]))
        .act(input=[MessageMiddleware(name="nosy", on_message=nosy)])
        .build()
    )
    assert "the private answer" == await agent.run("question")
    assert [("input", "question")] == seen


# -- G77 --------------------------------------------------------------------


async def test_g77_hooks_decide_not_buckets() -> None:
    """G77: a link with both hooks only under before_tool speaks at after-tool."""
    log: list[str] = []
    model = script()
    agent = builder(model).act(before_tool=[tool_link("both", log)]).build()
    await agent.run("where is order 7?")
    assert [("both", "before-tool"), ("both", "after-tool")] == names(agent)
    assert "order 7 shipped|both" == model.requests[1].messages[-1].content


async def test_g77_the_same_object_under_both_tool_keys_attaches_once() -> None:
    """G77: one object under both tool keys files one before and one after row."""
    log: list[str] = []
    link = tool_link("once", log)
    model = script()
    agent = builder(model).act(before_tool=[link], after_tool=[link]).build()
    await agent.run("where is order 7?")
    assert (
        ["before:once", "after:once"],
        [("once", "before-tool"), ("once", "after-tool")],
    ) == (
        log,
        names(agent),
    )
    assert "order 7 shipped|once" == model.requests[1].messages[-1].content


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (["a", "b", "c"], []),
        (["a", "b"], ["c"]),
        (["a"], ["b", "c"]),
        ([], ["a", "b", "c"]),
        (["a", "c"], ["b", "a"]),
    ],
)
async def test_g77_call_order_is_the_written_order(
    before: list[str], after: list[str]
) -> None:
    """G77: for any split across the tool keys, the call order is the written order."""
    log: list[str] = []
    links = {n: tool_link(n, log) for n in "abc"}
    agent = (
        builder()
        .act(
            before_tool=[links[n] for n in before], after_tool=[links[n] for n in after]
        )
        .build()
    )
    await agent.run("where is order 7?")
    written = list(dict.fromkeys(before + after))
    assert [f"before:{n}" for n in written] + [
        f"after:{n}" for n in reversed(written)
    ] == log


async def test_g75_every_before_tool_entry_is_attached_as_through_the_doors() -> None:
    """G75: "the `before_tool` entries, then the `after_tool` entries ..."."""
    refund, _ran = helpers.refund_recorder()
    twice = ToolMiddleware(name="twice", on_tool_call=lambda c: allow())

    async def rows(use_act: bool) -> list[tuple[str, str]]:
        builder = Agent.create(
            provider=scripted(
                [helpers.calls(helpers.call("c1", "refund", order=1, amount=5)), "done"]
            ),
            model="m",
        ).tool(refund)
        if use_act:
            builder = builder.act(before_tool=[twice, twice])
        else:
            builder = builder.tool_middleware(twice, twice)
        agent = builder.build()
        await agent.run("refund")
        return [
            (r.middleware, r.moment) for r in agent.last_snapshot().middleware_decisions
        ]

    assert await rows(use_act=False) == await rows(use_act=True)
