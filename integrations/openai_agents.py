"""helmlog's governance inside the OpenAI Agents SDK (``helmlog[openai-agents]``).

Pattern: the SDK's own hooks drive a ``SteeredTurn``: a blocking input guardrail
         (input moment), ``RunConfig.call_model_input_filter`` (admitted text,
         window moment), the agent's hooks (``model_reply``), ``needs_approval``
         + a tool input guardrail (before-tool; ask = the SDK's approval), the
         function tool's own call wrapped (after-tool), an output guardrail.
Role:    integrations layer; ``AgentsGovernance(governance).govern(agent)`` and
         ``.session().run(...)``; ``tool_from`` is ``Tool.from_openai_agents``.
Laws:    issue 27 items 2, 4–7 (one record: the native loop's rows); G7, G33,
         G39, G51, G59–G64, G79, G91, R9.

Why the tool is wrapped: the SDK evaluates ``needs_approval`` first, and its tool
guardrails can only allow, reject or raise; they cannot rewrite arguments or a
result, so a before-tool or after-tool transform needs the call itself.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import msgspec

try:
    from agents import (
        Agent,
        AgentHooks,
        FunctionTool,
        GuardrailFunctionOutput,
        InputGuardrail,
        InputGuardrailTripwireTriggered,
        ModelResponse,
        OutputGuardrail,
        OutputGuardrailTripwireTriggered,
        RunConfig,
        RunContextWrapper,
        Runner,
        RunResult,
        RunResultStreaming,
        RunState,
        ToolApprovalItem,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        TResponseInputItem,
    )
    from agents.run_config import CallModelData, ModelInputData, ToolExecutionConfig
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover — the extra is in the dev group
    raise ImportError(
        "helmlog.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'helmlog[openai-agents]'"
    ) from exc

from helmlog.events import HelmlogError, Message, ToolCallRequest
from helmlog.runtime import Agent as HelmAgent
from helmlog.runtime import (
    AskPause,
    CheckInDecision,
    MessageDeniedError,
    Tool,
    check_in_approved,
    check_in_declined,
    is_ask_pause,
)
from helmlog.runtime.lowlevel import Admitted, Ran, Refused, SteeredTurn, SteeringError

from ._governance import Governance

__all__ = [
    "INPUT_GUARDRAIL",
    "OUTPUT_GUARDRAIL",
    "TOOL_GUARDRAIL",
    "AgentsGovernance",
    "AgentsGovernanceError",
    "GovernedSession",
    "admitted_output",
    "to_input_items",
    "to_messages",
    "tool_from",
]

INPUT_GUARDRAIL = "helmlog-input"
OUTPUT_GUARDRAIL = "helmlog-output"
TOOL_GUARDRAIL = "helmlog-before-tool"


class AgentsGovernanceError(HelmlogError, ValueError):
    """The OpenAI Agents SDK integration was given or driven into something it refuses.

    ``reason`` names it: ``"bad-argument"`` (a constructor or method got the
    wrong kind of value: ``detail`` names which), ``"unsupported"`` (an agent
    part helmlog cannot govern: hosted tools, MCP servers, handoffs, a tool's
    own ``needs_approval`` or tool guardrails), ``"not-governed"`` (an agent
    ``govern`` did not
    return), ``"outside-session"`` (a governed agent run without
    ``GovernedSession.run``), ``"no-decider"`` (the SDK approved a call but
    nobody is named as having decided: use ``GovernedSession.approve``), or
    ``"asks-again"`` (a later rule asked again after an approval: decide it
    with ``helmlog approve|decline`` and run the state again). Fails closed:
    nothing ran that was not recorded. Not retryable as is.
    """

    code = "ERR_OPENAI_AGENTS"
    retryable = False
    REASONS = (
        "bad-argument",
        "unsupported",
        "not-governed",
        "outside-session",
        "no-decider",
        "asks-again",
    )

    def __init__(self, *, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(detail)


def _bad(detail: str) -> NoReturn:
    raise AgentsGovernanceError(reason="bad-argument", detail=detail)


# --------------------------------------------------------------------------
# Converters: SDK input items <-> helmlog messages
# --------------------------------------------------------------------------


def _field(item: Any, key: str) -> Any:
    if type(item) is dict:  # the SDK's input items: the hot path
        return item.get(key)
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)


def _text(content: Any) -> str:
    """The text of a message's content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(_field(part, "text") or "")
            for part in content
            if _field(part, "type") in ("input_text", "output_text", "text")
        )
    return ""


def _args(arguments: Any) -> Any:
    """Parsed call arguments; text that is not a JSON object stays text (the
    pipeline's validation refuses it, as the native loop does)."""
    if not isinstance(arguments, str):
        return arguments if arguments is not None else {}
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


@functools.lru_cache(maxsize=4096)
def _parsed(arguments: str) -> Any:
    return _args(arguments)


