"""Governance: a helmlog agent's rules and record, held for another framework.

Pattern: a facade over ``Steering`` (``helmlog.runtime.lowlevel``): what a
         framework adapter drives (``steering``), the tools it wraps around
         the framework's own tool calls (``tool_for``), and what a second
         process deciding its asks needs (``on_store``, ``resume``).
Role:    integrations layer, ``helmlog.integrations.Governance``; the
         LangChain, OpenAI Agents SDK and Pydantic AI modules build on it;
         ``helmlog approve|decline|serve --agent module:attr`` resolve its
         asks like an ``mcp_serve`` result's (``on_store`` + ``resume``).

Laws: issue 27 items 1–5 (one record; asks decided from helmlog's page and
CLI), R9, G59–G64.
Why the approver runs the registered tool: a person approving from another
process resumes the call there; the framework process reads the recorded
outcome back (``call_tool`` is re-entrant), so the tool runs exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from helmlog.events import Checkpoint, EventStore, HelmlogError, shape
from helmlog.runtime import Agent, AskPause, Tool
from helmlog.runtime.lowlevel import Steering

ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
"""The input schema of a framework tool that declares none: any object."""


class GovernanceError(HelmlogError, ValueError):
    """A ``Governance`` was given something it cannot govern with.

    ``reason``: ``"bad-argument"`` (a wrong type or an empty name), or
    ``"no-tool"`` (a pause of a tool the agent here has not registered: the
    process deciding an ask runs the real tool, so it must know it). Carries
    no value. Not retryable as is.
    """

    code = "ERR_GOVERNANCE"
    REASONS = ("bad-argument", "no-tool")

    def __init__(self, *, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(detail)


class Governance:
    """A built helmlog ``Agent``'s governance, for a loop another framework runs.

    Args:
        agent: the agent whose act-table, store, redaction, watchers and
            registered tools govern the framework's turns. Build it the
            ordinary way, with ``framework_model(name)`` as its provider
            (the framework calls its own model; the name is recorded).

    Raises:
        GovernanceError: ``agent`` is not a helmlog ``Agent``.
        SteeringError: the agent has an ``output_type`` (``"unsupported"``).
    """

    __slots__ = ("_steering", "_tools")

    def __init__(self, agent: Agent) -> None:
        if not isinstance(agent, Agent):
            raise GovernanceError(
                reason="bad-argument",
                detail=f"Governance takes a built helmlog Agent, got {shape(agent)}",
            )
        self._steering = Steering(agent)
        # Built once per framework tool: a Tool compiles its schema.
        self._tools: dict[str, tuple[Callable[..., Any], Tool]] = {}

    @classmethod
    def _of(cls, steering: Steering) -> Governance:
        made = cls.__new__(cls)
        made._steering = steering
        made._tools = {}
        return made

    @property
    def steering(self) -> Steering:
        """The agent's sessions, driven by the framework's loop."""
        return self._steering

    @property
    def agent(self) -> Agent:
        """The helmlog agent whose rules and record these are."""
        return self._steering.agent

    @property
    def store(self) -> EventStore:
        """The event store the governed sessions are recorded in."""
        store: EventStore = self._steering.agent.store
        return store

    def tool_for(
        self,
        name: str,
        execute: Callable[..., Any],
        *,
        description: str = "",
        input_schema: Mapping[str, Any] | None = None,
    ) -> Tool:
        """The helmlog ``Tool`` the pipeline wraps around a framework's tool call.

        ``execute`` is the framework's own call (keyword arguments, sync or
        async). When the agent registered a tool of this name, its schema,
        description, check-in, idempotence and credentials hold (its
        ``execute`` is replaced by the framework's); else the tool is built
        from the framework's ``description`` and JSON ``input_schema``.

        Raises:
            GovernanceError: ``name`` is empty or ``execute`` not callable.
        """
        if not isinstance(name, str) or not name:
            raise GovernanceError(
                reason="bad-argument",
                detail=f"tool_for() takes the tool's name, got {shape(name)}",
            )
        if not callable(execute):
            raise GovernanceError(
                reason="bad-argument",
                detail=f"tool_for('{name}'): execute must be callable, got "
                f"{shape(execute)}",
            )
        cached = self._tools.get(name)
        if cached is not None and cached[0] is execute:
            return cached[1]
        registered = self.agent.config.tools.get(name)
        if registered is not None and registered.execute is execute:
            made = registered
        elif registered is not None:
            made = Tool(
                name,
                registered.description,
                registered.input_schema,
                execute,
                registered.source,
                check_in=registered.check_in,
                idempotent=registered.idempotent,
                credentials=registered.credentials,
                inline=registered.inline,
                output_schema=registered.output_schema,
            )
        else:
            made = Tool(
                name,
                description,
                input_schema if input_schema is not None else ANY_OBJECT,
                execute,
            )
        self._tools[name] = (execute, made)
        return made

    # -- a second process decides an ask --------------------------------------

    def on_store(self, store: EventStore) -> Governance:
        """The same governance (rules, tools, watchers) recording into ``store``.

        What ``--agent module:attr`` makes of a ``Governance`` (``helmlog
        approve``, ``helmlog serve``): the command opens the store, and the
        governance decides that store's asks.
        """
        if store is self.store:
            return self
        return Governance._of(self._steering.on_store(store))

    async def resume(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str | AskPause:
        """Answer a paused call here, and run it on with the agent's registered
        tool: what the model will read (or the call's next pause).

        The framework's process, resuming its run, reads this outcome back
        (``call_tool``/``resume_tool`` are re-entrant): the tool runs once.

        Raises:
            GovernanceError: ``"no-tool"``, the paused tool is not registered
                on this agent (register it: ``Tool.from_langchain(...)``).
            CheckpointError, DecisionRequiredError: as ``Agent.resume``.
        """
        cp = Checkpoint.coerce(checkpoint)
        name = cp.tool_name or ""
        if name not in self.agent.config.tools:
            raise GovernanceError(
                reason="no-tool",
                detail=f"the paused call is to '{name}', which this agent has "
                "not registered: the process that decides an ask runs the real "
                "tool, so register it (Agent.create(...).tool(Tool.from_"
                "langchain(...)), or the Agents SDK's or Pydantic AI's)",
            )
        out = await self._steering.resume_tool(
            cp, decision, traceparent=traceparent, tracestate=tracestate
        )
        if isinstance(out, AskPause):
            return out
        return out.text
