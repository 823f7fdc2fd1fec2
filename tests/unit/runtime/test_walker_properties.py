"""Property tests of the tool walkers: no verdict lets a hook answer for a tool.

Pattern: Hypothesis draws a chain (1–4 links, each with a before-tool and/or
         an after-tool hook, plain or async) and what every hook does —
         ``allow()``, ``allow(None, why)``, ``allow(value, why)``, ``deny``,
         ``ask``, ``None``/dict/str/look-alike returns, or a raise — plus how a
         person answers a pause. The run is real (scripted provider, a real
         tool); a small independent oracle says what must happen.
Role:    property tests for ``runtime/_chain.py`` (``walk_tool_calls``,
         ``walk_tool_results``) as the loop and the resume path drive them.
Emits:   nothing.

Laws: G5 (what the model reads for a call is the real tool's output as the
after-tool chain let it through, or a refusal — never a value a hook produced
for a call that did not run), G6 (anything but an outcome is a denial), G7 (a
throw is a denial), G12/G14 (each call-link once, the first non-allow wins:
the links invoked are exactly a prefix), G15–G17, G20–G24 (the onion; after-
tool refusals are changes), G49 (no delivered fact carries a value), G62/G64
(approval continues from the next link; a later ask is a denial; a decline is
a denial).

Why an oracle rather than only invariants: "the model reads the real output
or a refusal" is only as strong as knowing which refusal and which output;
the oracle is a dozen lines that restate the laws, not the walker's code.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog import (
    Agent,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    check_in_declined,
    deny,
    is_ask_pause,
)
from helmlog.events import MiddlewareDecisionEvent, shape
from helmlog.events.lowlevel import compact_json
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

ORIGINAL = {"n": 1}
REAL = "REAL-OUTPUT"
VALUE_MARKERS = ("HOOK-", REAL)

CALL_KINDS = (
    "allow",
    "allow_why",
    "transform",
    "deny",
    "ask",
    "none",
    "dict",
    "str",
    "lookalike",
    "raise",
    "raise_empty",
)
RESULT_KINDS = CALL_KINDS


class Silent(Exception):
    """Raised with no text: the reason names the class."""


class LookAlike:
    """Has an Allow's attributes and its name; is not one."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.why = "trust me"


LookAlike.__name__ = "Allow"


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """What one hook does."""

    kind: str
    value: Any = None
    is_async: bool = False


@dataclasses.dataclass(frozen=True)
class LinkPlan:
    on_call: Behaviour | None
    on_result: Behaviour | None


CALL_VALUES = st.sampled_from(
    [{"v": "HOOK-ARG"}, {}, ["HOOK-ARG"], "HOOK-ARG", 0, False]
)
RESULT_VALUES = st.sampled_from(
    ["HOOK-RES", {"h": "HOOK-RES"}, "", 0, False, ["HOOK-RES"]]
)


def behaviours(kinds: tuple[str, ...], values: st.SearchStrategy[Any]) -> Any:
    return st.builds(
        Behaviour, kind=st.sampled_from(kinds), value=values, is_async=st.booleans()
    )


LINK = st.builds(
    LinkPlan,
    on_call=st.none() | behaviours(CALL_KINDS, CALL_VALUES),
    on_result=st.none() | behaviours(RESULT_KINDS, RESULT_VALUES),
).filter(lambda p: p.on_call is not None or p.on_result is not None)

DECISIONS = st.sampled_from(
    [
        check_in_approved(by="dana"),
        check_in_approved(by="dana", note="fine"),
        check_in_declined(by="lee"),
        check_in_declined(by="lee", note="too risky"),
    ]
)


# -- the hooks under test ---------------------------------------------------


def verdict(b: Behaviour, i: int, moment: str) -> Any:
    """What a hook of kind ``b.kind`` returns (or raises)."""
    if b.kind == "allow":
        return allow()
    if b.kind == "allow_why":
        return allow(None, f"WHY-{i}")
    if b.kind == "transform":
        return allow(b.value, f"XF-{moment}-{i}")
    if b.kind == "deny":
        return deny(f"REASON-{moment}-{i}")
    if b.kind == "ask":
        return ask(f"QUESTION-{moment}-{i}")
    if b.kind == "none":
        return None
    if b.kind == "dict":
        return {"value": "HOOK-FAKE", "why": "x"}
    if b.kind == "str":
        return "HOOK-FAKE"
    if b.kind == "lookalike":
        return LookAlike("HOOK-FAKE")
    if b.kind == "raise":
        raise ValueError(f"BOOM-{moment}-{i}")
    raise Silent()


