"""The tool-call pipeline: one call's fixed steps, entered at any of them.

Pattern: a resumable pipeline of typed steps (``_steps.py``): a call goes in
         with an ``Entry`` (where it starts, what it carries) and comes out as
         one ``Outcome`` (``Ran``, ``Refused``, ``Paused``) its caller
         records; ``CallRules`` say what happens where a person is needed.
Role:    runtime layer; the only walker of a call's steps (the loop, resume,
         recovery, ``mcp_serve`` under ``SERVED``; ``lowlevel``).

Laws: G51, G53–G57, G59, G62, G64, G65, G69–G70, R7, S3–S5.
Why entries and not flags: a resume or recovery continues where the record
says the call stopped; every step after is the same code for every caller.
Keywords and credentials are derived again past validation: neither is
recorded (G57), so recorded arguments are validated again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from helmlog.events import CheckpointError, MiddlewareDecision, PendingPause, shape

from ._chain import CallSite, walk_tool_calls, walk_tool_results
from ._context import ToolCallContext, clone
from ._errors import DecisionRequiredError
from ._links import MASKED, Link
from ._steps import (
    Admitted,
    CallRecorder,
    CallRules,
    Entry,
    Outcome,
    Paused,
    Ran,
    Refused,
    Step,
)
from ._tools import (
    CredentialResolver,
    Tool,
    call_execute,
    invalid_arguments_text,
    render_result,
    unknown_tool_text,
    with_credentials,
)
from ._verbs import Allow, Deny
from .pause._pause import AskHumanSignal, CheckInDecision, MiddlewareAsk
from .pause._pause import decision_why as _decision_why

log = logging.getLogger("helmlog")

PERMISSION_FAILED = (
    "[permission denied: Tool '{name}' could not be authorized. This will not change "
    "during this run — do not call it again. Continue without it, or say what you are "
    "unable to do.]"
)
TWO_GATES = (
    "Tool '{tool}' was not executed and cannot be retried this turn: it declares its "
    "own check-in consent gate, which trips for these arguments, and middleware "
    "'{asker}' already asked a person about this call. Ask through one gate, not two."
)


# The entry tests of ``ToolPipeline.run``, as module names: read once per
# step of every call, and an enum's class attribute costs more (bench/turns.py).
_GATE, _BEFORE_TOOL, _CHECK_IN = Step.GATE, Step.BEFORE_TOOL, Step.CHECK_IN
_AFTER_TOOL = Step.AFTER_TOOL


def declined_text(decision: CheckInDecision) -> str:
    """G64: what the model reads of a declined ask or check-in."""
    return "declined by human" + (f": {decision.note}" if decision.note else "")


# -- the pipeline -----------------------------------------------------------


def check_in_trips(tool: Tool, kwargs: dict[str, Any]) -> bool:
    """G56: whether the tool's own consent gate trips for these arguments."""
    if tool.check_in is True:
        return True
    assert callable(tool.check_in)
    try:
        return bool(tool.check_in(clone(kwargs)))
    except Exception:  # noqa: BLE001 — G56: a raising predicate trips
        # A person decides; failing open would skip the consent gate.
        return True


