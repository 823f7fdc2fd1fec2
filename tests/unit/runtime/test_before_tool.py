"""G.3 — the before-tool walk: order, the call context, first non-allow wins.

Pattern: law-named unit tests on whole runs with the scripted provider; each
         link records what it saw, the tool records what it ran with.
Role:    unit tests for ``walk_tool_calls`` in ``runtime/_chain.py`` as the
         dispatch pipeline in ``runtime/_pipeline.py`` drives it.
Emits:   nothing.

Laws: G12 (declaration order; call-links only, each once per dispatch), G13
(the call context), G14 (the first non-allow answer wins), G15 (a denial is
data, not a crash), G16 (a transform replaces the arguments wholesale), G17
(a pass-through).

Why a free-form ``note`` tool: it accepts any object, so the tests can see
exactly which arguments reached ``execute`` after each transform.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    Allow,
    Message,
    Tool,
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

from .helpers import Recorder


def note_tool(ran: list[Any]) -> Tool:
    """A tool that accepts any object and returns what it ran with."""

    def execute(**kwargs: Any) -> dict[str, Any]:
        ran.append(kwargs)
        return {"noted": kwargs}

    return Tool("note", "Take a note.", {"type": "object"}, execute)


def one_call(args: dict[str, Any], call_id: str = "c1") -> ScriptedProvider:
    call = ToolCallRequest(id=call_id, name="note", args=args)
    return scripted([Reply(tool_calls=[call]), "Noted."])


def build(model: ScriptedProvider, ran: list[Any], *links: Any) -> Agent:
    b = Agent.create(provider=model, model="m", ids=counter_ids()).tool(note_tool(ran))
    return b.tool_middleware(*links).build()


def read(model: ScriptedProvider, call_id: str = "c1", request: int = 1) -> str:
    for msg in model.requests[request].messages:
        if msg.role == "tool" and msg.tool_call_id == call_id:
            return msg.content
    raise AssertionError(f"no tool message for {call_id} in request {request}")


def ledger(agent: Agent) -> list[dict[str, Any]]:
    """Rows as encoded (absent fields omitted)."""
    return [
        msgspec.json.decode(msgspec.json.encode(r))
        for r in agent.last_snapshot().middleware_decisions
    ]


# -- G12 --------------------------------------------------------------------


def trail_link(name: str, seen: list[tuple[str, Any]]) -> ToolMiddleware:
    """A link that records the args it saw and appends its name to 'trail'."""

    def hook(call: Any) -> Allow:
        seen.append((name, call.args))
        return allow(
            {**call.args, "trail": [*call.args["trail"], name]}, f"{name} was here"
        )

    return ToolMiddleware(name=name, on_tool_call=hook)


async def test_g12_links_run_in_declaration_order_seeing_prior_args() -> None:
    """G12: call-links run in chain order, each seeing the previous one's args."""
    seen: list[tuple[str, Any]] = []
    model, ran = one_call({"trail": []}), []
    agent = build(
        model, ran, trail_link("a", seen), trail_link("b", seen), trail_link("c", seen)
    )
    await agent.run("note it")
    assert [
        ("a", {"trail": []}),
        ("b", {"trail": ["a"]}),
        ("c", {"trail": ["a", "b"]}),
    ] == seen
    assert [{"trail": ["a", "b", "c"]}] == ran


async def test_g12_links_without_on_tool_call_are_skipped_and_file_no_row() -> None:
    """G12: a result-only link takes no part in the before-tool walk."""
    seen: list[tuple[str, Any]] = []
    result_only = ToolMiddleware(name="result-only", on_tool_result=lambda r: allow())
    model, ran = one_call({"trail": []}), []
    agent = build(model, ran, trail_link("a", seen), result_only, trail_link("c", seen))
    await agent.run("note it")
    assert [
        ("a", "before-tool"),
        ("c", "before-tool"),
        ("result-only", "after-tool"),
    ] == [(r["middleware"], r["moment"]) for r in ledger(agent)]
    assert [{"trail": ["a", "c"]}] == ran