def _compared(arguments: Any) -> Any:
    """Arguments parsed for comparison only (cached: the SDK sends the whole
    history before each model call; never handed out, so never mutated)."""
    return _parsed(arguments) if isinstance(arguments, str) else _args(arguments)


class _Grouper:
    """SDK items grouped into helmlog messages, one item at a time.

    An assistant text and the calls it proposed are one helmlog message (one
    model reply); items helmlog has no message for (system prompts, reasoning,
    hosted tools) are ``(None, [index])``. ``head`` is the items' JSON array
    as last grouped (``_regrouped``) without its closing bracket, ``None``
    when they were not all JSON; ``count``: how many items that was.
    ``same`` holds, by message position, a grouped message and the planned
    one it was found equal to for the model (``_model_view``): compared
    again only when either is another object. ``messages``: how many groups
    are messages (counted as they are made, not at every model call).
    """

    __slots__ = ("count", "groups", "head", "messages", "names", "parse", "same")

    def __init__(self, parse: Callable[[Any], Any] = _args) -> None:
        self.groups: list[tuple[Message | None, list[int]]] = []
        self.names: dict[str, str] = {}
        self.head: bytes | None = None
        self.count = 0
        self.parse = parse
        self.same: dict[int, tuple[Message, Message]] = {}
        self.messages = 0

    def add(self, index: int, item: Any) -> None:
        groups = self.groups
        kind = _field(item, "type")
        role = _field(item, "role")
        last = groups[-1] if groups else None
        if kind == "function_call":
            call = ToolCallRequest(
                id=str(_field(item, "call_id")),
                name=str(_field(item, "name")),
                args=self.parse(_field(item, "arguments")),
            )
            self.names[call.id] = call.name
            if last is not None and last[0] is not None and last[0].role == "assistant":
                message = last[0]
                groups[-1] = (
                    Message(
                        role="assistant",
                        content=message.content,
                        tool_calls=(*message.tool_calls, call),
                    ),
                    [*last[1], index],
                )
            else:
                groups.append((Message(role="assistant", tool_calls=(call,)), [index]))
                self.messages += 1
        elif kind == "function_call_output":
            call_id = str(_field(item, "call_id"))
            output = _field(item, "output")
            groups.append(
                (
                    Message(
                        role="tool",
                        content=_text(output),
                        tool_call_id=call_id,
                        tool_name=self.names.get(call_id),
                    ),
                    [index],
                )
            )
            self.messages += 1
        elif role == "user" and kind in (None, "message"):
            groups.append(
                (Message(role="user", content=_text(_field(item, "content"))), [index])
            )
            self.messages += 1
        elif role == "assistant" and kind in (None, "message"):
            text = _text(_field(item, "content"))
            if (
                last is not None
                and last[0] is not None
                and last[0].role == "assistant"
                and not last[0].tool_calls
            ):
                groups[-1] = (
                    Message(role="assistant", content=last[0].content + text),
                    [*last[1], index],
                )
            else:
                groups.append((Message(role="assistant", content=text), [index]))
                self.messages += 1
        else:
            groups.append((None, [index]))


def _groups(
    items: Sequence[Any], parse: Callable[[Any], Any] = _args
) -> list[tuple[Message | None, list[int]]]:
    """SDK items grouped into helmlog messages, with the items each came from
    (``_Grouper``)."""
    grouper = _Grouper(parse)
    for index, item in enumerate(items):
        grouper.add(index, item)
    return grouper.groups


_JSON = msgspec.json.Encoder()
# ``json.dumps(..., separators=(",", ":"))``'s encoder, made once, not at
# every call (the same text).
_COMPACT = json.JSONEncoder(separators=(",", ":"))
# What follows a complete element of a JSON array: the next one's ``,``, or
# the array's ``]`` (``_regrouped``).
_AFTER_ITEM = frozenset(b",]")


def _regrouped(items: Sequence[Any], last: _Grouper | None) -> _Grouper:
    """``items`` grouped for comparison, continuing ``last`` (the same run's
    previous model call) when its items are, as JSON, the start of these.

    Why: the SDK sends the whole history again before every model call, grown
    at its end; grouping it all each time was the adapter's largest cost per
    call. Grouping is a function of the items' content, taken in order, so
    continuing from an equal prefix gives what grouping them all gives. Items
    that are not all JSON are grouped in full, every time.

    Why one encoding of the whole list: the items are one JSON array, whose
    elements are written one after another with a ``,`` between them; a
    JSON value never runs on past the ``,`` or ``]`` that follows it, so when
    this array's text starts with the last one's (its ``[`` and its ``count``
    elements) and goes on with ``,`` or ``]``, its first ``count`` items are,
    as JSON, the last ones (the per-item comparison it replaces, in one
    encoder call and one byte comparison).
    """
    try:
        whole: bytes | None = _JSON.encode(items)
    except (TypeError, ValueError):  # not JSON (msgspec.EncodeError is one)
        whole = None
    done = 0
    if whole is not None and last is not None and last.head is not None:
        head = last.head
        at = len(head)
        if (
            last.count
            and len(whole) > at
            and whole[at] in _AFTER_ITEM
            and whole.startswith(head)
        ):
            done = last.count
    if done:
        assert last is not None  # done > 0 only when continuing ``last``
        grouper = last
    else:
        grouper = _Grouper(_compared)
    for index in range(done, len(items)):
        grouper.add(index, items[index])
    grouper.head = None if whole is None else whole[:-1]
    grouper.count = len(items)
    return grouper