class ToolPipeline:
    """The steps of G51 over one set of tools, links and rules.

    Args:
        tools: the registered tools, by name.
        links: the tool chain, in declaration order.
        rules: ``IN_AGENT`` or ``SERVED``.
        permissions: the permission gate's checker (G54), or ``None``.
        credentials: resolves the secrets a tool declares (G57).
        clock: milliseconds, for ``Ran.duration_ms``.
    """

    __slots__ = (
        "clock",
        "credentials",
        "has_call_hooks",
        "has_result_hooks",
        "links",
        "permissions",
        "rules",
        "tools",
    )

    def __init__(
        self,
        tools: Mapping[str, Tool],
        links: Sequence[Link],
        rules: CallRules,
        *,
        permissions: Callable[[Any], Any] | None = None,
        credentials: CredentialResolver | None = None,
        clock: Callable[[], int],
    ) -> None:
        self.tools = tools
        self.links = tuple(links)
        self.rules = rules
        self.permissions = permissions
        self.credentials = credentials
        self.clock = clock
        # G11: a chain without hooks at a moment is not walked (no rows).
        self.has_call_hooks = any(k.on_tool_call is not None for k in self.links)
        self.has_result_hooks = any(k.on_tool_result is not None for k in self.links)

    def lookup(self, name: str) -> Tool | Refused:
        """Step 2 (G53): the registered tool, or the refusal of an unknown one.

        A fresh call's first step, apart because the call's site (what every
        link sees) names the tool's source, so it is made once this passes.
        """
        found = self.tools.get(name)
        if found is None:
            return Refused(Step.UNKNOWN_TOOL, unknown_tool_text(name, self.tools))
        return found

    async def run(
        self, tool: Tool, site: CallSite, entry: Entry, record: CallRecorder
    ) -> Outcome:
        """Walk the steps from ``entry.step`` to the call's outcome (G51)."""
        if entry.step is _AFTER_TOOL:
            return await self.after(site, entry.args, entry.answer, False, 0, record)
        admitted = await self.admit(tool, site, entry, record)
        if not isinstance(admitted, Admitted):
            return admitted
        args = admitted.args
        assert admitted.kwargs is not None
        started = self.clock()
        error = False
        try:
            result = await call_execute(tool, admitted.kwargs, site.tool_call_id)
        except AskHumanSignal as signal:
            return self.rules.ask_human(signal, args)
        except Exception as exc:  # noqa: BLE001 — G18: a raise is the tool's result
            result, error = str(exc) or type(exc).__name__, True
        duration_ms = max(0, self.clock() - started)
        if not self.has_result_hooks:  # G11; inline: the hot path of a bare chain
            return Ran(result, error, render_result(result), False, duration_ms)
        return await self.after(site, args, result, error, duration_ms, record)

    async def admit(
        self, tool: Tool, site: CallSite, entry: Entry, record: CallRecorder
    ) -> Admitted | Refused | Paused:
        """The steps from ``entry.step`` up to and including dispatch (3–8).

        ``run`` goes on to execute and the after-tool walk; a caller whose
        tool runs elsewhere (a framework's own tool call, between two of its
        hooks: ``Steering.before_tool``) stops here, and hands the result to
        ``after`` later. Either way the rows and events are the same.
        """
        at = entry.step
        args = entry.args
        if at <= _GATE and self.permissions is not None:
            refusal = await self.gate(site, args)
            if refusal is not None:
                return Refused(Step.GATE, refusal)
        if at <= _BEFORE_TOOL and self.has_call_hooks:
            verdict = await walk_tool_calls(
                self.links,
                site,
                args,
                start=entry.link,
                ask_allowed=self.rules.asks and entry.asked_by is None,
            )
            await record.file(verdict.rows)
            if verdict.kind == "deny":
                return Refused(Step.BEFORE_TOOL, verdict.reason or "")
            if verdict.kind == "ask":
                assert verdict.ask is not None
                return Paused(
                    "ask",
                    MiddlewareAsk(
                        verdict.ask.question,
                        clone(verdict.ask.detail),  # G8: the hook keeps its own
                        verdict.middleware,
                        verdict.ask.component_id,
                        verdict.ask.timeout_s,
                    ),
                    verdict.args,
                    verdict.link_index,
                )
            args = verdict.args
        kwargs, issues = tool.validate(args)
        if kwargs is None:
            return Refused(Step.VALIDATE, invalid_arguments_text(tool.name, issues))
        if (
            at <= _CHECK_IN
            and tool.check_in is not None
            and check_in_trips(tool, kwargs)
        ):
            if entry.asked_by is not None:
                text = TWO_GATES.format(tool=tool.name, asker=entry.asked_by)
                return Refused(Step.CHECK_IN, text)
            return self.rules.check_in(tool, args)
        resolved, refusal = (
            with_credentials(tool, kwargs, self.credentials)
            if tool.credentials
            else (kwargs, None)  # ``with_credentials``'s first case, inline
        )
        if resolved is None:
            return Refused(Step.CREDENTIALS, refusal or "")
        await record.dispatched(tool, site.tool_call_id, args, entry.attempt)
        return Admitted(args, resolved)

    async def gate(self, site: CallSite, args: Any) -> str | None:
        """Step 3, the permission gate (G54): ``None`` to pass, else the refusal."""
        checker = self.permissions
        assert checker is not None
        ctx = ToolCallContext(
            site.tool_name,
            site.tool_source,
            site.tool_call_id,
            site.iteration,
            clone(args),
            site.history,
            site.identity,
        )
        try:
            out = checker(ctx)
            if inspect.isawaitable(out):
                out = await out
        except Exception:
            log.warning(
                "permission checker failed for tool %s", site.tool_name, exc_info=True
            )
            return PERMISSION_FAILED.format(name=site.tool_name)
        if isinstance(out, Allow):
            return None
        if isinstance(out, Deny):
            return f"[permission denied: {out.reason}]"
        return PERMISSION_FAILED.format(name=site.tool_name)

    async def after(
        self,
        site: CallSite,
        args: Any,
        result: Any,
        error: bool,
        duration_ms: int,
        record: CallRecorder,
    ) -> Ran:
        """Step 10, the after-tool walk over a result (G18–G25).

        When a masking link (``masks_values``) rewrote or refused the result,
        the result recorded behind it is the placeholder too (issue 28 item
        7): its row holds none, and neither does ``tool.end``.
        """
        if not self.has_result_hooks:
            return Ran(result, error, render_result(result), False, duration_ms)
        verdict = await walk_tool_results(self.links, site, args, result, error=error)
        await record.file(verdict.rows)
        kept = MASKED if any(r.masked for r in verdict.rows) else result
        if verdict.denied:
            return Ran(kept, error, verdict.reason or "", True, duration_ms)
        return Ran(kept, error, render_result(verdict.result), False, duration_ms)

    async def resume(
        self,
        tool: Tool,
        site: CallSite,
        pending: PendingPause,
        decision: Any,
        record: CallRecorder,
    ) -> Outcome:
        """Continue a paused call with a person's decision or answer.

        An ask files the asker's row first (G62: ``approved by ...``; G64:
        ``declined by ...``); a decline of an ask or a check-in refuses the
        call (G64). An approved ask walks on from the link after the asker,
        an approved check-in goes on at credentials, and an ``ask_human``
        answer is the result the after-tool walk gets (G70). The caller has
        checked the pause (R9) and, before recording ``pause.resume``, the
        decision's type (G61); a pause of another kind is refused as
        ``"tampered"``, a decision of the wrong type as G61's error.
        """
        if pending.kind == "ask-human":
            return await self.run(
                tool, site, Entry.answered(pending.args, decision), record
            )
        if not isinstance(decision, CheckInDecision):
            # G61: a consent gate never falls through to a result.
            raise DecisionRequiredError(
                gate=pending.kind,
                middleware=pending.middleware,
                tool_name=pending.tool_name,
                received="nothing" if decision is None else shape(decision),
            )
        if pending.kind == "ask":
            asker = pending.middleware or ""
            row = _resume_row(asker, site, decision, pending.component_id)
            await record.file([row])
            entry = Entry.approved_ask(pending.args, pending.link_index + 1, asker)
        elif pending.kind == "check-in":
            entry = Entry.approved_check_in(pending.args)
        else:
            raise CheckpointError("tampered", f"no pause of kind {pending.kind!r}")
        if not decision.approved:
            # G64: the asking step refuses (a check-in's decline files no row).
            step = Step.BEFORE_TOOL if pending.kind == "ask" else Step.CHECK_IN
            return Refused(step, declined_text(decision))
        return await self.run(tool, site, entry, record)


def _resume_row(
    middleware: str, site: CallSite, decision: CheckInDecision, component_id: str | None
) -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware=middleware,
        moment="before-tool",
        at="tool",
        iteration=site.iteration,
        outcome="allow" if decision.approved else "deny",
        changed=False,
        tool_name=site.tool_name,
        tool_call_id=site.tool_call_id,
        why=_decision_why(decision),
        component_id=component_id,
    )
