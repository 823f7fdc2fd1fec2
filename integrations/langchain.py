"""helmlog's governance inside a LangChain v1 agent (``create_agent(middleware=...)``).

Pattern: one ``AgentMiddleware`` driving a ``SteeredTurn`` at the five moments:
         input in ``before_agent``, the window and the output in
         ``wrap_model_call``, both tool moments in ``wrap_tool_call`` around the
         tool's own handler; an ask is a LangGraph ``interrupt``.
Role:    integrations layer, the ``helmlog[langchain]`` extra; imports LangChain
         at its top. ``tool_from`` backs ``Tool.from_langchain``.

Laws: G15 (a denial is the tool's message), G18, G25, G33, G35, G39, G59,
G63, G64 (one interrupt per call), R9.
Why the session id is a state key, not the thread config: state is
checkpointed with the thread, so a resumed run (another process with the same
checkpointer) finds it, and a run without a thread still carries it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Annotated, Any, Final, Literal, NotRequired, TypeAlias, cast

import msgspec

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
    )
    from langchain.agents.middleware.types import ExtendedModelResponse
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        ToolMessage,
    )
    from langchain_core.tools import BaseTool
    from langgraph.errors import GraphBubbleUp
    from langgraph.prebuilt.tool_node import ToolCallRequest as LcToolCall
    from langgraph.runtime import Runtime
    from langgraph.types import Command, interrupt
    from langsmith.utils import tracing_is_enabled
    from pydantic import BaseModel, StringConstraints
    from typing_extensions import TypedDict
except ImportError as exc:  # the module IS the optional extra
    raise ImportError(
        "helmlog.integrations.langchain needs LangChain v1: "
        "pip install 'helmlog[langchain]'"
    ) from exc

from helmlog.events import Message, ToolCallRequest, shape
from helmlog.runtime import (
    Agent,
    AskPause,
    CheckInDecision,
    Tool,
    check_in_approved,
    check_in_declined,
)
from helmlog.runtime.lowlevel import Admitted, Ran, Refused, SteeredTurn

from ._governance import Governance

__all__ = [
    "RECORDED",
    "SESSION_KEY",
    "Approval",
    "HelmlogMiddleware",
    "HelmlogState",
    "TracedHelmlogMiddleware",
    "from_messages",
    "governance",
    "to_messages",
    "tool_calls_of",
    "tool_from",
]

SESSION_KEY: Final = "helmlog_session_id"
"""The graph-state key holding the helmlog session id of the thread's run."""

RECORDED: Final = "helmlog:recorded"
"""Resume value: the ask was decided elsewhere (``helmlog approve``, the
approvals page); read the recorded outcome: ``Command(resume=RECORDED)``.
(LangGraph takes ``Command(resume=None)`` for "no resume value".)"""


class HelmlogState(AgentState[Any]):
    """The agent state plus the helmlog session id (input and output: pass one
    to continue a known session; read it from the result)."""

    helmlog_session_id: NotRequired[str]


class Approval(TypedDict):
    """A decision as plain data: ``{"approved": True, "by": "dana@ops"}``."""

    approved: bool
    by: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    note: NotRequired[str | None]


# What ``interrupt`` validates a resume value against (LangGraph's own check:
# a bad answer raises pydantic's ValidationError and nothing is saved).
Resume: TypeAlias = CheckInDecision | Approval | Literal["helmlog:recorded"]
_RESUME = cast("type[Any]", Resume)

Handler: TypeAlias = Callable[[LcToolCall], Awaitable[ToolMessage | Command[Any]]]
ModelOut: TypeAlias = "ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]"

# The framework's own tool call the pipeline's execute step runs: the request
# and the handler of the ``wrap_tool_call`` in progress (per asyncio task, so
# LangGraph's concurrent tool calls each see their own).
_RUNNING: contextvars.ContextVar[_Running | None] = contextvars.ContextVar(
    "helmlog_langchain_running", default=None
)