async def test_g12_each_call_link_runs_once_per_dispatch() -> None:
    """G12: every call-link is invoked exactly once per dispatch of each call."""
    counts: dict[tuple[str, str], int] = {}

    def counting(name: str) -> ToolMiddleware:
        def hook(call: Any) -> Allow:
            key = (name, call.tool_call_id)
            counts[key] = counts.get(key, 0) + 1
            return allow()

        return ToolMiddleware(
            name=name, on_tool_call=hook, on_tool_result=lambda r: allow()
        )

    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="note", args={"n": 1}),
                    ToolCallRequest(id="c2", name="note", args={"n": 2}),
                ]
            ),
            Reply(tool_calls=[ToolCallRequest(id="c3", name="note", args={"n": 3})]),
            "Noted.",
        ]
    )
    ran: list[Any] = []
    agent = build(model, ran, counting("a"), counting("b"))
    await agent.run("note it")
    assert {(n, c): 1 for n in ("a", "b") for c in ("c1", "c2", "c3")} == counts


async def test_g12_links_before_an_asker_are_not_rerun_on_resume() -> None:
    """G12: across a pause and resume each call-link still runs exactly once."""
    counts = {"a": 0, "asker": 0, "c": 0}

    def counted(name: str, verdict: Any) -> ToolMiddleware:
        def hook(call: Any) -> Any:
            counts[name] += 1
            return verdict

        return ToolMiddleware(name=name, on_tool_call=hook)

    model, ran = one_call({"n": 1}), []
    agent = build(
        model,
        ran,
        counted("a", allow()),
        counted("asker", ask("ok?")),
        counted("c", allow()),
    )
    paused = await agent.run("note it")
    assert is_ask_pause(paused)
    assert {"a": 1, "asker": 1, "c": 0} == counts
    await agent.resume(paused.checkpoint, check_in_approved(by="dana"))
    assert ({"a": 1, "asker": 1, "c": 1}, [{"n": 1}]) == (counts, ran)


# -- G13 --------------------------------------------------------------------


async def test_g13_call_context_fields_for_a_later_call_in_a_batch() -> None:
    """G13: the context carries name, source, id, iteration, args, history, identity."""
    contexts: list[Any] = []

    def keep(call: Any) -> Allow:
        contexts.append(call)
        return allow()

    model = scripted(
        [
            Reply(
                content="Two notes.",
                tool_calls=[
                    ToolCallRequest(id="c1", name="note", args={"n": 1}),
                    ToolCallRequest(id="c2", name="note", args={"n": 2}),
                ],
            ),
            Reply(tool_calls=[ToolCallRequest(id="c3", name="note", args={"n": 3})]),
            "Noted.",
        ]
    )
    ran: list[Any] = []
    agent = build(model, ran, ToolMiddleware(name="keep", on_tool_call=keep))
    await agent.run("note twice")
    first_turn = Message(
        role="assistant",
        content="Two notes.",
        tool_calls=(
            ToolCallRequest(id="c1", name="note", args={"n": 1}),
            ToolCallRequest(id="c2", name="note", args={"n": 2}),
        ),
    )
    c1_message = Message(
        role="tool", content='{"noted":{"n":1}}', tool_call_id="c1", tool_name="note"
    )
    user = Message(role="user", content="note twice")
    c2 = contexts[1]
    assert ("note", None, "c2", 1, {"n": 2}, (user, first_turn, c1_message)) == (
        c2.tool_name,
        c2.tool_source,
        c2.tool_call_id,
        c2.iteration,
        c2.args,
        c2.history,
    )
    assert {"session_id": "session-1"} == dict(c2.identity)
    assert (user, first_turn) == contexts[0].history
    c3 = contexts[2]
    assert ("c3", 2, 5) == (c3.tool_call_id, c3.iteration, len(c3.history))


async def test_g13_identity_is_the_run_identity_when_given() -> None:
    """G13: identity is the mapping passed as run(..., identity=...)."""
    identities: list[Any] = []

    def keep(call: Any) -> Allow:
        identities.append(dict(call.identity))
        return allow()

    model, ran = one_call({"n": 1}), []
    agent = build(model, ran, ToolMiddleware(name="keep", on_tool_call=keep))
    await agent.run("note", identity={"user": "dana", "tenant": "acme"})
    assert [{"user": "dana", "tenant": "acme"}] == identities


