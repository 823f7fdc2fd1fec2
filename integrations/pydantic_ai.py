"""helmlog's governance inside a Pydantic AI agent (one capability).

Pattern: ``HelmlogCapability`` drives a ``SteeredTurn`` from Pydantic AI's own
         hooks: input in ``before_node_run`` (the ``UserPromptNode``), the
         window and the model's reply in ``wrap_model_request``, both tool
         moments in ``HelmlogToolset.call_tool`` (a ``WrapperToolset`` around
         the agent's tools), the output in ``after_output_process``; an ask is
         Pydantic AI's deferred tool approval (``ApprovalRequired``).
Role:    integrations layer, the ``helmlog[pydantic-ai]`` extra; imports
         Pydantic AI at its top. ``tool_from`` backs ``Tool.from_pydantic_ai``.

Laws: G7, G15, G25, G33, G39, G41, G55, G59, G61, G64, G66, R9; issue 27.
Why the session is the run's ``conversation_id``: Pydantic AI carries it on
the message history, so the run that resumes a deferred call (another
process, another day) names the same helmlog session without help.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

try:
    from pydantic_ai import CallToolsNode, RunContext, UserPromptNode
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired, ToolFailed, UserError
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import (
        DeferredToolRequests,
        DeferredToolResults,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import (
        AbstractToolset,
        FunctionToolset,
        ToolsetTool,
        WrapperToolset,
    )
    from pydantic_ai.usage import RunUsage
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # the module IS the optional extra
    raise ImportError(
        "helmlog.integrations.pydantic_ai needs Pydantic AI 2.x: "
        "pip install 'helmlog[pydantic-ai]'"
    ) from exc

from helmlog.events import HelmlogError, Message, ToolCallRequest, shape
from helmlog.runtime import (
    AskPause,
    DecisionRequiredError,
    Tool,
    check_in_approved,
    check_in_declined,
)
from helmlog.runtime.lowlevel import Ran, Refused, SteeredTurn, SteeringError

from ._governance import Governance

__all__ = [
    "HelmlogCapability",
    "HelmlogToolset",
    "deferred_results",
    "recorded_results",
    "to_messages",
    "to_model_messages",
    "tool_from",
]

_ASK_KEY = "helmlog"
"""The key of helmlog's ask in ``DeferredToolRequests.metadata[call_id]``."""


# --- messages ---------------------------------------------------------------


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    raise TypeError(f"{where}: helmlog governs text (G31), got {shape(content)}")


def to_messages(messages: Sequence[ModelMessage]) -> tuple[Message, ...]:
    """Pydantic AI's message history as helmlog ``Message``s.

    System prompts are left out (helmlog keeps the system apart, as Pydantic
    AI keeps its instructions); a retry prompt for a tool is that tool's
    message, one without a tool is the user's.

    Raises:
        TypeError: a message that is not a ``ModelRequest``/``ModelResponse``,
            or a user prompt that is not text (images, files).
    """
    out: list[Message] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            for part in m.parts:
                if isinstance(part, UserPromptPart):
                    out.append(
                        Message(
                            role="user", content=_text_of(part.content, "a user prompt")
                        )
                    )
                elif isinstance(part, ToolReturnPart):
                    out.append(
                        Message(
                            role="tool",
                            content=part.model_response_str(),
                            tool_call_id=part.tool_call_id,
                            tool_name=part.tool_name,
                        )
                    )
                elif isinstance(part, RetryPromptPart):
                    if part.tool_name is None:
                        out.append(Message(role="user", content=part.model_response()))
                    else:
                        out.append(
                            Message(
                                role="tool",
                                content=part.model_response(),
                                tool_call_id=part.tool_call_id,
                                tool_name=part.tool_name,
                            )
                        )
        elif isinstance(m, ModelResponse):
            calls = tuple(
                ToolCallRequest(
                    id=p.tool_call_id, name=p.tool_name, args=p.args_as_dict()
                )
                for p in m.parts
                if isinstance(p, ToolCallPart)
            )
            text = "".join(p.content for p in m.parts if isinstance(p, TextPart))
            out.append(Message(role="assistant", content=text, tool_calls=calls))
        else:
            raise TypeError(f"to_messages(): no helmlog role for a {type(m).__name__}")
    return tuple(out)