def to_messages(items: str | Sequence[Any]) -> tuple[Message, ...]:
    """The helmlog messages an SDK input (a string or input items) carries.

    Items with no helmlog counterpart (system prompts, reasoning, hosted tool
    calls) are left out.
    """
    if isinstance(items, str):
        return (Message(role="user", content=items),)
    return tuple(m for m, _ in _groups(items) if m is not None)


def to_input_items(messages: Sequence[Message]) -> list[TResponseInputItem]:
    """Responses-API input items for helmlog messages (the model's view)."""
    out: list[Any] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": message.content,
                }
            )
            continue
        if message.content or not message.tool_calls:
            out.append({"role": message.role, "content": message.content})
        for call in message.tool_calls:
            out.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.args
                    if isinstance(call.args, str)
                    else json.dumps(call.args, separators=(",", ":")),
                }
            )
    return out


def _same(a: Message, b: Message) -> bool:
    """Equal for the model: role, text, calls, the call answered."""
    return (
        a.role == b.role
        and a.content == b.content
        and a.tool_call_id == b.tool_call_id
        and [(c.id, c.name, c.args) for c in a.tool_calls]
        == [(c.id, c.name, c.args) for c in b.tool_calls]
    )


def _model_view(
    plan: Sequence[Message], items: Sequence[Any], run: _Run | None = None
) -> list[TResponseInputItem]:
    """The SDK's input rewritten to what helmlog decided the model sees.

    Where the SDK's messages line up with the plan one for one, each item is
    kept unless helmlog's message differs (an admitted input, a redacted tool
    result), so provider item ids and items helmlog has no message for stay
    in place. Otherwise (a window dropped or summarised turns, or the SDK was
    given less history than the session holds) the plan is the input, after
    any leading system items.
    """
    if run is None:
        grouper = _Grouper(_compared)
        for index, item in enumerate(items):
            grouper.add(index, item)
        known: dict[int, tuple[Message, Message]] = {}
    else:
        grouper = run.grouped = _regrouped(items, run.grouped)
        # The SDK sends the whole history before each model call: a pair
        # found equal last time (the same two objects) is not compared again.
        known = grouper.same
    groups = grouper.groups
    if grouper.messages == len(plan):
        # Where every message equals its planned one (the usual call: no
        # window, nothing redacted), the view is the SDK's items as they are:
        # the groups cover them in order, each once.
        seen_at = known.get
        position = 0
        for g, (message, _) in enumerate(groups):
            if message is None:
                continue
            target = plan[position]
            seen = seen_at(position)
            if seen is None or seen[0] is not message or seen[1] is not target:
                if not (message == target or _same(message, target)):
                    return _rewritten(plan, items, groups, g, position, known)
                known[position] = (message, target)
            position += 1
        return list(items)
    leading: list[Any] = []
    for message, at in groups:
        if message is not None:
            break
        leading.extend(items[i] for i in at)
    return [*leading, *to_input_items(plan)]


def _rewritten(
    plan: Sequence[Message],
    items: Sequence[Any],
    groups: list[tuple[Message | None, list[int]]],
    first: int,
    position: int,
    known: dict[int, tuple[Message, Message]],
) -> list[TResponseInputItem]:
    """``_model_view`` from group ``first`` (message ``position``), the first
    whose message differs from its planned one: each differing message's
    items replaced by the plan's, every other item kept (the groups before
    ``first`` are the items before its own, as they are)."""
    out: list[Any] = list(items[: groups[first][1][0]])
    for message, at in groups[first:]:
        if message is not None:
            target = plan[position]
            seen = known.get(position)
            position += 1
            if seen is None or seen[0] is not message or seen[1] is not target:
                if not (message == target or _same(message, target)):
                    out.extend(to_input_items([target]))
                    continue
                known[position - 1] = (message, target)
        if len(at) == 1:
            out.append(items[at[0]])
        else:
            out.extend([items[i] for i in at])
    return out


def _user_text(input: str | Sequence[Any]) -> str:
    if isinstance(input, str):
        return input
    users = [m for m in to_messages(input) if m.role == "user"]
    if not users:
        _bad("the run's input has no user message for the input moment")
    return users[-1].content


def _reply(response: ModelResponse) -> tuple[str, list[ToolCallRequest]]:
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    for item in response.output:
        kind = _field(item, "type")
        if kind == "message":
            text.append(_text(_field(item, "content")))
        elif kind == "function_call":
            calls.append(
                ToolCallRequest(
                    id=str(_field(item, "call_id")),
                    name=str(_field(item, "name")),
                    args=_args(_field(item, "arguments")),
                )
            )
    return "".join(text), calls


