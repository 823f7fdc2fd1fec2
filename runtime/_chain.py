"""Walk a middleware chain: before-tool forwards, after-tool in reverse, messages.

Pattern: chain of responsibility whose outcome union has no "result" arm.
Role:    runtime layer; the only walker of chains (the loop, resume, MCP
         serving and the proxy call these functions); returns decision rows.

Laws: G6, G7 (a throw is a denial), G8 (each hook its own deep copy, taken
by the context on the hook's first read: ``_context.py``), G12,
G14 (the first non-allow answer wins), G15–G17, G19–G24 (the after-tool
onion), G26–G32 (the message chain), G64, G93, G94 (the walker judges the
verb, however the outcome was built).
Why rows are returned, not written: several callers record the same fact the
same way, and nothing a walker does can skip the ledger.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from helmlog.events import Approval, Message, MiddlewareDecision, shape

from ._context import (
    ATOM_TYPES,
    MessageContext,
    Uncopied,
    call_context,
    clone,
    deferred,
    result_context,
)
from ._links import MASKED, Link
from ._verbs import Allow, Ask, Deny, judged


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def thrown_reason(name: str, exc: BaseException) -> str:
    """G7's reason for a hook that raised."""
    return f"middleware '{name}' threw: {_error_text(exc)}"


def no_pause_reason(name: str, question: str) -> str:
    """G24/G64's reason for an ask where no pause can carry it."""
    return (
        f"middleware '{name}' asked a person to decide, and there is no pause "
        f"here to carry that ask: {question}"
    )


_OUTCOME_TYPES = frozenset((Allow, Deny, Ask))


async def invoke(name: str, fn: Callable[..., Any], ctx: Any) -> Allow | Deny | Ask:
    """Call one hook and enforce the outcome union (G6, G7, G94).

    ``Exception`` becomes a denial; ``BaseException`` (cancellation, shutdown,
    a tool's ``ask_human`` signal) propagates, as it must.
    """
    out = call_hook(name, fn, ctx)
    if isinstance(out, _Awaiting):
        return await out.settle()
    return out


class _Awaiting:
    """A hook's answer still to be awaited (an ``async`` hook): ``call_hook``
    hands it back so that a walker awaits only a hook that needs it."""

    __slots__ = ("awaitable", "name")

    def __init__(self, name: str, awaitable: Any) -> None:
        self.name = name
        self.awaitable = awaitable

    async def settle(self) -> Allow | Deny | Ask:
        try:
            out = await self.awaitable
        except Exception as exc:  # noqa: BLE001 — G7: a rule that raises is a denial
            return Deny(thrown_reason(self.name, exc))
        return _judged(self.name, out)


def call_hook(
    name: str, fn: Callable[..., Any], ctx: Any
) -> Allow | Deny | Ask | _Awaiting:
    """``invoke`` without a coroutine for a hook that answers at once (most
    do; a walk calls one per link): its judged outcome, or an ``_Awaiting``
    the walker awaits (``settle``) for a hook whose answer is awaitable."""
    try:
        out = fn(ctx)
        # The exact outcome types are never awaitable: skip the ABC check.
        if type(out) not in _OUTCOME_TYPES and inspect.isawaitable(out):
            return _Awaiting(name, out)
    except Exception as exc:  # noqa: BLE001 — G7: a rule that raises is a denial
        return Deny(thrown_reason(name, exc))
    # ``_judged``'s plain pass-through, inline (one frame less per hook).
    if (
        type(out) is Allow
        and out.value is None
        and out.from_ is None
        and (out.why is None or type(out.why) is str)
    ):
        return out
    return _judged(name, out)


def _judged(name: str, out: Any) -> Allow | Deny | Ask:
    """G94's judge of a hook's answer, its common case inlined."""
    cls = type(out)
    # G94's judge, its common case inlined (one per hook on the hot path): a
    # plain pass-through or a reasoned deny of the exact types is sound.
    if cls is Allow:
        why = out.why
        if (
            out.value is None
            and out.from_ is None
            and (why is None or type(why) is str)
        ):
            sound: Allow | Deny = out
            return sound
    elif cls is Deny and type(out.reason) is str and out.reason:
        sound = out
        return sound
    if isinstance(out, Allow | Deny | Ask):
        return judged(name, out)
    return Deny(
        f"middleware '{name}' returned {shape(out)}, "
        "which is not allow(), deny() or ask()"
    )