def to_model_messages(
    messages: Sequence[Message], *, system: Sequence[SystemPromptPart] = ()
) -> list[ModelMessage]:
    """helmlog ``Message``s as Pydantic AI's history (a window's plan).

    Consecutive tool messages share one ``ModelRequest`` (as Pydantic AI
    sends them); ``system`` parts open the first request.

    Raises:
        TypeError: an item that is not a ``Message``.
        ValueError: a role other than ``user``/``assistant``/``tool``.
    """
    out: list[ModelMessage] = []
    pending: list[ModelRequestPart] = list(system)
    for msg in messages:
        if not isinstance(msg, Message):
            raise TypeError(
                f"to_model_messages(): expected a helmlog Message, got {shape(msg)}"
            )
        if msg.role == "user":
            pending.append(UserPromptPart(msg.content))
        elif msg.role == "tool":
            pending.append(
                ToolReturnPart(
                    tool_name=msg.tool_name or "",
                    content=msg.content,
                    tool_call_id=msg.tool_call_id or "",
                )
            )
        elif msg.role == "assistant":
            if pending:
                out.append(ModelRequest(parts=pending))
                pending = []
            parts: list[ModelResponsePart] = []
            if msg.content:
                parts.append(TextPart(msg.content))
            parts.extend(
                ToolCallPart(c.name, dict(c.args or {}), tool_call_id=c.id)
                for c in msg.tool_calls
            )
            out.append(ModelResponse(parts=parts))
        else:
            raise ValueError(f"to_model_messages(): unknown role {msg.role!r}")
    if pending:
        out.append(ModelRequest(parts=pending))
    return out


# --- tools across -----------------------------------------------------------


def _standalone_context() -> RunContext[None]:
    # A tool outside an agent run still needs a RunContext to be called
    # through its toolset; tools that read it are refused by tool_from.
    return RunContext(deps=None, model=TestModel(), usage=RunUsage())


def tool_from(tool: PydanticTool[Any]) -> Tool:
    """A Pydantic AI tool as a helmlog ``Tool`` (``Tool.from_pydantic_ai``).

    Name, description and JSON schema are the tool's own; executing calls the
    tool through Pydantic AI (its own argument validation, then its function).

    Raises:
        TypeError: ``tool`` is not a ``pydantic_ai.Tool``.
        ValueError: the tool takes a ``RunContext`` (it needs an agent run's
            deps and model, which a helmlog agent does not have).
    """
    if not isinstance(tool, PydanticTool):
        raise TypeError(
            f"Tool.from_pydantic_ai() takes a pydantic_ai.Tool, got {shape(tool)}; "
            "wrap a function first: pydantic_ai.Tool(fn)"
        )
    if tool.takes_ctx:
        raise ValueError(
            f"pydantic_ai tool '{tool.name}' takes a RunContext: it can only run "
            "inside a Pydantic AI agent run (govern that agent with HelmlogCapability)"
        )
    toolset: FunctionToolset[None] = FunctionToolset([tool])
    definition = tool.tool_def

    async def execute(**kwargs: Any) -> Any:
        ctx = _standalone_context()
        listed = (await toolset.get_tools(ctx))[definition.name]
        args = listed.args_validator.validate_python(kwargs)
        return await toolset.call_tool(definition.name, args, ctx, listed)

    return Tool(
        definition.name,
        definition.description or "",
        dict(definition.parameters_json_schema),
        execute,
    )


# --- deferred results -------------------------------------------------------


def deferred_results(
    requests: DeferredToolRequests,
    *,
    by: str,
    approved: bool = True,
    note: str | None = None,
) -> DeferredToolResults:
    """Pydantic AI's answer to every pending approval, signed for helmlog.

    ``by`` is who decided (it lands in the ledger's row, R9); a decline's
    ``note`` is what the model is told. Pass the result as the next run's
    ``deferred_tool_results``.

    Raises:
        ValueError: an empty ``by``.
        TypeError: ``requests`` is not a ``DeferredToolRequests``.
    """
    if not isinstance(requests, DeferredToolRequests):
        raise TypeError(
            f"deferred_results() takes DeferredToolRequests, got {shape(requests)}"
        )
    if not isinstance(by, str) or not by:
        raise ValueError("deferred_results(): by= names who decided (non-empty)")
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    meta: dict[str, dict[str, Any]] = {}
    for call in requests.approvals:
        approvals[call.tool_call_id] = (
            ToolApproved()
            if approved
            else ToolDenied(note or "The tool call was declined.")
        )
        meta[call.tool_call_id] = {"by": by, "note": note}
    return DeferredToolResults(approvals=approvals, metadata=meta)