def _usage(response: ModelResponse) -> dict[str, int]:
    usage = response.usage
    return {
        "input_tokens": int(usage.input_tokens),
        "output_tokens": int(usage.output_tokens),
    }


def _call_of(item: ToolApprovalItem) -> ToolCallRequest | None:
    """The function call an SDK interruption holds (``None``: another kind)."""
    raw = item.raw_item
    if _field(raw, "type") != "function_call":
        return None
    return ToolCallRequest(
        id=str(_field(raw, "call_id")),
        name=str(_field(raw, "name")),
        args=_args(_field(raw, "arguments")),
    )


def _draft(output: Any) -> str:
    if isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(output)
    except TypeError:
        return str(output)


# --------------------------------------------------------------------------
# Tools across
# --------------------------------------------------------------------------


def tool_from(function_tool: FunctionTool) -> Tool:
    """A helmlog ``Tool`` running an Agents SDK function tool.

    What ``Tool.from_openai_agents(function_tool)`` returns.

    Name, description and parameters schema are kept; ``execute`` is the SDK's
    own invocation (its argument parsing, its failure handling) with a
    ``ToolContext`` that has no run context.
    """
    if not isinstance(function_tool, FunctionTool):
        _bad(
            "Tool.from_openai_agents takes an Agents SDK FunctionTool (from "
            f"@function_tool), got {type(function_tool).__name__}"
        )
    ft = function_tool

    async def execute(**kwargs: Any) -> Any:
        arguments = json.dumps(kwargs)
        context: ToolContext[Any] = ToolContext(
            context=None,
            tool_name=ft.name,
            tool_call_id=f"helmlog-{ft.name}",
            tool_arguments=arguments,
        )
        return await ft.on_invoke_tool(context, arguments)

    return Tool(ft.name, ft.description, ft.params_json_schema, execute)


async def _never(**_: Any) -> NoReturn:
    raise AgentsGovernanceError(
        reason="unsupported",
        detail="a recorded call was asked to run again (issue 27: exactly once)",
    )


# --------------------------------------------------------------------------
# One run of a governed agent
# --------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class _Run:
    """What one ``Runner.run`` of a session carries between the SDK's hooks."""

    session: GovernedSession
    identity: Mapping[str, Any] | None = None
    turn: SteeredTurn | None = None
    admitted: dict[str, Admitted] = dataclasses.field(default_factory=dict)
    refused: dict[str, Refused] = dataclasses.field(default_factory=dict)
    llm_started: float = 0.0
    # The SDK's input as grouped for the last model call (``_regrouped``).
    grouped: _Grouper | None = None

    async def attach(self) -> SteeredTurn:
        """The session's open turn (opened by the input guardrail, or re-attached
        from the stream when the SDK resumes a ``RunState``)."""
        if self.turn is None:
            session_id = self.session.id
            if session_id is None:
                raise AgentsGovernanceError(
                    reason="outside-session",
                    detail="a governed run has no helmlog turn: start it with "
                    "GovernedSession.run(agent, message)",
                )
            self.turn = await self.session.governance.steering.turn(session_id)
        return self.turn


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "helmlog_openai_agents_run", default=None
)


def _current() -> _Run:
    run = _RUN.get()
    if run is None:
        raise AgentsGovernanceError(
            reason="outside-session",
            detail="a governed agent ran outside helmlog: run it with "
            "AgentsGovernance(...).session().run(agent, input)",
        )
    return run


async def _input_moment(
    context: RunContextWrapper[Any], agent: Agent[Any], input: str | list[Any]
) -> GuardrailFunctionOutput:
    """Input moment: open the turn (rows filed); a refusal trips the wire."""
    run = _current()
    session = run.session
    try:
        turn = await session.governance.steering.open_turn(
            _user_text(input), session_id=session.id, identity=run.identity
        )
    except MessageDeniedError as refused:
        return GuardrailFunctionOutput(output_info=refused, tripwire_triggered=True)
    run.turn = turn
    session._id = turn.session_id
    return GuardrailFunctionOutput(output_info=turn.admitted, tripwire_triggered=False)


async def _output_moment(
    context: RunContextWrapper[Any], agent: Agent[Any], output: Any
) -> GuardrailFunctionOutput:
    """Output moment: finish the turn; a refusal trips the wire."""
    turn = await _current().attach()
    try:
        text = await turn.finish(_draft(output))
    except MessageDeniedError as refused:
        return GuardrailFunctionOutput(output_info=refused, tripwire_triggered=True)
    return GuardrailFunctionOutput(output_info=text, tripwire_triggered=False)


async def _model_input(data: CallModelData[Any]) -> ModelInputData:
    """Window moment before each model call: the model sees helmlog's plan."""
    run = _current()
    turn = run.turn or await run.attach()
    plan = await turn.model_request()
    run.llm_started = time.monotonic()
    return ModelInputData(
        input=_model_view(plan, data.model_data.input, run),
        instructions=data.model_data.instructions,
    )