class ToolFailed(Exception):
    """The framework's tool call ended in an error message (``status="error"``).

    Raised by the execute step so the pipeline records the call as one that
    raised (G18: the after-tool walk sees ``error=True``).
    """


class _Running:
    """One ``wrap_tool_call`` in progress: what executing means, what it gave."""

    __slots__ = ("handler", "out", "request")

    def __init__(self, request: LcToolCall, handler: Handler) -> None:
        self.request = request
        self.handler = handler
        self.out: ToolMessage | Command[Any] | None = None


# -- messages ----------------------------------------------------------------


def _text(content: Any) -> str:
    """A message's text (LangChain content may be a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    raise TypeError(f"a message's content is text or blocks, got {shape(content)}")


def tool_calls_of(message: AIMessage) -> tuple[ToolCallRequest, ...]:
    """The calls an ``AIMessage`` proposed, as helmlog's ``ToolCallRequest``s.

    Raises:
        ValueError: a call without an id (helmlog records calls by id).
    """
    calls = []
    for tc in message.tool_calls:
        if not tc.get("id"):
            raise ValueError(
                f"tool call '{tc['name']}' has no id; helmlog records calls by id"
            )
        calls.append(
            ToolCallRequest(id=str(tc["id"]), name=tc["name"], args=dict(tc["args"]))
        )
    return tuple(calls)


def to_messages(messages: Sequence[BaseMessage]) -> tuple[Message, ...]:
    """LangChain messages as helmlog ``Message``s (system messages are left out:
    a helmlog history holds user, assistant and tool messages).

    Raises:
        TypeError: a message of another kind (a ``ChatMessage``, a ``dict``).
    """
    out: list[Message] = []
    for m in messages:
        if isinstance(m, HumanMessage):
            out.append(Message(role="user", content=_text(m.content)))
        elif isinstance(m, AIMessage):
            out.append(
                Message(
                    role="assistant",
                    content=_text(m.content),
                    tool_calls=tool_calls_of(m),
                )
            )
        elif isinstance(m, ToolMessage):
            out.append(
                Message(
                    role="tool",
                    content=_text(m.content),
                    tool_call_id=m.tool_call_id,
                    tool_name=m.name,
                )
            )
        elif m.type != "system":
            raise TypeError(f"to_messages(): no helmlog role for a {type(m).__name__}")
    return tuple(out)


def from_messages(messages: Sequence[Message]) -> list[AnyMessage]:
    """helmlog ``Message``s as LangChain messages (a window's new summary, say)."""
    out: list[AnyMessage] = []
    for m in messages:
        if m.role == "assistant":
            out.append(
                AIMessage(
                    content=m.content,
                    tool_calls=[
                        {"name": c.name, "args": dict(c.args), "id": c.id}
                        for c in m.tool_calls
                    ],
                )
            )
        elif m.role == "tool":
            out.append(
                ToolMessage(
                    content=m.content,
                    tool_call_id=m.tool_call_id or "",
                    name=m.tool_name,
                )
            )
        else:
            out.append(HumanMessage(content=m.content))
    return out


def _windowed(
    sent: Sequence[AnyMessage],
    history: tuple[Message, ...],
    planned: tuple[Message, ...],
) -> list[AnyMessage] | None:
    """The messages the model is sent: the window's plan over the record, as
    the thread's own message objects; ``None`` when that is ``sent`` as is.

    The thread may hold what the record does not (a user message the input
    rules refused stays in LangGraph's state; G35/G36: it never reaches the
    model again): each committed message is matched, in order, to the next
    thread message it is; a planned message with no match (a window's
    summary) becomes a new LangChain message.
    """
    plan_is_history = len(planned) == len(history) and all(
        p is h for p, h in zip(planned, history, strict=True)
    )
    if plan_is_history and len(sent) == len(history):
        return None
    at: dict[int, AnyMessage] = {}
    j = 0
    for i, h in enumerate(history):
        k = j
        while k < len(sent) and not _same(sent[k], h):
            k += 1
        if k < len(sent):
            at[i] = sent[k]
            j = k + 1
    by_identity = {id(h): i for i, h in enumerate(history)}
    out: list[AnyMessage] = []
    for p in planned:
        index = by_identity.get(id(p))
        found = at.get(index) if index is not None else None
        out.extend([found] if found is not None else from_messages([p]))
    return out


def _same(lc: BaseMessage, m: Message) -> bool:
    """Whether a thread message is the committed message ``m``."""
    if m.role == "tool":
        return isinstance(lc, ToolMessage) and lc.tool_call_id == m.tool_call_id
    if m.role == "assistant":
        return (
            isinstance(lc, AIMessage)
            and [c["id"] for c in lc.tool_calls] == [c.id for c in m.tool_calls]
            and _text(lc.content) == m.content
        )
    return isinstance(lc, HumanMessage) and _text(lc.content) == m.content


def _usage(message: AIMessage) -> dict[str, int]:
    usage: Mapping[str, Any] = message.usage_metadata or {}
    return {k: v for k, v in usage.items() if isinstance(v, int)}


def _stop_reason(message: AIMessage) -> str | None:
    meta = message.response_metadata or {}
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    return reason if isinstance(reason, str) else None


# -- tools -------------------------------------------------------------------


def _schema_of(tool: BaseTool) -> dict[str, Any]:
    """The JSON schema of what the model sends (injected arguments left out)."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return dict(schema)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    raise TypeError(f"tool '{tool.name}': no JSON schema for {shape(schema)}")


def tool_from(tool: BaseTool) -> Tool:
    """A LangChain tool as a helmlog ``Tool`` (``Tool.from_langchain``).

    Name, description and input schema are the tool's; executing it is the
    tool's own ``ainvoke`` (its validation, its callbacks), and what it
    returns is the tool's raw output, so a helmlog agent's after-tool rules
    see the value the tool gave.

    Raises:
        TypeError: ``tool`` is not a LangChain ``BaseTool``.
    """
    if not isinstance(tool, BaseTool):
        raise TypeError(
            f"Tool.from_langchain() takes a LangChain BaseTool (@tool, "
            f"StructuredTool), got {shape(tool)}"
        )

    async def execute(**kwargs: Any) -> Any:
        return await tool.ainvoke(kwargs)

    return Tool(tool.name, tool.description, _schema_of(tool), execute)


async def _run_framework_tool(**kwargs: Any) -> Any:
    """The pipeline's execute step: the ``wrap_tool_call`` handler, i.e. the
    framework's own tool call with the arguments as the chain admitted them."""
    running = _RUNNING.get()
    if running is None:
        raise RuntimeError("a LangChain tool ran outside helmlog's wrap_tool_call")
    call = running.request.tool_call
    request = running.request.override(tool_call={**call, "args": kwargs})
    out = await running.handler(request)
    running.out = out
    message = _tool_message(out, str(call["id"]))
    if message.status == "error":
        raise ToolFailed(_text(message.content))
    return message.content


def _tool_message(out: ToolMessage | Command[Any], call_id: str) -> ToolMessage:
    """The ``ToolMessage`` a tool call gave (itself, or inside its ``Command``)."""
    if isinstance(out, ToolMessage):
        return out
    update = out.update if isinstance(out.update, Mapping) else {}
    for m in update.get("messages", ()):
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id:
            return m
    raise TypeError(
        f"tool call {call_id} returned a Command without its ToolMessage; "
        "helmlog governs what the model reads, so it needs one"
    )


def _answer(
    running: _Running, call: ToolCallRequest, outcome: Ran | Refused
) -> ToolMessage | Command[Any]:
    """What the model reads of the call: the verdict as the tool's message."""
    error = isinstance(outcome, Refused) or outcome.error or outcome.denied
    status: Literal["success", "error"] = "error" if error else "success"
    out = running.out
    if out is None or not isinstance(outcome, Ran):
        # Refused, or ran in another process (an approval decided elsewhere).
        return ToolMessage(
            content=outcome.text, tool_call_id=call.id, name=call.name, status=status
        )
    ran = _tool_message(out, call.id)
    if ran.content == outcome.text and ran.status == status:
        return out  # what the tool said is what the model reads: no copy
    message = ran.model_copy(update={"content": outcome.text, "status": status})
    if isinstance(out, ToolMessage):
        return message
    update = dict(out.update) if isinstance(out.update, Mapping) else {}
    update["messages"] = [
        message if m is ran else m for m in update.get("messages", ())
    ]
    return Command(graph=out.graph, update=update, resume=out.resume, goto=out.goto)


def _decision(answer: CheckInDecision | Approval) -> CheckInDecision:
    if isinstance(answer, CheckInDecision):
        return answer
    note = answer.get("note")
    if answer["approved"]:
        return check_in_approved(answer["by"], note)
    return check_in_declined(answer["by"], note)


def _ask_value(pause: AskPause, call: ToolCallRequest) -> dict[str, Any]:
    """The interrupt's payload: what a person needs to decide, and the handle."""
    cp = pause.checkpoint
    args = call.args if isinstance(cp.call, msgspec.UnsetType) else cp.call.args
    return {
        "type": "helmlog_ask",
        "kind": pause.kind,
        "question": pause.ask.question,
        "detail": pause.ask.detail,
        "rule": pause.ask.middleware,
        "tool": pause.tool_name,
        "tool_call_id": pause.tool_call_id,
        "args": args,
        "session_id": pause.session_id,
        "checkpoint": cp.to_json(),
    }


# -- the middleware ----------------------------------------------------------


class HelmlogMiddleware(AgentMiddleware[HelmlogState, Any, Any]):
    """Runs a helmlog agent's act-table inside ``create_agent`` and records every
    decision into a helmlog session (the thread's ``helmlog_session_id``).

    Async only: run the agent with ``ainvoke``/``astream`` (the session's
    store is async). An ask interrupts the run; resume it with
    ``Command(resume=check_in_approved(by=...))``, a plain
    ``{"approved": bool, "by": str, "note": ...}``, or ``Command(resume=RECORDED)``
    once the ask was decided on helmlog's page or CLI. Needs a checkpointer
    for asks, as every LangGraph interrupt does.

    Why the wrap hooks are plain methods returning coroutines: ``create_agent``
    wraps every ``wrap_*`` hook in langsmith's ``traceable``, which runs an
    ``async def`` through two thread hops per call even with tracing off
    (~250 µs a tool call here, a third of the call: bench/integrations);
    a plain method it runs inline (~20 µs), and LangChain awaits what it
    returns. With LangSmith tracing on, ``governance`` builds the
    ``async def`` form (``TracedHelmlogMiddleware``), so each hook's span
    covers its work.
    """

    state_schema = HelmlogState

    def __init__(self, governance: Governance) -> None:
        super().__init__()
        if not isinstance(governance, Governance):
            raise TypeError(
                f"HelmlogMiddleware takes a helmlog Governance, got {shape(governance)}"
            )
        self.governance = governance
        self.tools: Sequence[BaseTool] = ()
        self._tools: dict[tuple[str, int], Tool] = {}

    @property
    def name(self) -> str:
        return "helmlog"

    # -- input ---------------------------------------------------------------

    async def abefore_agent(
        self, state: HelmlogState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """The input moment on the run's user message; opens the turn.

        The run's LangGraph context, when it is a mapping (``ainvoke(...,
        context={"user": ...})``), is the turn's identity (G13: what every
        rule's context carries); else the default, the session id.
        """
        messages = state["messages"]
        last = messages[-1] if messages else None
        if not isinstance(last, HumanMessage):
            raise ValueError(
                "a governed LangChain run starts on a user message: the input's "
                f"last message is {shape(last)}"
            )
        context = runtime.context
        turn = await self.governance.steering.open_turn(
            _text(last.content),
            session_id=state.get(SESSION_KEY),
            identity=dict(context) if isinstance(context, Mapping) else None,
        )
        update: dict[str, Any] = {SESSION_KEY: turn.session_id}
        if turn.admitted != last.content:
            update["messages"] = [HumanMessage(content=turn.admitted, id=last.id)]
        return update

    # -- window, model reply, output ------------------------------------------

    def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Coroutine[Any, Any, ModelOut]:
        """The window on the request; the reply recorded; the output moment on a
        final answer (a refused answer raises ``MessageDeniedError``).

        A plain method returning the coroutine LangChain awaits (see the
        class's note on langsmith's ``traceable``)."""
        return self._model_call(request, handler)

    async def _model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelOut:
        turn = self._turn(request.state)
        planned = await turn.model_request()
        windowed = _windowed(request.messages, turn.history, planned)
        if windowed is not None:
            request = request.override(messages=windowed)
        started = time.monotonic()
        try:
            response = await handler(request)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            await turn.fail(exc)
            raise
        index, reply = _reply_of(response)
        calls = tool_calls_of(reply)
        draft = _text(reply.content)
        await turn.model_reply(
            draft,
            calls,
            usage=_usage(reply),
            model=str((reply.response_metadata or {}).get("model_name", "")),
            stop_reason=_stop_reason(reply),
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        if calls:
            return response
        answer = await turn.finish(draft)
        if answer == draft:
            return response
        result = list(response.result)
        result[index] = reply.model_copy(update={"content": answer})
        return ModelResponse(
            result=result, structured_response=response.structured_response
        )

    # -- the tool moments -------------------------------------------------------

    def awrap_tool_call(
        self, request: LcToolCall, handler: Handler
    ) -> Coroutine[Any, Any, ToolMessage | Command[Any]]:
        """Before-tool, the tool's own handler, after-tool (one pipeline, split
        around the handler so LangGraph's parallel tool calls stay parallel);
        a refusal is the tool's message (``status="error"``); an ask interrupts.

        A plain method returning the coroutine LangChain awaits (see the
        class's note on langsmith's ``traceable``).
        """
        return self._tool_call(request, handler)

    async def _tool_call(
        self, request: LcToolCall, handler: Handler
    ) -> ToolMessage | Command[Any]:
        turn = self._turn(request.state)
        tc = request.tool_call
        call = ToolCallRequest(id=str(tc["id"]), name=tc["name"], args=tc["args"])
        tool = self._tool_for(request)
        running = _Running(request, handler)
        outcome = await turn.before_tool(call, tool)
        if isinstance(outcome, Admitted):
            outcome = await self._ran(turn, call, tool, running, outcome.args)
        token = _RUNNING.set(running)  # a resumed call runs in the pipeline
        try:
            # One interrupt per call (G64: a later ask on an approved call is
            # a denial), so LangGraph's by-order resume values always match.
            while isinstance(outcome, AskPause):
                answer = interrupt(_ask_value(outcome, call), response_schema=_RESUME)
                if answer == RECORDED:
                    # Decided elsewhere: the fold holds the outcome; if the ask
                    # still waits, the loop interrupts again (the next index).
                    outcome = await turn.call_tool(call, tool)
                else:
                    outcome = await turn.resume_tool(
                        outcome.checkpoint, _decision(answer), tool
                    )
        finally:
            _RUNNING.reset(token)
        return _answer(running, call, outcome)

    async def _ran(
        self,
        turn: SteeredTurn,
        call: ToolCallRequest,
        tool: Tool,
        running: _Running,
        args: Any,
    ) -> Ran | Refused | AskPause:
        """Run the admitted call with the framework's handler, then after-tool.

        A raise is the call's result (G18: ``error=True``, its text), as the
        pipeline's execute step records it; a LangGraph interrupt inside the
        tool propagates (the framework's own pause).
        """
        request = running.request
        if args != request.tool_call["args"]:
            request = request.override(tool_call={**request.tool_call, "args": args})
        started = time.monotonic()
        try:
            out = await running.handler(request)
        except GraphBubbleUp:
            raise
        except Exception as exc:  # noqa: BLE001 — G18: a raise is the tool's result
            result: Any = str(exc) or type(exc).__name__
            error = True
        else:
            running.out = out
            message = _tool_message(out, call.id)
            result, error = message.content, message.status == "error"
        duration_ms = int((time.monotonic() - started) * 1000)
        return await turn.after_tool(
            call, tool, result, error=error, duration_ms=duration_ms
        )

    # -- helpers -------------------------------------------------------------------

    def _turn(self, state: Mapping[str, Any]) -> SteeredTurn:
        """The handle on the thread's open turn (its session id is in the state).

        Each of the handle's operations checks that the turn is open (a
        ``SteeringError`` names it otherwise), so no separate ``turn()``
        round trip is made per hook: a tool call is the hot path.
        """
        sid = state.get(SESSION_KEY)
        if not isinstance(sid, str) or not sid:
            raise RuntimeError(
                f"no helmlog session in the graph state ('{SESSION_KEY}'): "
                "HelmlogMiddleware's before_agent did not run for this thread"
            )
        return SteeredTurn(self.governance.steering, sid, "")

    def _tool_for(self, request: LcToolCall) -> Tool:
        """The helmlog ``Tool`` around this framework tool (built once per tool)."""
        name = request.tool_call["name"]
        lc = request.tool
        key = (name, id(lc))
        found = self._tools.get(key)
        if found is None:
            found = self.governance.tool_for(
                name,
                _run_framework_tool,
                description="" if lc is None else lc.description,
                input_schema=None if lc is None else _schema_of(lc),
            )
            self._tools[key] = found
        return found


def _reply_of(response: ModelResponse[Any]) -> tuple[int, AIMessage]:
    for i in range(len(response.result) - 1, -1, -1):
        m = response.result[i]
        if isinstance(m, AIMessage):
            return i, m
    raise TypeError("the model call gave no AIMessage for helmlog to record")


class TracedHelmlogMiddleware(HelmlogMiddleware):
    """``HelmlogMiddleware`` with ``async def`` wrap hooks, for LangSmith tracing:
    langsmith's ``traceable`` then keeps each hook's span open over its work
    (the tool's own run inside it), at the price of its two thread hops per
    call. ``governance`` builds it when tracing is on."""

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelOut:
        return await self._model_call(request, handler)

    async def awrap_tool_call(
        self, request: LcToolCall, handler: Handler
    ) -> ToolMessage | Command[Any]:
        return await self._tool_call(request, handler)


def governance(
    rules: Agent | Governance, *, traced: bool | None = None
) -> HelmlogMiddleware:
    """The middleware that puts a helmlog agent's act-table around a LangChain agent.

    ``create_agent(model, tools, middleware=[governance(rules)],
    checkpointer=InMemorySaver())``, where ``rules`` is a helmlog ``Agent``
    (built with ``framework_model("langchain")`` as its provider: LangChain
    calls its own model) or a ``Governance`` around one. ``traced``: whether
    LangSmith traces this agent's runs (``TracedHelmlogMiddleware``); by
    default, whether langsmith's tracing is on where this is called.

    Raises:
        TypeError: ``rules`` is neither, or ``traced`` is not a bool.
    """
    if traced is not None and not isinstance(traced, bool):
        raise TypeError(f"governance(traced=...) takes a bool, got {shape(traced)}")
    if isinstance(rules, Agent):
        rules = Governance(rules)
    elif not isinstance(rules, Governance):
        raise TypeError(
            f"governance() takes a helmlog Agent or Governance, got {shape(rules)}"
        )
    if traced is None:
        traced = bool(tracing_is_enabled())
    return (TracedHelmlogMiddleware if traced else HelmlogMiddleware)(rules)