async def recorded_results(
    governance: Governance, session_id: str, requests: DeferredToolRequests
) -> DeferredToolResults:
    """The answers helmlog recorded for pending approvals decided elsewhere.

    After ``helmlog approve|decline`` (or the approvals page) decided an ask
    from another process, the framework run resumes with these: each call
    reads the outcome that process recorded (a decline is Pydantic AI's
    ``ToolDenied`` with helmlog's refusal); the tool does not run again. A
    call that only waited behind the ask is released (it runs now). Calls
    helmlog did not defer are left out (answer them yourself: ``update``).

    Raises:
        TypeError: ``requests`` is not a ``DeferredToolRequests``.
        ValueError: an ask still waiting on a person (its call id named).
    """
    if not isinstance(requests, DeferredToolRequests):
        raise TypeError(
            f"recorded_results() takes DeferredToolRequests, got {shape(requests)}"
        )
    turn = await governance.steering.turn(session_id)
    answered = {m.tool_call_id for m in turn.history if m.role == "tool"}
    ours: dict[str, Mapping[str, Any]] = {}
    for c in requests.approvals:
        ask_meta = requests.metadata.get(c.tool_call_id, {}).get(_ASK_KEY)
        if isinstance(ask_meta, Mapping):
            ours[c.tool_call_id] = ask_meta
    waiting = [k for k, v in ours.items() if "question" in v and k not in answered]
    if waiting:
        raise ValueError(
            f"session '{session_id}': calls {waiting} still wait on a person "
            "(decide them with `helmlog approve|decline`, or deferred_results())"
        )
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for c in requests.approvals:
        if c.tool_call_id not in ours:
            continue
        if c.tool_call_id not in answered:
            approvals[c.tool_call_id] = ToolApproved()  # it waited behind the ask
            continue
        call = ToolCallRequest(
            id=c.tool_call_id, name=c.tool_name, args=c.args_as_dict()
        )
        # Re-entrant: an answered call returns its recorded outcome, never runs.
        outcome = await turn.call_tool(call, None)
        if isinstance(outcome, AskPause):  # a further ask after the decision
            raise ValueError(
                f"session '{session_id}': call '{c.tool_call_id}' waits on a "
                "person again (decide it with `helmlog approve|decline`)"
            )
        refused = isinstance(outcome, Refused) or (
            isinstance(outcome, Ran) and (outcome.denied or outcome.error)
        )
        approvals[c.tool_call_id] = (
            ToolDenied(outcome.text) if refused else ToolApproved()
        )
    return DeferredToolResults(approvals=approvals)


# --- the capability -----------------------------------------------------------


@dataclasses.dataclass
class _RunState:
    """One Pydantic AI run's hold on its helmlog turn."""

    turn: SteeredTurn | None = None
    # Pydantic AI runs a response's tool calls concurrently; helmlog records
    # them in the order the model made them (the native loop's order).
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    def open(self) -> SteeredTurn:
        if self.turn is None:
            raise RuntimeError(
                "helmlog: no turn for this run (HelmlogCapability must be among "
                "the agent's capabilities, not only its toolset)"
            )
        return self.turn


def _decider(
    metadata: Any, default: str | None, pause: AskPause
) -> tuple[str, str | None]:
    """Who decided a Pydantic AI approval (``metadata['by']``), and the note.

    Raises:
        DecisionRequiredError: nobody named (R9: the row says who decided).
    """
    meta = metadata if isinstance(metadata, Mapping) else {}
    by = meta.get("by") or default
    if not isinstance(by, str) or not by:
        raise DecisionRequiredError(
            gate=pause.kind,
            middleware=pause.ask.middleware,
            tool_name=pause.tool_name,
            received=(
                f"a Pydantic AI answer for call '{pause.tool_call_id}' that names "
                "nobody: pass deferred_results(requests, by=...), metadata "
                "{call_id: {'by': ...}}, or HelmlogCapability(approver=...)"
            ),
        )
    note = meta.get("note")
    return by, note if isinstance(note, str) else None


def _ask_metadata(pause: AskPause, session_id: str) -> dict[str, Any]:
    ask = pause.ask
    return {
        _ASK_KEY: {
            "session_id": session_id,
            "question": ask.question,
            "detail": to_jsonable_python(ask.detail, fallback=str),
            "middleware": ask.middleware,
            "kind": pause.kind,
        }
    }