# -- before-tool ------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class CallVerdict:
    """Where a before-tool walk stopped.

    ``kind`` is ``"allow"`` (every link passed), ``"deny"`` or ``"ask"``.
    ``args`` are the arguments as the walk left them (as they stood at the
    asker, for an ask); ``link_index`` is the asker's index in ``links``.
    """

    kind: Literal["allow", "deny", "ask"]
    args: Any
    rows: list[MiddlewareDecision]
    reason: str | None = None
    ask: Ask | None = None
    middleware: str | None = None
    link_index: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class CallSite:
    """What every context of one call shares."""

    tool_name: str
    tool_source: str | None
    tool_call_id: str
    iteration: int
    history: tuple[Message, ...]
    identity: Mapping[str, Any] | None
    # The session's approved asks (issue 22), for ToolCallContext.approvals.
    approvals: tuple[Approval, ...] = ()

    def __init__(
        self,
        tool_name: str,
        tool_source: str | None,
        tool_call_id: str,
        iteration: int,
        history: tuple[Message, ...],
        identity: Mapping[str, Any] | None,
        approvals: tuple[Approval, ...] = (),
    ) -> None:
        # The dataclass's own ``__init__``, through the slots' setters (one
        # site per call on the hot path, bench/turns.py).
        put = _site_setters
        put[0](self, tool_name)
        put[1](self, tool_source)
        put[2](self, tool_call_id)
        put[3](self, iteration)
        put[4](self, history)
        put[5](self, identity)
        put[6](self, approvals)


_site_setters = tuple(
    vars(CallSite)[f.name].__set__ for f in dataclasses.fields(CallSite)
)


def _tool_row(
    site: CallSite, moment: str, name: str, **fields: Any
) -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware=name,
        moment=moment,
        at="tool",
        iteration=site.iteration,
        tool_name=site.tool_name,
        tool_call_id=site.tool_call_id,
        **fields,
    )


def changed_keys(before: Any, after: Any) -> tuple[str, ...] | None:
    """The names of the arguments a rewrite added, removed or changed (G93).

    Names only, in the rewritten arguments' order and then the removed ones;
    ``None`` when either side is not a mapping of arguments.
    """
    if not isinstance(before, dict) or not isinstance(after, dict):
        return None
    names = [
        str(key)
        for key, value in after.items()
        if key not in before or before[key] != value
    ]
    names.extend(str(key) for key in before if key not in after)
    return tuple(names)


def _tool_allow_row(
    site: CallSite, moment: str, link: Link, out: Allow, current: Any
) -> tuple[MiddlewareDecision, Any]:
    """The row for an allow at a tool moment, and the value that flows on.

    A pass-through files ``changed=False`` (G17, G22); a transform replaces the
    value wholesale and files it with the value it replaced (G16, G22), the
    link's ``from`` declaration and, at before-tool, the names it changed
    (G93). A masking link's row holds the placeholder for what it replaced.
    """
    name = link.name
    if out.value is None:
        # ``_tool_row``'s row, built in one call (one per pass-through).
        row = MiddlewareDecision(
            middleware=name,
            moment=moment,
            at="tool",
            iteration=site.iteration,
            outcome="allow",
            changed=False,
            tool_name=site.tool_name,
            tool_call_id=site.tool_call_id,
            why=out.why,
        )
        return row, current
    value = clone(out.value)
    row = _tool_row(
        site,
        moment,
        name,
        outcome="allow",
        changed=True,
        why=out.why,
        before=MASKED if link.masks else current,
        after=value,
        from_=None if out.from_ is None else dict(out.from_),
        changed_keys=(
            changed_keys(current, value) if moment == "before-tool" else None
        ),
        masked=True if link.masks else None,
    )
    return row, value


async def walk_tool_calls(
    links: Sequence[Link],
    site: CallSite,
    args: Any,
    *,
    start: int = 0,
    ask_allowed: bool = True,
) -> CallVerdict:
    """Walk ``on_tool_call`` hooks from ``links[start]`` forwards (G12–G17).

    ``ask_allowed=False`` is the far side of an approval: an ask there is a
    denial (G64).
    """
    rows: list[MiddlewareDecision] = []
    # The site's history and identity, and the arguments until a transform
    # replaces them, deferred once for every context that shares them.
    history = identity = marked = None
    for index in range(start, len(links)):
        link = links[index]
        fn = link.on_tool_call
        if fn is None:
            continue
        if history is None:  # once a walk
            history, identity = deferred(site.history), deferred(site.identity)
        if marked is None:
            marked = args if type(args) in ATOM_TYPES else Uncopied(args)
        ctx = call_context(
            site.tool_name,
            site.tool_source,
            site.tool_call_id,
            site.iteration,
            marked,
            history,
            identity,
            site.approvals,
        )
        out = call_hook(link.name, fn, ctx)
        if isinstance(out, _Awaiting):
            out = await out.settle()
        if isinstance(out, Allow):
            row, flowing = _tool_allow_row(site, "before-tool", link, out, args)
            if flowing is not args:
                args, marked = flowing, None
            rows.append(row)
            continue
        if isinstance(out, Ask) and not ask_allowed:
            out = Deny(no_pause_reason(link.name, out.question))
        if isinstance(out, Deny):
            rows.append(
                _tool_row(
                    site,
                    "before-tool",
                    link.name,
                    outcome="deny",
                    changed=False,
                    why=out.reason,
                )
            )
            return CallVerdict(
                "deny",
                args,
                rows,
                reason=out.reason,
                middleware=link.name,
                link_index=index,
            )
        rows.append(
            _tool_row(
                site,
                "before-tool",
                link.name,
                outcome="ask",
                changed=False,
                why=out.question,
            )
        )
        return CallVerdict(
            "ask", args, rows, ask=out, middleware=link.name, link_index=index
        )
    return CallVerdict("allow", args, rows)