async def _before_tool_guardrail(
    data: ToolInputGuardrailData,
) -> ToolGuardrailFunctionOutput:
    """A before-tool refusal: the model reads it as the tool's message."""
    refused = _current().refused.pop(data.context.tool_call_id, None)
    if refused is None:
        return ToolGuardrailFunctionOutput.allow()
    return ToolGuardrailFunctionOutput.reject_content(
        refused.text, output_info=refused.step
    )


_INPUT = InputGuardrail[Any](
    guardrail_function=_input_moment, name=INPUT_GUARDRAIL, run_in_parallel=False
)
_OUTPUT = OutputGuardrail[Any](guardrail_function=_output_moment, name=OUTPUT_GUARDRAIL)
_TOOL_INPUT = ToolInputGuardrail[Any](
    guardrail_function=_before_tool_guardrail, name=TOOL_GUARDRAIL
)


class _Hooks(AgentHooks[Any]):
    """The governed agent's hooks: each model reply recorded, then the agent's own."""

    def __init__(self, adapter: AgentsGovernance, inner: Any) -> None:
        self.adapter = adapter
        self.inner = inner

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        response: ModelResponse,
    ) -> None:
        run = _current()
        turn = run.turn or await run.attach()
        content, calls = _reply(response)
        await turn.model_reply(
            content,
            calls,
            usage=_usage(response),
            model=agent.model if isinstance(agent.model, str) else "",
            duration_ms=max(0, int((time.monotonic() - run.llm_started) * 1000)),
        )
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: Any, agent: Any, tool: Any, result: Any
    ) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


# --------------------------------------------------------------------------
# The adapter and its sessions
# --------------------------------------------------------------------------