_CALL: contextvars.ContextVar[
    tuple[AbstractToolset[Any], str, RunContext[Any], ToolsetTool[Any]] | str
] = contextvars.ContextVar("helmlog_pydantic_ai_call")
"""The framework call a governed ``call_tool`` is walking (task-local), or
the framework's refusal of its arguments (``on_tool_validate_error``)."""


async def _framework_call(**kwargs: Any) -> Any:
    """The one ``execute`` of every governed Pydantic AI tool: the wrapped
    toolset's own ``call_tool`` for the call being walked.

    One function for all tools and runs, so ``Governance.tool_for`` builds
    each helmlog ``Tool`` once (a ``Tool`` compiles its schema); the call's
    run context travels in a context variable set by ``HelmlogToolset``.
    """
    try:
        current = _CALL.get()
    except LookupError:
        raise RuntimeError(
            "a governed Pydantic AI tool ran outside HelmlogToolset.call_tool"
        ) from None
    if isinstance(current, str):
        # Pydantic AI refused arguments helmlog's schema admitted: the call
        # fails as the framework would have it fail (recorded as an error).
        raise ValueError(current)
    wrapped, name, ctx, tool = current
    # The arguments as helmlog's rules admitted them (JSON), validated again
    # by the framework into what its function takes.
    args = tool.args_validator.validate_python(kwargs)
    return await wrapped.call_tool(name, args, ctx, tool)


def _declined(**_: Any) -> Any:
    """The ``execute`` of a call declined through ``ToolDenied``: never run."""
    raise RuntimeError("a declined call ran")  # pragma: no cover - guarded


@dataclasses.dataclass
class HelmlogToolset(WrapperToolset[Any]):
    """The agent's tools, each call walked through helmlog's one pipeline.

    Built by ``HelmlogCapability`` for each run; the wrapped toolset's own
    ``call_tool`` is the tool's execution (after permissions, before-tool,
    validation, check-in, dispatch; before after-tool).
    """

    governance: Governance | None = None
    state: _RunState | None = None
    approver: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.governance, Governance) or self.state is None:
            raise TypeError(
                "HelmlogToolset is built by HelmlogCapability for each run: "
                "put HelmlogCapability(governance) among the agent's capabilities"
            )

    def _helmlog_tool(self, name: str, tool: ToolsetTool[Any]) -> Tool:
        assert self.governance is not None  # __post_init__
        return self.governance.tool_for(
            name,
            _framework_call,
            description=tool.tool_def.description or "",
            input_schema=tool.tool_def.parameters_json_schema,
        )

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        assert self.state is not None  # __post_init__
        turn = self.state.open()
        call_id = ctx.tool_call_id
        if not call_id:
            raise ValueError(
                f"tool '{name}': a call without an id (helmlog records calls by id)"
            )
        call = ToolCallRequest(
            id=call_id, name=name, args=to_jsonable_python(tool_args)
        )
        htool = self._helmlog_tool(name, tool)
        token = _CALL.set((self.wrapped, name, ctx, tool))
        try:
            async with self.state.lock:
                return await self._governed(turn, call, htool, ctx)
        finally:
            _CALL.reset(token)

    async def _governed(
        self,
        turn: SteeredTurn,
        call: ToolCallRequest,
        htool: Tool,
        ctx: RunContext[Any],
    ) -> Any:
        try:
            outcome = await turn.call_tool(call, htool)
        except SteeringError as exc:
            if exc.reason != "pending-question":
                raise
            # An earlier call of this reply waits on a person: this one
            # waits too, as the native loop holds the rest of a reply.
            raise ApprovalRequired(
                metadata={
                    _ASK_KEY: {
                        "session_id": turn.session_id,
                        "waits_on": exc.tool_call_id,
                    }
                }
            ) from None
        if isinstance(outcome, AskPause) and ctx.tool_call_approved:
            by, note = _decider(ctx.tool_call_metadata, self.approver, outcome)
            outcome = await turn.resume_tool(
                outcome.checkpoint, check_in_approved(by=by, note=note), htool
            )
        return _model_reads(outcome, turn.session_id)


def _model_reads(outcome: Ran | Refused | AskPause, session_id: str) -> Any:
    if isinstance(outcome, AskPause):
        raise ApprovalRequired(metadata=_ask_metadata(outcome, session_id))
    if isinstance(outcome, Refused) or outcome.error or outcome.denied:
        # The model reads the refusal as the tool's message, status failed (G15).
        raise ToolFailed(outcome.text)
    return outcome.text