# -- after-tool -------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ResultVerdict:
    """What the after-tool walk let through: the result, or a refusal reason."""

    result: Any
    rows: list[MiddlewareDecision]
    denied: bool = False
    reason: str | None = None


async def walk_tool_results(
    links: Sequence[Link], site: CallSite, args: Any, result: Any, *, error: bool
) -> ResultVerdict:
    """Walk ``on_tool_result`` hooks in reverse chain order (G18–G24)."""
    rows: list[MiddlewareDecision] = []
    history = identity = None
    for link in reversed(links):
        fn = link.on_tool_result
        if fn is None:
            continue
        if history is None:  # once a walk
            history, identity = deferred(site.history), deferred(site.identity)
        ctx = result_context(
            site.tool_name,
            site.tool_source,
            site.tool_call_id,
            site.iteration,
            args if type(args) in ATOM_TYPES else Uncopied(args),
            history,
            identity,
            result if type(result) in ATOM_TYPES else Uncopied(result),
            error,
        )
        out = call_hook(link.name, fn, ctx)
        if isinstance(out, _Awaiting):
            out = await out.settle()
        if isinstance(out, Ask):
            # G24: the tool already ran; no pause can carry this ask.
            out = Deny(no_pause_reason(link.name, out.question))
        if isinstance(out, Deny):
            rows.append(
                _tool_row(
                    site,
                    "after-tool",
                    link.name,
                    outcome="deny",
                    changed=True,
                    why=out.reason,
                    before=MASKED if link.masks else result,
                    after=out.reason,
                    masked=True if link.masks else None,
                )
            )
            return ResultVerdict(result, rows, denied=True, reason=out.reason)
        row, result = _tool_allow_row(site, "after-tool", link, out, result)
        rows.append(row)
    return ResultVerdict(result, rows)


# -- messages ---------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class MessageVerdict:
    """What a message walk let through, or who refused it and why."""

    content: str
    rows: list[MiddlewareDecision]
    denied: bool = False
    reason: str | None = None
    middleware: str | None = None


def _message_row(
    name: str, phase: str, iteration: int, **fields: Any
) -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware=name,
        moment=phase,
        at="message",
        phase=phase,
        iteration=iteration,
        **fields,
    )


async def walk_messages(
    links: Sequence[Link],
    phase: str,
    content: str,
    *,
    history: tuple[Message, ...],
    identity: Mapping[str, Any] | None,
    iteration: int,
) -> MessageVerdict:
    """Walk ``on_message`` hooks in declaration order at one phase (G26–G32)."""
    rows: list[MiddlewareDecision] = []
    for link in links:
        if link.only_phase is not None and link.only_phase != phase:
            # G26/G76 (seed 004; the issue-12 amendment is withdrawn): a rule
            # declared for one phase is still a link of the chain at the
            # other, where it passes through without being called, filing the
            # very row the hand-written ``phase == ... else allow()`` spelling
            # files, so ``.act()`` stays provably sugar (G75).
            rows.append(
                _message_row(
                    link.name, phase, iteration, outcome="allow", changed=False
                )
            )
            continue
        assert link.on_message is not None
        ctx = MessageContext(
            phase=phase, content=content, history=history, identity=identity
        )
        out = await invoke(link.name, link.on_message, ctx)
        if isinstance(out, Ask):
            out = Deny(
                f"middleware '{link.name}' asked a person to decide about the {phase} "
                "message, and there is no pause at the message boundary to carry "
                f"that ask: {out.question}. Ask at a tool moment (on_tool_call), "
                "where a pause exists, or decide here with allow()/deny()."
            )
        elif (
            isinstance(out, Allow)
            and out.value is not None
            and not isinstance(out.value, str)
        ):
            out = Deny(
                f"middleware '{link.name}' returned allow({shape(out.value)}) at the "
                f"{phase} message boundary, and a message is text. Return "
                "allow(some_string, why) to rewrite it, allow() to pass it through "
                "unchanged, or deny(reason) to refuse it."
            )
        if isinstance(out, Deny):
            rows.append(
                _message_row(
                    link.name,
                    phase,
                    iteration,
                    outcome="deny",
                    changed=False,
                    why=out.reason,
                )
            )
            return MessageVerdict(
                content, rows, denied=True, reason=out.reason, middleware=link.name
            )
        if out.value is None:
            rows.append(
                _message_row(
                    link.name,
                    phase,
                    iteration,
                    outcome="allow",
                    changed=False,
                    why=out.why,
                )
            )
        else:
            rows.append(
                _message_row(
                    link.name,
                    phase,
                    iteration,
                    outcome="allow",
                    changed=True,
                    why=out.why,
                    before=MASKED if link.masks else content,
                    after=out.value,
                    from_=None if out.from_ is None else dict(out.from_),
                    masked=True if link.masks else None,
                )
            )
            content = out.value
    return MessageVerdict(content, rows)
