"""Shared rules and isolated tools: ``PolicyActor`` and ``ToolExecutor``.

Pattern: remote proxies with the local shape — a proxy link is a link, a
         proxy tool is a ``Tool`` — so the walker and the pipeline cannot tell
         them apart and record exactly what they would inline.
Role:    actors layer; ``Cluster.policy(factory)`` hosts a link whose state
         (remembered approvals, rate limits, budgets) every session on every
         host shares; ``Cluster.isolated(tool)`` runs a tool in an executor.
Emits:   nothing; decisions are filed by the session's journal as always.

Laws: R17 (a link hosted by a PolicyActor shares its state across sessions
and hosts, and a tool run by a ToolExecutor returns what it would inline;
neither adds, removes or reorders a decision), G7 (a hook that raises in the
actor reads exactly as if it raised inline), G69 (``ask_human`` inside an
isolated tool still pauses the run).

Why the proxy re-raises the remote cause rather than Ray's wrapper: the
denial text for a raising rule is ``middleware '<name>' threw: <str(exc)>``;
a wrapper's text would make the ledger depend on where the rule ran.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from ray.exceptions import RayTaskError

from helmlog.runtime import Tool
from helmlog.runtime._links import hook, link_name
from helmlog.runtime._pause import AskHumanSignal
from helmlog.runtime._tools import call_execute


async def _await(ref: Any) -> Any:
    try:
        return await ref
    except RayTaskError as exc:
        raise exc.cause from None


class PolicyActor:
    """Hosts one link, built by ``factory()`` inside the actor."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        link = factory()
        if link_name(link) is None:
            raise ValueError("a policy factory must build a link with a non-empty name")
        self._link = link

    async def describe(self) -> tuple[str, bool, bool]:
        """The link's name and which tool hooks it has."""
        name = link_name(self._link)
        assert name is not None
        return (
            name,
            hook(self._link, "on_tool_call") is not None,
            hook(self._link, "on_tool_result") is not None,
        )

    async def call(self, hook_name: str, ctx: Any) -> Any:
        """Run one hook; its return value goes back as it is (G6 is checked
        by the caller's walker, exactly as inline)."""
        fn = hook(self._link, hook_name)
        assert fn is not None
        out = fn(ctx)
        if inspect.isawaitable(out):
            out = await out
        return out


class PolicyLink:
    """A tool link whose hooks run in a ``PolicyActor`` (state shared)."""

    def __init__(
        self, handle: Any, name: str, has_call: bool, has_result: bool
    ) -> None:
        self.name = name
        self._handle = handle
        self.on_tool_call = self._on_tool_call if has_call else None
        self.on_tool_result = self._on_tool_result if has_result else None

    async def _on_tool_call(self, ctx: Any) -> Any:
        return await _await(self._handle.call.remote("on_tool_call", ctx))

    async def _on_tool_result(self, ctx: Any) -> Any:
        return await _await(self._handle.call.remote("on_tool_result", ctx))

    def __repr__(self) -> str:
        return f"PolicyLink(name={self.name!r})"


class ToolExecutor:
    """Runs the tools it was given, by name, in its own process."""

    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {t.name: t for t in tools}

    async def execute(self, name: str, kwargs: dict[str, Any]) -> tuple[str, Any, Any]:
        """``("result", value, None)`` or ``("ask-human", question, detail)``."""
        try:
            out = await call_execute(self._tools[name], kwargs, name)
        except AskHumanSignal as signal:
            return ("ask-human", signal.question, signal.detail)
        return ("result", out, None)


def isolated_tool(tool: Tool, handle: Any) -> Tool:
    """A ``Tool`` equal to ``tool`` whose ``execute`` runs in an executor."""

    async def execute(**kwargs: Any) -> Any:
        kind, value, detail = await _await(handle.execute.remote(tool.name, kwargs))
        if kind == "ask-human":
            raise AskHumanSignal(value, detail)
        return value

    proxy = copy.copy(tool)
    proxy.execute = execute
    return proxy
