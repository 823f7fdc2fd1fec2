"""A refund agent built the same way in two processes, for portable checkpoints.

Pattern: a test program: ``python -m tests.unit.runtime.portable_agent``
         reads a pause checkpoint's JSON on stdin, resumes it with an approval
         on a fresh default (in-memory) store, and prints one JSON line: the
         answer or the refusal, what the tool ran with, and the stream.
Role:    test helper for ``test_portable_checkpoints.py`` (R9, issue 8
         item 6): the second process of "another process on the default
         in-memory store".
Emits:   one JSON line on stdout when run as a program.

Why a before-tool transform sits before the asking link: the arguments as
they stood when the run paused (amount capped to 500) differ from what the
model proposed (900) and from what the history holds; a faithful import must
run the tool with the former.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from helmlog import (
    Agent,
    AskPause,
    HelmlogError,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
)
from helmlog.events import MemoryEventStore, fold, verify_chain
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}
CAP = 500


def build(
    store: MemoryEventStore, ran: list[dict[str, Any]], *, resuming: bool = False
) -> Agent:
    """The agent both processes build: cap, then four-eyes, then a passer.

    ``resuming``: the model's script starts after the paused call (a process
    that resumes never saw the model propose it).
    """

    def refund(order: int, amount: float) -> str:
        ran.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    proposal = Reply(
        tool_calls=[
            ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 900})
        ]
    )
    model = scripted(["Refunded."] if resuming else [proposal, "Refunded."])
    cap = ToolMiddleware(
        name="cap",
        on_tool_call=lambda c: allow(
            {**c.args, "amount": min(c.args["amount"], CAP)}, "capped the amount"
        ),
    )
    four_eyes = ToolMiddleware(
        name="four-eyes", on_tool_call=lambda c: ask("Approve this refund?")
    )
    after = ToolMiddleware(name="after", on_tool_call=lambda c: allow())
    return (
        Agent.create(provider=model, model="m", ids=counter_ids(), store=store)
        .system("You refund.")
        .tool(Tool("refund", "Refund an order.", SCHEMA, refund))
        .tool_middleware(cap, four_eyes, after)
        .build()
    )


def chain_key() -> bytes | None:
    """The chain key from ``HELMLOG_TEST_CHAIN_KEY``, if set."""
    key = os.environ.get("HELMLOG_TEST_CHAIN_KEY")
    return key.encode() if key else None


async def pause(store: MemoryEventStore) -> AskPause:
    """Run the agent until it pauses on four-eyes."""
    out = await build(store, []).run("refund order 7")
    assert isinstance(out, AskPause)
    return out


async def resume(text: str, key: bytes | None = None) -> dict[str, Any]:
    """Resume ``text`` on a fresh default store; what happened, as JSON."""
    store = MemoryEventStore(chain_key=key)
    ran: list[dict[str, Any]] = []
    agent = build(store, ran, resuming=True)
    try:
        answer = await agent.resume(text, check_in_approved(by="dana"))
    except HelmlogError as exc:
        return {
            "refused": getattr(exc, "reason", exc.code),
            "ran": ran,
            "sessions": await store.sessions(),
        }
    sid = agent.session_id
    assert sid is not None
    records = await store.read(sid)
    events = [r.decode() for r in records]
    state = agent._sessions[sid].journal.folder.state()
    first = events[0]
    return {
        "answer": answer if isinstance(answer, str) else f"paused: {answer.kind}",
        "ran": ran,
        "types": [e.type for e in events],
        "first": {
            "kind": getattr(first, "kind", None),
            "checkpoint_digest": getattr(first, "checkpoint_digest", None),
            "checkpoint_seq": getattr(first, "checkpoint_seq", None),
        },
        "verified": verify_chain(records, store.chain_key) is None,
        "fold_matches": fold(events) == state,
    }


if __name__ == "__main__":
    result = asyncio.run(resume(sys.stdin.read(), chain_key()))
    sys.stdout.write(json.dumps(result) + "\n")