async def test_g13_tool_source_is_the_tools_source() -> None:
    """G13: tool_source is Tool.source (None for @tool tools)."""
    sources: list[Any] = []

    def keep(call: Any) -> Allow:
        sources.append((call.tool_name, call.tool_source))
        return allow()

    @tool
    def local(n: int) -> int:
        """Local."""
        return n

    remote = Tool(
        "remote", "Remote.", {"type": "object"}, lambda **k: "ok", "crm-server"
    )
    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="local", args={"n": 1}),
                    ToolCallRequest(id="c2", name="remote", args={}),
                ]
            ),
            "done",
        ]
    )
    agent = (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .tool(local, remote)
        .tool_middleware(ToolMiddleware(name="keep", on_tool_call=keep))
        .build()
    )
    await agent.run("go")
    assert [("local", None), ("remote", "crm-server")] == sources


# -- G14 --------------------------------------------------------------------


def raiser(call: Any) -> Any:
    raise RuntimeError("rule crashed")


STOPPERS = {
    "deny": (lambda c: deny("stop here"), "stop here"),
    "malfunction": (
        lambda c: {"ok": True},
        "middleware 'link-{k}' returned a dict, which is not allow(), deny() or ask()",
    ),
    "throw": (raiser, "middleware 'link-{k}' threw: rule crashed"),
}


@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("kind", sorted(STOPPERS))
async def test_g14_first_non_allow_wins(kind: str, k: int) -> None:
    """G14: with N call-links and a refusal at index k, exactly k+1 run."""
    invoked: list[int] = []
    stopper, reason = STOPPERS[kind]

    def link(i: int) -> ToolMiddleware:
        def hook(call: Any) -> Any:
            invoked.append(i)
            return stopper(call) if i == k else allow()

        return ToolMiddleware(name=f"link-{i}", on_tool_call=hook)

    model, ran = one_call({"n": 1}), []
    agent = build(model, ran, *(link(i) for i in range(4)))
    assert "Noted." == await agent.run("note")
    assert (list(range(k + 1)), [], reason.format(k=k)) == (invoked, ran, read(model))
    outcomes = [r["outcome"] for r in ledger(agent)]
    assert ["allow"] * k + ["deny"] == outcomes


@pytest.mark.parametrize("k", [0, 1, 2, 3])
async def test_g14_an_ask_stops_the_walk(k: int) -> None:
    """G14: an ask at index k stops the walk with k+1 links run."""
    invoked: list[int] = []

    def link(i: int) -> ToolMiddleware:
        def hook(call: Any) -> Any:
            invoked.append(i)
            return ask("may I?") if i == k else allow()

        return ToolMiddleware(name=f"link-{i}", on_tool_call=hook)

    model, ran = one_call({"n": 1}), []
    agent = build(model, ran, *(link(i) for i in range(4)))
    out = await agent.run("note")
    assert (True, f"link-{k}", list(range(k + 1)), []) == (
        is_ask_pause(out),
        out.ask.middleware if is_ask_pause(out) else None,
        invoked,
        ran,
    )


async def test_g14_a_later_allow_cannot_overturn_a_refusal() -> None:
    """G14: a later link that would transform the arguments never runs."""
    overturn = ToolMiddleware(
        name="overturn", on_tool_call=lambda c: allow({"n": 2}, "let it through")
    )
    model, ran = one_call({"n": 1}), []
    agent = build(
        model,
        ran,
        ToolMiddleware(name="no", on_tool_call=lambda c: deny("no")),
        overturn,
    )
    await agent.run("note")
    assert ([], "no", ["no"]) == (
        ran,
        read(model),
        [r["middleware"] for r in ledger(agent)],
    )


# -- G15 --------------------------------------------------------------------


async def test_g15_denial_is_data_and_the_loop_continues() -> None:
    """G15: a deny files its row, skips the tool and after-walk, the model reads it."""
    after_calls: list[Any] = []
    guard = ToolMiddleware(
        name="guard",
        on_tool_call=lambda c: deny("notes about order 7 are sealed"),
        on_tool_result=lambda r: after_calls.append(r) or allow(),
    )
    model, ran = one_call({"order": 7}), []
    agent = build(model, ran, guard)
    recorder = Recorder()
    agent.attach(recorder)
    assert "Noted." == await agent.run("note it")
    assert ([], [], "notes about order 7 are sealed") == (ran, after_calls, read(model))
    assert [
        {
            "middleware": "guard",
            "moment": "before-tool",
            "at": "tool",
            "iteration": 1,
            "outcome": "deny",
            "changed": False,
            "tool_name": "note",
            "tool_call_id": "c1",
            "why": "notes about order 7 are sealed",
        }
    ] == ledger(agent)
    assert (2, 1, [], 0) == (
        len(model.requests),
        len(recorder.of("agent.turn_end")),
        recorder.of("error.fatal"),
        len(recorder.of("tool.dispatched")),
    )


