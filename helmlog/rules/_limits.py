"""The limits that count: ``RateLimit`` (calls per window) and ``Budget``.

Pattern: before-tool links that keep their counters in the link, keyed by a
         function of the call (tool name by default).
Role:    the face, behind ``helmlog.rules``; public ``helmlog.runtime`` only.
Emits:   nothing itself; each admission and denial is a row and a fact.

Laws: G7 (a raising key/cost function or a bad cost is a denial), G14, G49,
R17 (state in the link: shared by every session on a ``PolicyActor``).

Why they count at before-tool: counting later would let a burst through
while the first calls run; a call let through counts even if later refused.
Reasons say what to do next ("try again in 12 s"), so the model recovers.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any

from helmlog.runtime import Allow, Deny, ToolCallContext, allow, deny

Key = Callable[[ToolCallContext], Hashable]


def _by_tool(call: ToolCallContext) -> Hashable:
    return call.tool_name


def _positive(name: str, label: str, value: Any, kind: type = float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok or (kind is int and not isinstance(value, int)):
        raise ValueError(f"{name}: {label} must be a positive {kind.__name__}")


class RateLimit:
    """At most ``max_calls`` calls per ``per_s`` seconds, per key (a sliding window).

    Args:
        name: the link's name.
        max_calls: calls allowed in any window of ``per_s`` seconds.
        per_s: the window's length in seconds.
        tools: the tool names it limits; ``None`` limits every tool.
        key: what a limit is counted per, from the call; default the tool's
            name. ``lambda call: call.identity.get("user")`` limits each user.
        clock: seconds, monotonic; default ``time.monotonic``.

    Hosted by ``Cluster.policy(factory)``, one window is shared by every
    session on every host (R17).
    """

    def __init__(
        self,
        name: str = "rate-limit",
        *,
        max_calls: int,
        per_s: float,
        tools: Collection[str] | None = None,
        key: Key | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        _positive(name, "max_calls", max_calls, int)
        _positive(name, "per_s", per_s)
        self.name = name
        self.max_calls = max_calls
        self.per_s = float(per_s)
        self.tools = None if tools is None else frozenset(tools)
        self.key = key or _by_tool
        self.clock = clock
        self._calls: dict[Hashable, deque[float]] = {}

    def on_tool_call(self, call: ToolCallContext) -> Allow | Deny:
        if self.tools is not None and call.tool_name not in self.tools:
            return allow()
        now = self.clock()
        window = self._calls.setdefault(self.key(call), deque())
        while window and window[0] <= now - self.per_s:
            window.popleft()
        if len(window) >= self.max_calls:
            wait = window[0] + self.per_s - now
            return deny(
                f"rate limit: at most {self.max_calls} calls to "
                f"'{call.tool_name}' per {self.per_s:g} s; "
                f"try again in {max(wait, 0.1):.1f} s"
            )
        window.append(now)
        return allow()


class Budget:
    """A total that admitted calls spend; a call that would overspend is denied.

    Args:
        name: the link's name.
        limit: the total to spend (per key).
        cost: what a call spends: ``None`` for 1 per call, the name of a
            numeric argument (``"amount"``), or a function of the call. A
            cost that is not a number >= 0 denies the call (fail closed).
        tools: the tool names it applies to; ``None`` for every tool.
        key: what a budget is kept per; default one budget for all calls.
        unit: a word for the reason texts (``"USD"``, ``"calls"``).

    Hosted by ``Cluster.policy(factory)``, one budget is shared by every
    session on every host (R17); inline, each agent has its own.
    """

    def __init__(
        self,
        name: str = "budget",
        *,
        limit: float,
        cost: str | Callable[[ToolCallContext], float] | None = None,
        tools: Collection[str] | None = None,
        key: Key | None = None,
        unit: str = "",
    ) -> None:
        _positive(name, "limit", limit)
        self.name = name
        self.limit = limit
        self.cost = cost
        self.tools = None if tools is None else frozenset(tools)
        self.key = key
        self.unit = f" {unit}" if unit else ""
        self._spent: dict[Hashable, float] = {}

    def spent(self, key: Hashable = None) -> float:
        """How much the budget of ``key`` has spent so far."""
        return self._spent.get(key, 0)

    def _cost_of(self, call: ToolCallContext) -> float:
        if self.cost is None:
            return 1
        if isinstance(self.cost, str):
            value = call.args.get(self.cost) if isinstance(call.args, Mapping) else None
        else:
            value = self.cost(call)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"budget '{self.name}' could not price this call: its cost is "
                "not a number >= 0"
            )
        return value

    def on_tool_call(self, call: ToolCallContext) -> Allow | Deny:
        if self.tools is not None and call.tool_name not in self.tools:
            return allow()
        cost = self._cost_of(call)
        key = None if self.key is None else self.key(call)
        left = self.limit - self._spent.get(key, 0)
        if cost > left:
            return deny(
                f"budget '{self.name}' has {left:g}{self.unit} left of "
                f"{self.limit:g}{self.unit}, less than this call needs; do not "
                "retry it in this run"
            )
        self._spent[key] = self._spent.get(key, 0) + cost
        return allow(None, f"{left - cost:g}{self.unit} left")
