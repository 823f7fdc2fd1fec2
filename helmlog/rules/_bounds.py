"""The bounds a call is judged against alone: which tools, how high an argument.

Pattern: stateless before-tool links: ``ToolAllowList`` checks
         ``tool_source`` and name, ``ArgumentCeiling`` one numeric argument.
Role:    the face, behind ``helmlog.rules``; public ``helmlog.runtime`` only.
Emits:   nothing itself; each verdict is a row and a fact.

Laws: G78 (judges ``tool_source``), G5, G7 (unchecked is denied), G55 (a
missing argument is validation's to judge), G49.

Why a bound keeps no state: what it decides depends on the call alone, so
inline, on a policy actor or in the MCP proxy it decides the same.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from helmlog.runtime import Allow, Ask, Deny, ToolCallContext, allow, ask, deny


class ToolAllowList:
    """Only the listed tools of each ``tool_source`` may run (G78).

    Args:
        allowed: ``{source: tool names}``; ``None`` is the agent's own tools
            (``@tool``/``Tool(...)`` without a source), an MCP client's name
            its server's tools, and ``"*"`` in place of the names allows
            every tool of that source. A source not listed is denied.
        name: the link's name.

    Example: ``ToolAllowList({None: "*", "github": {"search_issues"}})``.
    """

    def __init__(
        self,
        allowed: Mapping[str | None, Collection[str] | Literal["*"]],
        *,
        name: str = "tool-allow-list",
    ) -> None:
        if not isinstance(allowed, Mapping):
            raise ValueError(f"{name}: allowed must map sources to tool names")
        self.name = name
        self.allowed: dict[str | None, frozenset[str] | None] = {}
        for source, tools in allowed.items():
            if tools == "*":
                self.allowed[source] = None
            elif isinstance(tools, str):
                raise ValueError(
                    f"{name}: the tools of {source!r} must be a collection of "
                    f'names or "*", not the string {tools!r}'
                )
            else:
                self.allowed[source] = frozenset(tools)

    def on_tool_call(self, call: ToolCallContext) -> Allow | Deny:
        source = call.tool_source
        where = "the agent's own tools" if source is None else f"source '{source}'"
        if source not in self.allowed:
            return deny(
                f"tool '{call.tool_name}' is not allowed: {where} is not on "
                "the allow-list; do not call it again"
            )
        tools = self.allowed[source]
        if tools is not None and call.tool_name not in tools:
            return deny(
                f"tool '{call.tool_name}' of {where} is not on the allow-list; "
                "do not call it again"
            )
        return allow()


class ArgumentCeiling:
    """A numeric argument may not exceed ``maximum``: denied, or asked about.

    Args:
        tool: the tool it watches (other tools pass).
        argument: the argument's name, or a path into nested arguments
            (``"refund.amount"``).
        maximum: the highest value let through.
        over: ``"deny"`` (the default) or ``"ask"``: a person decides.
        name: the link's name; default ``"<tool>-<argument>-ceiling"``.
        reason: the deny reason or the question; default names the ceiling.

    A missing argument passes (validation judges it, G55); a value that is
    not a number cannot be checked and is denied (fail closed).
    """

    def __init__(
        self,
        tool: str,
        argument: str,
        maximum: float,
        *,
        over: Literal["deny", "ask"] = "deny",
        name: str | None = None,
        reason: str | None = None,
    ) -> None:
        if over not in ("deny", "ask"):
            raise ValueError(
                f"ArgumentCeiling: over must be 'deny' or 'ask', not {over!r}"
            )
        if not isinstance(maximum, int | float) or isinstance(maximum, bool):
            raise ValueError("ArgumentCeiling: maximum must be a number")
        self.tool = tool
        self.path = tuple(argument.split("."))
        self.argument = argument
        self.maximum = maximum
        self.over = over
        self.name = name or f"{tool}-{argument}-ceiling"
        self.reason = reason or (
            f"'{argument}' of '{tool}' may be at most {maximum:g}; "
            f"ask for {maximum:g} or less"
        )

    def _value(self, args: Any) -> tuple[bool, Any]:
        value = args
        for part in self.path:
            if not isinstance(value, Mapping) or part not in value:
                return False, None
            value = value[part]
        return True, value

    def on_tool_call(self, call: ToolCallContext) -> Allow | Deny | Ask:
        if call.tool_name != self.tool:
            return allow()
        present, value = self._value(call.args)
        if not present:
            return allow()
        if not isinstance(value, int | float) or isinstance(value, bool):
            return deny(
                f"'{self.argument}' of '{self.tool}' is not a number, so it "
                f"cannot be checked against its ceiling of {self.maximum:g}"
            )
        if value <= self.maximum:
            return allow()
        if self.over == "ask":
            return ask(
                self.reason, {"argument": self.argument, "ceiling": self.maximum}
            )
        return deny(self.reason)