@dataclasses.dataclass
class HelmlogCapability(AbstractCapability[Any]):
    """helmlog's act-table, ledger and approvals around a Pydantic AI agent.

    ``Agent(model, tools=[...], output_type=[str, DeferredToolRequests],
    capabilities=[HelmlogCapability(governance)])``. Each run is a turn of
    the helmlog session named by the run's ``conversation_id``; an ask ends
    the run with ``DeferredToolRequests`` (metadata ``["helmlog"]`` holds the
    question), answered by the next run's ``deferred_tool_results``.

    Args:
        governance: the helmlog ``Governance`` (agent, store, rules).
        identity: who the runs act for (``MessageContext.identity``).
        approver: who decided, when an approval's metadata does not say.

    Raises:
        TypeError: ``governance`` is not a ``Governance``, or ``identity`` is
            not a mapping.
    """

    governance: Governance
    identity: Mapping[str, Any] | None = None
    approver: str | None = None
    _state: _RunState = dataclasses.field(
        default_factory=_RunState, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.governance, Governance):
            raise TypeError(
                "HelmlogCapability(governance): expected a "
                f"helmlog.integrations.Governance, got {shape(self.governance)}"
            )
        if self.identity is not None and not isinstance(self.identity, Mapping):
            raise TypeError(
                "HelmlogCapability(identity=): a mapping or None, got "
                f"{shape(self.identity)}"
            )
        if self.approver is not None and (
            not isinstance(self.approver, str) or not self.approver
        ):
            raise ValueError("HelmlogCapability(approver=): a non-empty name or None")

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        # One turn per run: a fresh state, never shared by concurrent runs.
        return dataclasses.replace(self)  # _state is not copied: a new one

    def get_wrapper_toolset(self, toolset: Any) -> Any:
        return HelmlogToolset(
            toolset,
            governance=self.governance,
            state=self._state,
            approver=self.approver,
        )

    # input: the run's prompt is admitted before anything is committed (G33)
    async def before_node_run(self, ctx: RunContext[Any], *, node: Any) -> Any:
        if isinstance(node, UserPromptNode):
            return await self._admit(ctx, node)
        if isinstance(node, CallToolsNode) and node.tool_call_results:
            return await self._declines(node)
        return node

    async def _admit(self, ctx: RunContext[Any], node: UserPromptNode[Any, Any]) -> Any:
        steering = self.governance.steering
        session_id = ctx.conversation_id
        if node.user_prompt is None or node.deferred_tool_results is not None:
            if session_id is None:
                raise ValueError("helmlog: a resumed run needs its message_history")
            self._state.turn = await steering.turn(session_id)
            return node
        prompt = _text_of(node.user_prompt, "HelmlogCapability: the run's prompt")
        turn = await steering.open_turn(
            prompt, session_id=session_id, identity=self.identity
        )
        self._state.turn = turn
        if turn.admitted == prompt:
            return node
        return dataclasses.replace(node, user_prompt=turn.admitted)

    async def _declines(self, node: CallToolsNode[Any, Any]) -> Any:
        """A decline given as Pydantic AI's ``ToolDenied`` is helmlog's decline.

        The denied call never reaches the toolset, so it is decided here: the
        pause is resumed declined and the model reads the recorded refusal.
        """
        results = dict(node.tool_call_results or {})
        meta = node.tool_call_metadata or {}
        calls = {c.tool_call_id: c for c in node.model_response.tool_calls}
        changed = False
        turn = self._state.open()
        for call_id, result in list(results.items()):
            if isinstance(result, ToolApproved) and result.override_args is not None:
                raise ValueError(
                    f"call '{call_id}': helmlog resumes a call with the arguments its "
                    "rules admitted; ToolApproved(override_args=...) is not honoured"
                )
            if not isinstance(result, ToolDenied) or call_id not in calls:
                continue
            part = calls[call_id]
            call = ToolCallRequest(
                id=call_id, name=part.tool_name, args=part.args_as_dict()
            )
            # A declined call never runs: the tool is only what the pause
            # names (its own execute, so the cached framework tool keeps its
            # schema for the calls that do run).
            htool = self.governance.tool_for(part.tool_name, _declined)
            async with self._state.lock:
                outcome = await turn.call_tool(call, htool)
                if isinstance(outcome, AskPause):
                    by, note = _decider(meta.get(call_id), self.approver, outcome)
                    outcome = await turn.resume_tool(
                        outcome.checkpoint,
                        check_in_declined(by=by, note=note or result.message),
                        htool,
                    )
            if isinstance(outcome, AskPause):
                continue  # a further ask: Pydantic AI's denial stands unrecorded
            results[call_id] = (
                ToolDenied(outcome.text)
                if isinstance(outcome, Refused) or outcome.denied or outcome.error
                else ToolApproved()
            )
            changed = True
        return dataclasses.replace(node, tool_call_results=results) if changed else node

    # arguments the framework refused: helmlog's own pipeline decides (G55)
    async def on_tool_validate_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: Any,
        error: Exception,
    ) -> Any:
        """A call whose arguments Pydantic AI refused never reaches the
        toolset; helmlog walks it as the native loop walks any call (the
        gate, before-tool, then its own validation refuses it, G55), so the
        reply's every call has its record (G66), and the model reads that."""
        turn = self._state.open()
        request = ToolCallRequest(
            id=call.tool_call_id, name=call.tool_name, args=call.args_as_dict()
        )
        htool = self.governance.tool_for(
            call.tool_name,
            _framework_call,
            description=tool_def.description or "",
            input_schema=tool_def.parameters_json_schema,
        )
        token = _CALL.set(f"Invalid arguments for tool '{call.tool_name}': {error}")
        try:
            async with self._state.lock:
                outcome = await turn.call_tool(request, htool)
        finally:
            _CALL.reset(token)
        if isinstance(outcome, AskPause):
            # Pydantic AI cannot defer a call whose arguments it refused; the
            # pause stays pending (the next step raises, fail closed).
            raise ToolFailed(outcome.ask.question)
        raise ToolFailed(outcome.text)

    # the window and the model's reply
    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, handler: Any
    ) -> ModelResponse:
        turn = self._state.open()
        if getattr(request_context, "streaming", False):
            # A streamed reply reaches the caller before the output rules
            # could hold it (G41), and Pydantic AI processes its output
            # before the reply ends: refused, the turn closed as failed.
            refused = SteeringError(
                reason="unsupported",
                session_id=turn.session_id,
                detail="HelmlogCapability governs run()/run_sync()/iter(), not "
                "streamed runs (run_stream): a streamed answer reaches the "
                "caller before helmlog's output rules can hold it",
            )
            await turn.fail(refused)
            raise refused
        view = await turn.model_request()
        if view != turn.history:
            system = [
                p
                for m in request_context.messages[:1]
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, SystemPromptPart)
            ]
            request_context.messages = to_model_messages(view, system=system)
        started = time.monotonic()
        response: ModelResponse = await handler(request_context)
        await turn.model_reply(
            response.text or "",
            [
                ToolCallRequest(
                    id=p.tool_call_id, name=p.tool_name, args=p.args_as_dict()
                )
                for p in response.tool_calls
            ],
            usage=_usage(response),
            model=response.model_name or "",
            stop_reason=response.finish_reason,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        return response

    # output: the final answer is admitted (G39); a refusal raises
    async def after_output_process(
        self, ctx: RunContext[Any], *, output_context: Any, output: Any
    ) -> Any:
        if ctx.partial_output or isinstance(output, DeferredToolRequests):
            return output
        turn = self._state.open()
        if isinstance(output, str):
            final = await turn.finish(output)
            if final != output:
                _rewrite_last_text(ctx.messages, final)
            return final
        draft = json.dumps(to_jsonable_python(output), ensure_ascii=False)
        final = await turn.finish(draft)
        if final != draft:
            raise ValueError(
                "helmlog: an output rule rewrote a structured answer; only text "
                "answers can be transformed (deny instead, or output text)"
            )
        return output

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> Any:
        turn = self._state.turn
        # helmlog's own errors are recorded where they arise (a refusal) or
        # are a misuse that appended nothing, as is Pydantic AI's UserError;
        # anything else ends the turn as the native loop ends one (G91).
        if turn is not None and not isinstance(error, HelmlogError | UserError):
            await turn.fail(error)
        raise error


def _usage(response: ModelResponse) -> dict[str, int]:
    usage = response.usage
    return {
        "input_tokens": int(usage.input_tokens or 0),
        "output_tokens": int(usage.output_tokens or 0),
    }


def _rewrite_last_text(messages: list[ModelMessage], text: str) -> None:
    """The committed answer replaces the draft in the run's history (G39)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, ModelResponse):
            parts = [p for p in m.parts if not isinstance(p, TextPart)]
            messages[i] = dataclasses.replace(m, parts=[*parts, TextPart(text)])
            return
