"""Approve once: ask a person the first time a distinct call is made, then remember.

Pattern: one tool link and one watcher sharing a small memory. The link asks;
         the watcher reads the row the library files when the person answers;
         the link then lets the same call through with a pass-through that
         says whose decision it sailed through on.
Role:    a documented recipe (not part of the ``helmlog`` API); run it with
         ``uv run python examples/approve_once.py``.
Emits:   nothing itself; its rows and facts are the agent's.

Laws it leans on: G1/G17 (``allow(None, why)`` is a pass-through carrying a
reason: the row reads ``outcome="allow"``, ``changed=False``), G46/G62 (the
resume-side row of an approval is filed by the asking link with ``why`` exactly
``approved by <by>`` or ``approved by <by>: <note>``), G49 (each row's fact is
delivered once it is appended, in row order), G5 (no rule answers for a tool:
a remembered call still passes validation, check-in, ``execute`` and the
after-tool walk, and the model reads what the tool really returned).

The recipe::

    approvals = ApproveOnce()
    agent = (
        Agent.create(provider=..., model=...)
        .tool(refund)
        .tool_middleware(approvals.link)
        .watch(approvals.watcher)    # the hook: how it learns who approved
        .build()
    )
    out = await agent.run("Refund order 7")               # asks a person
    out = await agent.resume(out.checkpoint, check_in_approved(by="dana@ops"))
    # the same call later in this session passes, and its row says
    # why="approved earlier this session by dana@ops"

What counts as an approval: only the resume-side row this link's own ask
produced — ``middleware`` is this link's name, ``moment="before-tool"``,
``outcome="allow"``, for a call id this link asked about in that session,
with ``why`` reading ``approved by <by>[: <note>]``. A decline teaches nothing
(the next such call asks again), and so does a row from any other link: a
rule cannot approve on a person's behalf by writing the same words.

What a remembered approval is keyed on: the tool, its source and its
arguments (canonical JSON), within one session. An approval is of a thing —
this refund, this amount, this order. Dropping the arguments from the key is
one line and costs what it looks like: one approval then covers every call of
that tool for the rest of the session, amounts nobody has seen included.

Scope: the session, read from ``identity["session_id"]`` — which is what a run
gets when no ``identity=`` is passed. A run given an identity without a
``session_id`` is never remembered: it asks every time rather than share an
approval across sessions it cannot tell apart.

Under a redaction policy that names ``why`` (``conversation_redaction()``
does), the facts a watcher receives hold a placeholder, so they no longer say
who approved; the recipe then cannot learn and asks every time. It never
guesses an approver.

Why a watcher and not a return value from ``resume``: the row is the record
of the decision, filed by the library when the person answered; learning from
it means the memory can only ever hold what the ledger says happened. The
watcher also makes it idempotent: a fact seen twice (``(session_id, seq)``)
is read once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from helmlog import ToolCallContext, ToolMiddleware, allow, ask

APPROVED_BY = "approved by "
REMEMBERED = "approved earlier this session by {by}"


def call_key(call: ToolCallContext) -> str:
    """What a remembered approval is keyed on: tool, source and arguments."""
    return json.dumps(
        {"tool": call.tool_name, "source": call.tool_source, "args": call.args},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )


def approver(why: str | None) -> str | None:
    """Who approved, read from a resume-side row's ``why`` (G46), else ``None``.

    ``approved by <by>`` or ``approved by <by>: <note>``; a ``by`` that itself
    contains ``": "`` is read up to it, so give approvers plain identities.
    """
    if not isinstance(why, str) or not why.startswith(APPROVED_BY):
        return None
    by = why[len(APPROVED_BY) :].split(": ", 1)[0]
    return by or None


def session_of(identity: Mapping[str, Any] | None) -> str | None:
    """The session a call runs in, when its identity says so."""
    if isinstance(identity, Mapping):
        sid = identity.get("session_id")
        if isinstance(sid, str) and sid:
            return sid
    return None


class ApproveOnce:
    """Ask a person once per distinct call in a session; then pass, saying who.

    Attributes:
        name: the link's name, which its rows carry.
        link: the tool link to attach (``.tool_middleware(approvals.link)``).
        watcher: the hook that reads resume-side rows
            (``.watch(approvals.watcher)`` or ``agent.attach(...)``).
    """

    def __init__(self, name: str = "approve-once") -> None:
        self.name = name
        # (session, call id) -> key, for asks this link made and nobody answered.
        self._asked: dict[tuple[str, str], str] = {}
        # (session, key) -> who approved it.
        self._approved: dict[tuple[str, str], str] = {}
        self._seen: set[tuple[str, int]] = set()
        self.link = ToolMiddleware(name=name, on_tool_call=self.on_tool_call)
        self.watcher = _RowWatcher(self)

    def on_tool_call(self, call: ToolCallContext) -> Any:
        """Pass a call approved earlier in this session; ask about any other."""
        session = session_of(call.identity)
        key = call_key(call)
        if session is not None:
            by = self._approved.get((session, key))
            if by is not None:
                return allow(None, REMEMBERED.format(by=by))
            self._asked[(session, call.tool_call_id)] = key
        return ask(
            f"Approve {call.tool_name}({json.dumps(call.args, default=repr)})?",
            {"tool": call.tool_name, "source": call.tool_source, "args": call.args},
        )

    def learn(self, session_id: str, row: Any) -> None:
        """Read one row (or its fact); only this link's approval rows teach.

        ``row`` needs ``middleware``, ``moment``, ``outcome``, ``tool_call_id``
        and ``why`` — a ``MiddlewareDecision`` or a ``middleware.decision``
        event.
        """
        if row.middleware != self.name or row.moment != "before-tool":
            return
        if row.outcome == "ask" or row.tool_call_id is None:
            return
        key = self._asked.pop((session_id, row.tool_call_id), None)
        if key is None:
            return
        by = approver(row.why) if row.outcome == "allow" else None
        if by is not None:
            self._approved[(session_id, key)] = by

    def approved_by(self, session_id: str, call: ToolCallContext) -> str | None:
        """Who approved this call earlier in ``session_id``, if anyone."""
        return self._approved.get((session_id, call_key(call)))

    def _on_fact(self, event: Any) -> None:
        if getattr(event, "type", None) != "middleware.decision":
            return
        seq = event.seq
        if seq is not None:
            if (event.session_id, seq) in self._seen:
                return
            self._seen.add((event.session_id, seq))
        self.learn(event.session_id, event)


class _RowWatcher:
    """The hook: hands every decision fact to its ``ApproveOnce``."""

    def __init__(self, owner: ApproveOnce) -> None:
        self._owner = owner
        self.id = f"approve-once:{owner.name}:{id(owner)}"

    def on_event(self, event: Any) -> None:
        self._owner._on_fact(event)


async def main() -> None:
    """Two refunds of order 7 in one session: the first asks, the second does not."""
    from helmlog import Agent, check_in_approved, is_ask_pause, tool
    from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

    @tool
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        return f"refunded {amount} on order {order}"

    def refund_turn(cid: str) -> Reply:
        args = {"order": 7, "amount": 25.0}
        return Reply(tool_calls=[ToolCallRequest(id=cid, name="refund", args=args)])

    approvals = ApproveOnce()
    model = scripted([refund_turn("c1"), "Refunded.", refund_turn("c2"), "Again."])
    agent = (
        Agent.create(provider=model, model="small-model")
        .system("You refund orders.")
        .tool(refund)
        .tool_middleware(approvals.link)
        .watch(approvals.watcher)
        .build()
    )
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