def make_hook(b: Behaviour, i: int, moment: str, log: list[tuple[str, int]]) -> Any:
    def plain(ctx: Any) -> Any:
        log.append((moment, i))
        return verdict(b, i, moment)

    async def later(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return plain(ctx)

    return later if b.is_async else plain


def build_links(
    plans: list[LinkPlan], log: list[tuple[str, int]]
) -> list[ToolMiddleware]:
    return [
        ToolMiddleware(
            name=f"L{i}",
            on_tool_call=make_hook(p.on_call, i, "before-tool", log)
            if p.on_call
            else None,
            on_tool_result=(
                make_hook(p.on_result, i, "after-tool", log) if p.on_result else None
            ),
        )
        for i, p in enumerate(plans)
    ]


# -- the oracle -------------------------------------------------------------


def refusal(b: Behaviour, i: int, moment: str) -> str | None:
    """The reason a hook's verdict refuses with, or ``None`` for an allow/ask."""
    name = f"L{i}"
    if b.kind == "deny":
        return f"REASON-{moment}-{i}"
    if b.kind in ("none", "dict", "str", "lookalike"):
        returned = {"none": None, "dict": {}, "str": "", "lookalike": LookAlike(None)}
        return (
            f"middleware '{name}' returned {shape(returned[b.kind])}, which is not "
            "allow(), deny() or ask()"
        )
    if b.kind == "raise":
        return f"middleware '{name}' threw: BOOM-{moment}-{i}"
    if b.kind == "raise_empty":
        return f"middleware '{name}' threw: Silent"
    return None


def no_pause(i: int, question: str) -> str:
    return (
        f"middleware 'L{i}' asked a person to decide, and there is no pause here to "
        f"carry that ask: {question}"
    )


def render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "(this tool returned no value)" if value is None else compact_json(value)


@dataclasses.dataclass
class Expected:
    reads: str = ""
    rows: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    log: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    ran: list[Any] = dataclasses.field(default_factory=list)
    paused_at: int | None = None


def oracle(plans: list[LinkPlan], decision: Any) -> Expected:
    """What G12–G24 and G62–G64 say happens to one call through ``plans``."""
    out = Expected()
    args: Any = ORIGINAL
    ask_allowed = True
    for i, p in enumerate(plans):
        b = p.on_call
        if b is None:
            continue
        out.log.append(("before-tool", i))
        row = (f"L{i}", "before-tool")
        reason = refusal(b, i, "before-tool")
        if b.kind == "ask" and ask_allowed:
            out.rows.append(
                (*row, "ask", False, f"QUESTION-before-tool-{i}", None, None)
            )
            out.paused_at = i
            if not decision.approved:
                why = f"declined by {decision.by}" + (
                    f": {decision.note}" if decision.note else ""
                )
                out.rows.append((*row, "deny", False, why, None, None))
                out.reads = "declined by human" + (
                    f": {decision.note}" if decision.note else ""
                )
                return out
            why = f"approved by {decision.by}" + (
                f": {decision.note}" if decision.note else ""
            )
            out.rows.append((*row, "allow", False, why, None, None))
            ask_allowed = False
            continue
        if b.kind == "ask":
            reason = no_pause(i, f"QUESTION-before-tool-{i}")
        if reason is not None:
            out.rows.append((*row, "deny", False, reason, None, None))
            out.reads = reason
            return out
        if b.kind == "transform":
            out.rows.append((*row, "allow", True, f"XF-before-tool-{i}", args, b.value))
            args = b.value
        else:
            why = f"WHY-{i}" if b.kind == "allow_why" else None
            out.rows.append((*row, "allow", False, why, None, None))
    if not isinstance(args, dict):
        out.reads = (
            "Invalid arguments for tool 'note' — the call was not executed.\n"
            f"- arguments: expected an object, got {shape(args)}\n"
            "Fix the arguments to match the tool's input schema and call it again."
        )
        return out
    out.ran.append(args)
    result: Any = {"ran": args, "token": REAL}
    for i in reversed(range(len(plans))):
        b = plans[i].on_result
        if b is None:
            continue
        out.log.append(("after-tool", i))
        row = (f"L{i}", "after-tool")
        reason = refusal(b, i, "after-tool")
        if b.kind == "ask":
            reason = no_pause(i, f"QUESTION-after-tool-{i}")
        if reason is not None:
            out.rows.append((*row, "deny", True, reason, result, reason))
            out.reads = reason
            return out
        if b.kind == "transform":
            out.rows.append(
                (*row, "allow", True, f"XF-after-tool-{i}", result, b.value)
            )
            result = b.value
        else:
            why = f"WHY-{i}" if b.kind == "allow_why" else None
            out.rows.append((*row, "allow", False, why, None, None))
    out.reads = render(result)
    return out


# -- the run ----------------------------------------------------------------


@dataclasses.dataclass
class Observed:
    reads: str
    rows: list[tuple[Any, ...]]
    log: list[tuple[str, int]]
    ran: list[Any]
    facts: list[Any]
    paused_at: int | None


async def run_chain(plans: list[LinkPlan], decision: Any) -> Observed:
    log: list[tuple[str, int]] = []
    ran: list[Any] = []

    def execute(**kwargs: Any) -> dict[str, Any]:
        ran.append(kwargs)
        return {"ran": kwargs, "token": REAL}

    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="note", args=dict(ORIGINAL))]
            ),
            "Done.",
        ]
    )
    agent = (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .tool(Tool("note", "Take a note.", {"type": "object"}, execute))
        .tool_middleware(*build_links(plans, log))
        .build()
    )
    facts: list[Any] = []
    agent.on("middleware.decision", facts.append)
    out = await agent.run("note it")
    paused_at = None
    if is_ask_pause(out):
        paused_at = int((out.ask.middleware or "L-1")[1:])
        out = await agent.resume(out.checkpoint.to_json(), decision)
    assert "Done." == out
    reads = [
        m.content
        for m in model.requests[1].messages
        if m.role == "tool" and m.tool_call_id == "c1"
    ]
    assert 1 == len(reads)
    rows = [
        (r.middleware, r.moment, r.outcome, r.changed, r.why, r.before, r.after)
        for r in agent.last_snapshot().middleware_decisions
    ]
    return Observed(reads[0], rows, log, ran, facts, paused_at)


