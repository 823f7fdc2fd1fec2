"""Session approvals fold back from the stream on every store (issue 22).

Pattern: the contract suite's parametrized ``store`` (memory, Redis, Redis
         Cluster, on real servers): a session's ask is approved by one agent,
         its stream is read back and folded, and a fresh agent on the same
         store continues the session and remembers the approval.
Role:    contract tests of what ``helmlog.rules.approve_once`` stands on: the
         ``Approval`` the fold projects from a stored ``pause.request`` (with
         its ``tool_source``) and the ``pause.resume`` approving it.
Emits:   nothing.

Laws: R1 (the stream is the truth: a fresh agent folds the same approvals),
R11 (every adapter passes the same suite), G17 (the remembered call passes
with a why naming the approver), issue 22.
"""

from __future__ import annotations

from typing import Any

from helmlog import Agent, AskPause, Tool, check_in_approved
from helmlog.events import Approval, EventStore, Folder, open_event_store
from helmlog.events.lowlevel import digest
from helmlog.rules import approve_once
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted

ARGS = {"order": 7, "amount": 25.0}


def _desk(request: ProviderRequest) -> Reply | str:
    if request.messages[-1].role == "tool":
        return "done"
    return Reply(tool_calls=[ToolCallRequest(id="c1", name="refund", args=ARGS)])


def _refund(order: int, amount: float) -> str:
    return f"refunded {amount} on {order}"


REFUND = Tool(
    "refund",
    "Refund an order.",
    {
        "type": "object",
        "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
        "required": ["order", "amount"],
    },
    _refund,
    source="crm",
)


def _agent(store: EventStore) -> Agent:
    return (
        Agent.create(provider=scripted(respond=_desk), model="m", store=store)
        .tool(REFUND)
        .act(before_tool=[approve_once()])
        .build()
    )


async def test_issue22_approvals_fold_back_from_the_stored_stream(
    store_url: str,
) -> None:
    """R1/R11: the approval folds from the stored stream, source included, and
    a fresh agent continuing the session passes the same call, naming who."""
    store = open_event_store(store_url)
    try:
        await _approved_and_remembered(store)
    finally:
        await store.close()


async def _approved_and_remembered(store: EventStore) -> None:
    first = await _agent(store).turn("refund 7")
    assert isinstance(first.value, AskPause)
    assert first.checkpoint is not None
    sid = first.session_id
    assert "done" == await _agent(store).resume(
        first.checkpoint, check_in_approved(by="dana@ops")
    )

    folder = Folder()
    for record in await store.read(sid):
        folder.apply(record.decode())
    assert (
        Approval(
            middleware="approve-once",
            tool_name="refund",
            tool_source="crm",
            args_digest=digest(ARGS),
            by="dana@ops",
            tool_call_id="c1",
            seq=first.checkpoint.seq,
        ),
    ) == folder.approvals

    again = _agent(store)
    assert "done" == await again.run("refund 7 again", session_id=sid)
    last: Any = again.last_snapshot().middleware_decisions[-1]
    assert ("approve-once", "allow", "approved earlier this session by dana@ops") == (
        last.middleware,
        last.outcome,
        last.why,
    )