class AgentsGovernance:
    """helmlog's act-table, ledger and approvals around OpenAI Agents SDK agents.

    Args:
        governance: the helmlog ``Governance``, or the built helmlog ``Agent``
            it wraps (its rules, store, redaction, watchers and registered
            tools; its provider ``framework_model("openai-agents")``).
        approver: who an approval given only through the SDK's
            ``state.approve(item)`` is recorded as; ``None`` (the default)
            refuses such an approval (``GovernedSession.approve`` names the
            person).

    ``govern(agent)`` returns the agent governed (a clone); ``session()`` is one
    helmlog session that ``run`` drives through ``Runner.run``.
    """

    def __init__(
        self, governance: Governance | HelmAgent, *, approver: str | None = None
    ) -> None:
        if isinstance(governance, HelmAgent):
            governance = Governance(governance)
        if not isinstance(governance, Governance):
            _bad(
                "AgentsGovernance takes a helmlog Governance or a built helmlog "
                f"Agent, got {type(governance).__name__}"
            )
        if approver is not None and (
            not isinstance(approver, str) or not approver.strip()
        ):
            _bad("approver must be a non-empty name or None")
        self.governance = governance
        self.approver = approver
        self._default_config: RunConfig | None = None

    def govern(self, agent: Agent[Any]) -> Agent[Any]:
        """A clone of ``agent`` whose input, model calls, function tools and output
        are governed. Run and resume it with the same clone (the SDK binds
        approvals to the agent object)."""
        if not isinstance(agent, Agent):
            _bad(f"govern takes an Agents SDK Agent, got {type(agent).__name__}")
        if self.is_governed(agent):
            return agent
        if agent.mcp_servers:
            _unsupported(agent, "MCP servers (put helmlog's McpProxy in front of them)")
        if agent.handoffs:
            _unsupported(agent, "handoffs (govern each agent and run it as a tool)")
        tools = []
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool):
                _unsupported(
                    agent, f"the {type(tool).__name__} (only function tools run here)"
                )
            if tool.needs_approval is not False:
                _unsupported(
                    agent,
                    f"tool '{tool.name}''s own needs_approval (approvals are "
                    "helmlog's: an ask rule or the tool's check_in)",
                )
            if tool.tool_input_guardrails or tool.tool_output_guardrails:
                # They would refuse or replace a call helmlog has recorded as
                # dispatched or answered: the record and the model would part.
                _unsupported(
                    agent,
                    f"tool '{tool.name}''s own tool guardrails (make them helmlog "
                    "before-tool / after-tool rules)",
                )
            tools.append(self._wrap(tool))
        return agent.clone(
            tools=tools,
            input_guardrails=[_INPUT, *agent.input_guardrails],
            output_guardrails=[*agent.output_guardrails, _OUTPUT],
            hooks=_Hooks(self, agent.hooks),
        )

    def session(
        self,
        session_id: str | None = None,
        *,
        identity: Mapping[str, Any] | None = None,
    ) -> GovernedSession:
        """A helmlog session: new (``None``: its id is minted by the first run)
        or an existing one (its next turn, or the resume of a paused one)."""
        if session_id is not None and (
            not isinstance(session_id, str) or not session_id
        ):
            _bad("session_id must be a non-empty string or None")
        if identity is not None and not isinstance(identity, Mapping):
            _bad("identity must be a mapping or None")
        return GovernedSession(self, session_id, identity)

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a default ``RunConfig``) with helmlog's model-input filter,
        and a reply's function calls run one at a time, in order (as the native
        loop runs them: the rows come in the same order)."""
        if base is None:
            if self._default_config is None:
                # Built once: a RunConfig resolves its own type hints when made.
                self._default_config = self.run_config(RunConfig())
            return self._default_config
        if not isinstance(base, RunConfig):
            _bad(
                f"run_config must be an Agents SDK RunConfig, got {type(base).__name__}"
            )
        if base.call_model_input_filter not in (None, _model_input):
            _bad(
                "run_config already has a call_model_input_filter: helmlog's decides "
                "what the model sees (use a window strategy on the helmlog agent)"
            )
        execution = base.tool_execution or ToolExecutionConfig()
        return dataclasses.replace(
            base,
            call_model_input_filter=_model_input,
            tool_execution=dataclasses.replace(
                execution, max_function_tool_concurrency=1
            ),
        )

    def is_governed(self, agent: object) -> bool:
        """Whether ``agent`` is one ``govern`` returned."""
        return (
            isinstance(agent, Agent)
            and isinstance(agent.hooks, _Hooks)
            and agent.hooks.adapter is self
        )

    def _tool(self, ft: FunctionTool, context: ToolContext[Any] | None) -> Tool:
        """The helmlog Tool for one call of ``ft`` (its execute: the SDK's call)."""
        if context is None:
            execute: Any = _never
        else:
            ctx = context

            async def execute(**kwargs: Any) -> Any:
                return await ft.on_invoke_tool(ctx, json.dumps(kwargs))

        return self.governance.tool_for(
            ft.name,
            execute,
            description=ft.description,
            input_schema=ft.params_json_schema,
        )

    def _probe(self, agent: Agent[Any], name: str) -> Tool:
        """The helmlog Tool for reading a recorded call of ``name`` (never runs)."""
        for tool in agent.tools:
            if isinstance(tool, FunctionTool) and tool.name == name:
                return self._tool(tool, None)
        return self.governance.tool_for(name, _never)

    def _wrap(self, ft: FunctionTool) -> FunctionTool:
        adapter = self
        # The helmlog Tool that reads a call of ``ft`` (its execute never runs:
        # ``_never``), found once per wrapped tool, not at each of its calls.
        probes: list[Tool] = []

        def probe() -> Tool:
            if not probes:
                probes.append(adapter._tool(ft, None))
            return probes[0]

        async def needs_approval(
            context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            # Before-tool, up to and including dispatch; an ask is the SDK's
            # approval (it evaluates this before any tool guardrail).
            run = _current()
            turn = run.turn or await run.attach()
            call = ToolCallRequest(id=call_id, name=ft.name, args=params)
            try:
                outcome = await turn.before_tool(call, probe())
            except SteeringError as exc:
                if exc.reason != "pending-question":
                    raise
                # An earlier call of this reply waits on a person: this one
                # waits too (an interruption); its rules run when it is approved.
                return True
            if isinstance(outcome, Admitted):
                run.admitted[call_id] = outcome
                return False
            if isinstance(outcome, Refused):
                run.refused[call_id] = outcome
                return False
            # A recorded result (decided and run elsewhere) is read by invoke.
            return not isinstance(outcome, Ran)

        async def invoke(context: ToolContext[Any], arguments: str) -> Any:
            run = _current()
            turn = run.turn or await run.attach()
            call_id = context.tool_call_id
            admitted = run.admitted.pop(call_id, None)
            if admitted is not None:
                # ``after_tool`` reads the call's arguments from the record (the
                # admitted ones ran): the SDK's text is not parsed again here.
                call = ToolCallRequest(id=call_id, name=ft.name, args=admitted.args)
                started = time.monotonic()
                try:
                    result = await ft.on_invoke_tool(
                        context, _COMPACT.encode(admitted.args)
                    )
                    error = False
                except Exception as exc:  # noqa: BLE001 — G18: a raise is the tool's result
                    result, error = str(exc) or type(exc).__name__, True
                after = await turn.after_tool(
                    call,
                    probe(),
                    result,
                    error=error,
                    duration_ms=max(0, int((time.monotonic() - started) * 1000)),
                )
                return _read(after, call.id)
            # Resumed after an approval (the SDK's, or a second process's), or
            # a call needs_approval could not see: the pipeline re-enters.
            call = ToolCallRequest(id=call_id, name=ft.name, args=_args(arguments))
            tool = adapter._tool(ft, context)
            outcome: Any = await turn.call_tool(call, tool)
            if is_ask_pause(outcome):
                decision = run.session._decision(call.id)
                outcome = await turn.resume_tool(outcome.checkpoint, decision, tool)
            return _read(outcome, call.id)

        # The SDK resolves the wrapper's type hints at every call (to choose
        # its context object); resolved once here, they are not re-evaluated
        # from this module's string annotations (a compile per hint per call).
        invoke.__annotations__ = dict(_INVOKE_HINTS)
        return dataclasses.replace(
            ft,
            on_invoke_tool=invoke,
            needs_approval=needs_approval,
            tool_input_guardrails=[_TOOL_INPUT],
        )


_INVOKE_HINTS: Mapping[str, Any] = {
    "context": ToolContext[Any],
    "arguments": str,
    "return": Any,
}
"""The governed ``on_invoke_tool``'s hints, as objects (see ``_wrap``)."""


def _read(outcome: Ran | Refused | AskPause, call_id: str) -> str:
    """What the model reads of a call's outcome (a pause cannot be read)."""
    if isinstance(outcome, AskPause):
        raise AgentsGovernanceError(
            reason="asks-again",
            detail=f"call '{call_id}' waits on a person again "
            f"({outcome.ask.question}): decide it with helmlog approve|decline, "
            "then run the state again",
        )
    return outcome.text


def _unsupported(agent: Agent[Any], what: str) -> NoReturn:
    raise AgentsGovernanceError(
        reason="unsupported",
        detail=f"agent '{agent.name}' has {what}: helmlog cannot govern it here",
    )


class GovernedSession:
    """One helmlog session driven by the Agents SDK's ``Runner``.

    ``run(agent, input)`` runs a governed agent (a message: a turn; a
    ``RunState``: the paused turn resumed). Decide the SDK's interruptions with
    ``approve``/``reject`` (who decided is recorded), or from a second process
    with ``helmlog approve|decline``: the next ``run`` of the state reads the
    recorded outcome, and the tool runs exactly once.
    """

    def __init__(
        self,
        adapter: AgentsGovernance,
        session_id: str | None,
        identity: Mapping[str, Any] | None,
    ) -> None:
        self.adapter = adapter
        self._id = session_id
        self.identity = identity
        self._decisions: dict[str, CheckInDecision] = {}

    @property
    def id(self) -> str | None:
        """The helmlog session id (``None`` until the first run opens it)."""
        return self._id

    @property
    def governance(self) -> Governance:
        return self.adapter.governance

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, ...)`` under this session's governance.

        ``kwargs`` go to ``Runner.run`` (``context``, ``max_turns``, ``hooks``…).
        The turn's identity (what every rule's context carries) is the
        session's, else a mapping ``context``.
        A refused input or output raises the SDK's tripwire exception (its
        ``guardrail_result.output.output_info`` is the ``MessageDeniedError``).
        """
        config, run = self._prepared(agent, run_config, kwargs)
        token = _RUN.set(run)
        try:
            if isinstance(input, RunState):
                await self._reconcile(run, input, agent)
            try:
                return await Runner.run(agent, input, run_config=config, **kwargs)
            except Exception as exc:
                await self._failed(run, exc)
                raise
        finally:
            _RUN.reset(token)

    async def run_streamed(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, ...)`` under this session's
        governance; consume ``stream_events()`` as usual (the same hooks run).

        The stream runs after this returns, so a run that raises while it is
        consumed is recorded by ``await session.fail(exc)`` (as ``run`` does
        by itself); until then the turn stays open.
        """
        config, run = self._prepared(agent, run_config, kwargs)
        token = _RUN.set(run)
        try:
            if isinstance(input, RunState):
                await self._reconcile(run, input, agent)
            # The SDK's stream task copies the context now: it carries ``run``.
            return Runner.run_streamed(agent, input, run_config=config, **kwargs)
        finally:
            _RUN.reset(token)

    async def fail(self, exc: BaseException) -> None:
        """Record that the session's open turn failed (``error.fatal``), as the
        native loop records a run that raised; nothing if no turn is open."""
        if self._id is None:
            return
        try:
            turn = await self.governance.steering.turn(self._id)
        except SteeringError as error:
            if error.reason == "no-open-turn":
                return
            raise
        await turn.fail(exc)

    def _prepared(
        self, agent: Agent[Any], run_config: RunConfig | None, kwargs: Mapping[str, Any]
    ) -> tuple[RunConfig, _Run]:
        if not self.adapter.is_governed(agent):
            raise AgentsGovernanceError(
                reason="not-governed",
                detail="run takes the agent AgentsGovernance.govern returned",
            )
        config = self.adapter.run_config(run_config)
        context = kwargs.get("context")
        identity = self.identity
        if identity is None and isinstance(context, Mapping):
            identity = context  # as LangChain's: a mapping run context
        return config, _Run(session=self, identity=identity)

    @staticmethod
    async def _failed(run: _Run, exc: Exception) -> None:
        """A run raised: its turn fails once, unless the raise is a refusal
        already recorded, or helmlog's own (it failed closed, the turn waits)."""
        if isinstance(
            exc,
            InputGuardrailTripwireTriggered
            | OutputGuardrailTripwireTriggered
            | AgentsGovernanceError,
        ) or isinstance(exc.__cause__, AgentsGovernanceError):
            return
        if run.turn is not None:
            await run.turn.fail(exc)

    def approve(
        self,
        state: RunState[Any],
        item: ToolApprovalItem,
        *,
        by: str,
        note: str | None = None,
    ) -> None:
        """Approve an interruption through the SDK's state, recording who decided."""
        call_id = self._check(state, item, by)
        self._decisions[call_id] = check_in_approved(by=by, note=note)
        state.approve(item)

    def reject(
        self,
        state: RunState[Any],
        item: ToolApprovalItem,
        *,
        by: str,
        note: str | None = None,
    ) -> None:
        """Decline an interruption; the next ``run`` records it and the model
        reads helmlog's refusal."""
        call_id = self._check(state, item, by)
        self._decisions[call_id] = check_in_declined(by=by, note=note)
        state.reject(item)

    async def question(self, item: ToolApprovalItem) -> AskPause:
        """helmlog's pause behind an SDK interruption: the question, the rule
        that asked, the checkpoint (``helmlog approve`` takes the session id).

        Raises:
            AgentsGovernanceError: ``"bad-argument"``, ``item`` is not an
                interruption of this session that waits on a person.
        """
        if not isinstance(item, ToolApprovalItem):
            _bad(f"question takes a ToolApprovalItem, got {type(item).__name__}")
        call = _call_of(item)
        if self._id is None or call is None:
            _bad("question takes an interruption of this session's function tools")
        turn = await self.governance.steering.turn(self._id)
        outcome = await turn.call_tool(
            call, self.governance.tool_for(call.name, _never)
        )
        if not is_ask_pause(outcome):
            _bad(f"call '{call.id}' does not wait on a person (it was decided)")
        assert isinstance(outcome, AskPause)
        return outcome

    def _check(self, state: Any, item: Any, by: Any) -> str:
        if not isinstance(state, RunState):
            _bad(f"approve/reject take the SDK's RunState, got {type(state).__name__}")
        if not isinstance(item, ToolApprovalItem):
            _bad(f"approve/reject take a ToolApprovalItem, got {type(item).__name__}")
        if not isinstance(by, str) or not by.strip():
            _bad("approve/reject need who decided: a non-empty by=")
        call_id = _field(item.raw_item, "call_id")
        if not isinstance(call_id, str) or not call_id:
            _bad("the approval item has no call id")
        return call_id

    def _decision(self, call_id: str) -> CheckInDecision:
        decision = self._decisions.pop(call_id, None)
        if decision is not None:
            return decision
        if self.adapter.approver is not None:
            return check_in_approved(by=self.adapter.approver)
        raise AgentsGovernanceError(
            reason="no-decider",
            detail=f"call '{call_id}' was approved in the SDK's state with nobody "
            "named: use GovernedSession.approve(state, item, by=...), or "
            "AgentsGovernance(..., approver=...)",
        )

    async def _reconcile(
        self, run: _Run, state: RunState[Any], agent: Agent[Any]
    ) -> None:
        """Bring the SDK's interruptions in line with helmlog's record.

        A pause decided elsewhere (``helmlog approve|decline``) is approved or
        rejected in the SDK's state with the recorded outcome; a decline given
        here is recorded now, so the model reads helmlog's refusal; a call that
        waited behind another's question, that question settled, is walked.
        """
        calls = [
            (i, c) for i in state.get_interruptions() if (c := _call_of(i)) is not None
        ]
        if not calls:
            return
        turn = await run.attach()
        for item, call in calls:
            probe = self.adapter._probe(agent, call.name)
            try:
                # Re-entrant: a pending pause or a recorded outcome is read
                # back; a call that waited behind a question is walked now.
                outcome: Any = await turn.before_tool(call, probe)
            except SteeringError as exc:
                if exc.reason != "pending-question":
                    raise
                continue  # still behind another call's question
            if is_ask_pause(outcome):
                decision = self._decisions.get(call.id)
                if decision is None or decision.approved:
                    continue  # still pending, or run by ``invoke`` in the SDK's loop
                del self._decisions[call.id]
                outcome = await turn.resume_tool(outcome.checkpoint, decision, probe)
            if isinstance(outcome, Admitted):
                run.admitted[call.id] = outcome
                state.approve(item)
            elif isinstance(outcome, Ran):
                state.approve(item)
            elif isinstance(outcome, Refused):
                state.reject(item, rejection_message=outcome.text)


def admitted_output(result: RunResult) -> str:
    """The final answer as helmlog's output moment left it (a transform
    applied), from the governed run's output guardrail."""
    for guardrail in result.output_guardrail_results:
        if guardrail.guardrail.get_name() == OUTPUT_GUARDRAIL:
            info = guardrail.output.output_info
            if isinstance(info, str):
                return info
    raise AgentsGovernanceError(
        reason="bad-argument",
        detail="the result has no helmlog output (not a governed run that finished)",
    )
