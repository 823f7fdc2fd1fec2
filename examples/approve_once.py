"""Approve once: ask a person the first time a distinct call is made, then remember.

Pattern: ``helmlog.rules.approve_once()`` guarding one consequential tool.
         It asks; a person approves; the same call later in the session
         passes with a pass-through row that says whose decision it sailed
         through on. Its memory is the session's own stream, not the link.
Role:    a documented example (not part of the ``helmlog`` API); run it with
         ``uv run python examples/approve_once.py``.
Emits:   nothing itself; its rows and facts are the agent's.

Laws it leans on: G17 (``allow(None, why)`` is a pass-through carrying a
reason: the row reads ``outcome="allow"``, ``changed=False``), G46/G62 (the
approval files ``approved by <by>[: <note>]`` and the walk goes on at the
next link), G66 (a second identical call later in the same batch passes),
G5 (no rule answers for a tool: a remembered call still passes validation,
check-in, ``execute`` and the after-tool walk), G86 (under
``conversation_redaction()`` it still remembers: it keys on the digest of the
arguments that ``pause.request`` records, never on a redacted value).

The recipe::

    agent = (
        Agent.create(provider=..., model=...)
        .tool(refund)
        .act(before_tool=[approve_once(tools={"refund"})])
        .build()
    )
    out = await agent.run("Refund order 7")                # asks a person
    out = await agent.resume(out.checkpoint, check_in_approved(by="dana@ops"))
    # the same call later in this session passes, and its row says
    # why="approved earlier this session by dana@ops"

What counts as an approval: only a person's answer, recorded by the library,
to this link's own ask in this session (``ToolCallContext.approvals``). A
decline teaches nothing, and neither does any row's wording.

What a remembered approval is keyed on: the tool, its source and its
arguments (``key="call"``, the default). ``approve_once(key="tool")`` drops
the arguments, and costs what it looks like: one approval then covers every
call of that tool for the rest of the session, amounts nobody has seen
included.

Why it survives eviction, failover and redaction: the approvals are folded
from the session's stream, so a host that dropped the session, another host
that rebuilt it with the agent's factory, or a stream whose ``why``s are
redacted folds the same approvals back.
"""

from __future__ import annotations

from typing import Any

from helmlog import Agent, tool
from helmlog.rules import TrustKey, approve_once


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on order {order}"


def refund_desk(
    model: Any,
    *,
    key: TrustKey = "call",
    refund_tool: Any = refund,
    links: tuple[Any, ...] = (),
    **options: Any,
) -> Agent:
    """An agent whose refunds a person approves once per distinct call.

    ``links`` are tool links walked before the approval gate;
    ``options`` go to ``Agent.create`` (``store=``, ``redact=``, ``ids=``...).
    """
    return (
        Agent.create(provider=model, model="small-model", **options)
        .system("You refund orders.")
        .tool(refund_tool)
        .tool_middleware(*links)
        .act(before_tool=[approve_once(key=key, tools={"refund"})])
        .build()
    )


async def main() -> None:
    """Two refunds of order 7 in one session: the first asks, the second does not."""
    from helmlog import check_in_approved, is_ask_pause
    from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

    def refund_turn(cid: str) -> Reply:
        args = {"order": 7, "amount": 25.0}
        return Reply(tool_calls=[ToolCallRequest(id=cid, name="refund", args=args)])

    model = scripted([refund_turn("c1"), "Refunded.", refund_turn("c2"), "Again."])
    agent = refund_desk(model)
    out = await agent.run("Refund order 7")
    if is_ask_pause(out):
        print("asked:", out.ask.question)
        out = await agent.resume(out.checkpoint, check_in_approved(by="dana@ops"))
    print("answer:", out)
    print("answer:", await agent.follow_up("Refund order 7 again"))
    for row in agent.last_snapshot().middleware_decisions:
        print(f"  {row.middleware} {row.tool_call_id} {row.outcome}: {row.why}")


if __name__ == "__main__":
    import asyncio

    asyncio.run(main())
