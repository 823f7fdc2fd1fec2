"""Session trust: ask a person once per distinct call, then remember.

Pattern: a before-tool link with no memory of its own: it remembers through
         ``ToolCallContext.approvals``, folded from the session's stream.
Role:    the face, behind ``helmlog.rules``; public ``helmlog.runtime`` and
         ``helmlog.events`` only.
Emits:   nothing itself; each ask and remembered pass is a row and a fact.

Laws: G17 (a remembered call passes with a reason), G62, G66, G5, G7, G49
(the question quotes no argument), R21/R22/G86 (the memory survives).

Why the memory is the stream: failover, eviction and redaction fold the same
approvals, and only the library records a ``pause.resume``, so a rule cannot
approve for a person. More: docs/design.md.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from helmlog.events import Approval
from helmlog.events.lowlevel import digest
from helmlog.runtime import Allow, Ask, ToolCallContext, allow, ask

TrustKey = Literal["call", "tool"]

REMEMBERED = "approved earlier this session by {by}"

_QUESTIONS: dict[str, str] = {
    "call": (
        "Approve this call to '{tool}'? The same call, with the same "
        "arguments, will not be asked about again in this session."
    ),
    "tool": (
        "Approve calls to '{tool}'? No call to it, with any arguments, will be "
        "asked about again in this session."
    ),
}


class ApproveOnce:
    """Ask a person once per distinct call in a session; then pass, saying who.

    Args:
        name: the link's name. Only approvals of asks filed under this name
            count, so two ``ApproveOnce`` links remember apart.
        key: what a remembered approval covers.

            - ``"call"`` (the default): the tool, its ``tool_source`` and its
              arguments (as they stand at this link, compared by digest). An
              approval is of a thing: this refund, this amount, this order.
            - ``"tool"``: the tool and its ``tool_source`` only. One approval
              then covers every call of that tool for the rest of the
              session, arguments nobody has seen included: a fair trade for a
              read-only lookup, a bad one for anything that moves money or
              deletes.
        tools: the tool names it guards; other tools pass with a plain
            ``allow()``. ``None`` guards every tool.
        question: the question asked; ``{tool}`` is replaced by the tool's
            name. The default says what the approval will cover. It becomes
            the ask row's ``why``, a fact every watcher sees, so it should
            quote no argument (G49); the arguments ride the ask's ``detail``
            (``{"tool", "tool_source", "args", "key"}``).
        timeout_s: how long a person has before the ask is declined by
            timeout (``ask(..., timeout_s=)``); ``None`` for no deadline.

    What it remembers is ``call.approvals``: the asks of this session that a
    person approved, as the session's stream records them. A decline teaches
    nothing (the same call asks again), and a new session starts with none.
    Over MCP, or hosted by a ``PolicyActor``, a call has no session
    approvals, so it asks every time: it fails towards asking.
    """

    def __init__(
        self,
        name: str = "approve-once",
        *,
        key: TrustKey = "call",
        tools: Collection[str] | None = None,
        question: str | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if key not in _QUESTIONS:
            raise ValueError(f"{name}: key must be 'call' or 'tool', not {key!r}")
        if isinstance(tools, str):
            raise ValueError(f"{name}: tools is a collection of names, not a str")
        if question is not None and (not isinstance(question, str) or not question):
            raise ValueError(f"{name}: question must be a non-empty str")
        self.name = name
        self.key: TrustKey = key
        self.tools = None if tools is None else frozenset(tools)
        self.question = question or _QUESTIONS[key]
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"ApproveOnce(name={self.name!r}, key={self.key!r})"

    def on_tool_call(self, call: ToolCallContext) -> Allow | Ask:
        """Pass a call a person approved earlier in this session; ask otherwise."""
        if self.tools is not None and call.tool_name not in self.tools:
            return allow()
        found = self.approval_of(call)
        if found is not None:
            return allow(None, REMEMBERED.format(by=found.by))
        return ask(
            self.question.replace("{tool}", call.tool_name),
            {
                "tool": call.tool_name,
                "tool_source": call.tool_source,
                "args": call.args,
                "key": self.key,
            },
            timeout_s=self.timeout_s,
        )

    def approval_of(self, call: ToolCallContext) -> Approval | None:
        """The first approval of this link's asks that covers ``call``, if any."""
        wanted: str | None = None
        for approval in call.approvals:
            if (
                approval.middleware != self.name
                or approval.tool_name != call.tool_name
                or approval.tool_source != call.tool_source
            ):
                continue
            if self.key == "tool":
                return approval
            if wanted is None:
                # The digest ``pause.request`` recorded for the arguments at
                # the asking link, which is what this link sees as ``args``.
                wanted = digest(call.args)
            if approval.args_digest == wanted:
                return approval
        return None


def approve_once(
    name: str = "approve-once",
    *,
    key: TrustKey = "call",
    tools: Collection[str] | None = None,
    question: str | None = None,
    timeout_s: float | None = None,
) -> ApproveOnce:
    """A link that asks a person once per distinct call, then remembers.

    ``approve_once()`` is ``ApproveOnce()``: see it for the arguments and for
    what ``key="call"`` (the default: tool, source and arguments) and
    ``key="tool"`` (tool and source only) each cover.
    """
    return ApproveOnce(
        name, key=key, tools=tools, question=question, timeout_s=timeout_s
    )