# -- G16 --------------------------------------------------------------------


async def test_g16_transform_replaces_args_wholesale() -> None:
    """G16: allow(value, why) replaces the arguments, no merge."""
    swap = ToolMiddleware(
        name="swap", on_tool_call=lambda c: allow({"text": "hi"}, "redacted")
    )
    model, ran = one_call({"order": 7, "secret": "x"}), []
    agent = build(model, ran, swap)
    await agent.run("note")
    assert [{"text": "hi"}] == ran
    assert [
        {
            "middleware": "swap",
            "moment": "before-tool",
            "at": "tool",
            "iteration": 1,
            "outcome": "allow",
            "changed": True,
            "tool_name": "note",
            "tool_call_id": "c1",
            "why": "redacted",
            "before": {"order": 7, "secret": "x"},
            "after": {"text": "hi"},
            # G93: names only, the added ones first, then the removed ones.
            "changed_keys": ["text", "order", "secret"],
        }
    ] == ledger(agent)


async def test_g16_an_equal_transform_is_still_a_change() -> None:
    """G16: no equality test: allow(same_args, why) files changed=True."""
    same = ToolMiddleware(
        name="same", on_tool_call=lambda c: allow(dict(c.args), "re-checked")
    )
    model, ran = one_call({"n": 1}), []
    agent = build(model, ran, same)
    await agent.run("note")
    row = ledger(agent)[0]
    assert (True, {"n": 1}, {"n": 1}) == (row["changed"], row["before"], row["after"])


async def test_g16_each_row_records_the_args_it_replaced() -> None:
    """G16: before is the previous link's args, after the new value."""
    seen: list[tuple[str, Any]] = []
    model, ran = one_call({"trail": []}), []
    agent = build(model, ran, trail_link("a", seen), trail_link("b", seen))
    await agent.run("note")
    assert [
        ({"trail": []}, {"trail": ["a"]}),
        ({"trail": ["a"]}, {"trail": ["a", "b"]}),
    ] == [(r["before"], r["after"]) for r in ledger(agent)]


@pytest.mark.parametrize(
    ("value", "shaped"), [([1, 2], "a list"), ("text", "a str"), (5, "an int")]
)
async def test_g16_a_non_mapping_value_is_refused_by_validation(
    value: Any, shaped: str
) -> None:
    """G16: a non-mapping transform is passed on and refused by validation (G55)."""
    bad = ToolMiddleware(name="bad", on_tool_call=lambda c: allow(value, "reshape"))
    model, ran = one_call({"n": 1}), []
    agent = build(model, ran, bad)
    await agent.run("note")
    assert [] == ran
    assert (
        "Invalid arguments for tool 'note' — the call was not executed.\n"
        f"- arguments: expected an object, got {shaped}\n"
        "Fix the arguments to match the tool's input schema and call it again."
    ) == read(model)
    assert [(True, value)] == [(r["changed"], r["after"]) for r in ledger(agent)]


# -- G17 --------------------------------------------------------------------


async def test_g17_pass_through_rows() -> None:
    """G17: allow() files allow/unchanged without why; allow(None, why) adds why."""
    plain = ToolMiddleware(name="plain", on_tool_call=lambda c: allow())
    reasoned = ToolMiddleware(
        name="reasoned", on_tool_call=lambda c: allow(None, "in budget")
    )
    model, ran = one_call({"n": 1}), []
    agent = build(model, ran, plain, reasoned)
    await agent.run("note")
    base = {
        "moment": "before-tool",
        "at": "tool",
        "iteration": 1,
        "outcome": "allow",
        "changed": False,
        "tool_name": "note",
        "tool_call_id": "c1",
    }
    assert [
        {"middleware": "plain", **base},
        {"middleware": "reasoned", **base, "why": "in budget"},
    ] == ledger(agent)
    assert ([{"n": 1}], '{"noted":{"n":1}}') == (ran, read(model))