def hook_values(plans: list[LinkPlan]) -> list[str]:
    """Every value a hook produced, rendered as the model would read it."""
    values = []
    for p in plans:
        for b in (p.on_call, p.on_result):
            if b is not None and b.kind == "transform":
                values.append(render(b.value))
    return values


@settings(max_examples=300, deadline=None)
@given(plans=st.lists(LINK, min_size=1, max_size=4), decision=DECISIONS)
def test_g05_the_model_reads_the_real_output_or_a_refusal(
    plans: list[LinkPlan], decision: Any
) -> None:
    """G5/G14/G49: for any chain the model reads real output or a refusal."""
    seen = asyncio.run(run_chain(plans, decision))
    want = oracle(plans, decision)

    # The oracle's account of the call: what was read, filed, invoked and run.
    assert want.reads == seen.reads
    assert want.rows == seen.rows
    assert want.log == seen.log
    assert want.ran == seen.ran
    assert want.paused_at == seen.paused_at

    # G5 stated directly: a call that did not run reads no hook's value.
    if not seen.ran:
        assert "HOOK-" not in seen.reads
        assert seen.reads not in hook_values(plans)
        assert [] == [r for r in seen.rows if r[1] == "after-tool"]

    # G12/G14: the call-links invoked are exactly a prefix of the call-links,
    # each once, and only the last of them can have stopped the walk.
    call_links = [i for i, p in enumerate(plans) if p.on_call is not None]
    invoked = [i for moment, i in seen.log if moment == "before-tool"]
    assert call_links[: len(invoked)] == invoked

    # G49: one fact per row, with no value field and no value in any field.
    assert len(seen.rows) == len(seen.facts)
    fields = set(MiddlewareDecisionEvent.__struct_fields__)
    assert (False, False) == ("before" in fields, "after" in fields)
    for fact in seen.facts:
        assert MiddlewareDecisionEvent is type(fact)
        encoded = msgspec.json.encode(fact).decode()
        assert [] == [m for m in VALUE_MARKERS if m in encoded]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in seen.rows] == [
        (f.middleware, f.moment, f.outcome, f.changed, f.why) for f in seen.facts
    ]
