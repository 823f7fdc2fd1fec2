"""A hook's context copies its values on first read, and the copy is the hook's (G8).

Pattern: law-named tests through the public API (a scripted model, real
         tools and links), on the copy a context takes when its hook first
         reads a field rather than when it is built (issue 29 item 3).
Role:    unit tests for runtime/_context.py and the walkers in runtime/_chain.py.

Laws: G8 (each hook its own deep copy of args, result, history and identity),
G13, G21 (what the contexts hold), issue 29 item 3 (contexts copied only
where a rule can see them change).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from helmlog import Agent, ToolCallContext, ToolMiddleware, allow, tool
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

ARGS = {"order": 7, "lines": [{"sku": "a", "qty": 1}]}


def build(links: list[ToolMiddleware], ran: list[Any]) -> Agent:
    @tool(inline=True)
    def lookup(order: int, lines: list[dict[str, Any]]) -> dict[str, Any]:
        """Look an order up."""
        ran.append({"order": order, "lines": lines})
        lines[0]["qty"] = 99  # a tool that mutates what it was handed
        return {"order": order, "status": "ok", "lines": lines}

    model = scripted(
        [
            Reply(tool_calls=[ToolCallRequest(id="c1", name="lookup", args=ARGS)]),
            "done",
        ]
    )
    return (
        Agent.create(provider=model, model="m")
        .tool(lookup)
        .tool_middleware(*links)
        .build()
    )


async def test_g8_a_context_read_after_the_tool_ran_holds_the_args_it_was_given() -> (
    None
):
    """G8, G13: a hook that keeps its context and reads it only after the tool
    ran (and mutated its own arguments) and after a later link rewrote them
    reads the arguments as they stood at its own call, once, unchanged."""
    kept: list[Any] = []

    def keeper(call: Any) -> Any:
        kept.append(call)  # read nothing now
        return allow()

    def rewriter(call: Any) -> Any:
        return allow({**call.args, "order": 8}, "renumbered")

    ran: list[Any] = []
    agent = build(
        [
            ToolMiddleware(name="keeper", on_tool_call=keeper),
            ToolMiddleware(name="rewriter", on_tool_call=rewriter),
        ],
        ran,
    )
    assert "done" == await agent.run("look order 7 up")
    (ctx,) = kept
    assert (ARGS, [{"order": 8, "lines": [{"sku": "a", "qty": 99}]}]) == (
        ctx.args,
        ran,
    )
    assert ctx.args is ctx.args  # one copy, kept for the hook


async def test_g8_hooks_that_read_and_mutate_each_get_their_own_copies() -> None:
    """G8, G21: every hook that reads args, result, history or identity gets
    its own copy; one hook's mutations reach no other hook, nor the tool."""
    seen: list[Any] = []

    def vandal(call: Any) -> Any:
        call.args["lines"][0]["qty"] = -1
        call.identity["session_id"] = "forged"
        seen.append(("vandal", call.args["lines"][0]["qty"]))
        return allow()

    def witness(call: Any) -> Any:
        seen.append(("witness", call.args, dict(call.identity)["session_id"]))
        return allow()

    def result_vandal(res: Any) -> Any:
        res.result["status"] = "forged"
        res.args["order"] = 0
        return allow()

    def result_witness(res: Any) -> Any:
        seen.append(("result", res.result["status"], res.args["order"]))
        return allow()

    ran: list[Any] = []
    agent = build(
        [
            ToolMiddleware(
                name="witness", on_tool_call=witness, on_tool_result=result_witness
            ),
            ToolMiddleware(
                name="vandal", on_tool_call=vandal, on_tool_result=result_vandal
            ),
        ],
        ran,
    )
    assert "done" == await agent.run("look order 7 up", session_id="s-1")
    assert [
        ("witness", ARGS, "s-1"),
        ("vandal", -1),
        ("result", "ok", 7),
    ] == seen
    assert [{"order": 7, "lines": [{"sku": "a", "qty": 99}]}] == ran


def test_g8_a_context_built_directly_is_a_frozen_value_with_its_own_copies() -> None:
    """G8, G13: a context built by hand (as a hosted link's is) reads its
    own copy of the arguments, keeps it for its hook, and compares and
    replaces by value as a frozen dataclass."""
    args = {"order": 7, "lines": [1]}
    ctx = ToolCallContext("t", None, "c", 1, args, (), {"session_id": "s"})
    ctx.args["lines"].append(2)  # the hook's copy, kept across reads
    assert ({"order": 7, "lines": [1, 2]}, {"order": 7, "lines": [1]}) == (
        ctx.args,
        args,
    )
    same = ToolCallContext("t", None, "c", 1, ctx.args, (), {"session_id": "s"})
    assert (same, "u") == (ctx, dataclasses.replace(ctx, tool_name="u").tool_name)
