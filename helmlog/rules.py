"""helmlog.rules — ready-made rules, written as ordinary links.

Pattern: links (a ``name`` and hooks) built from a few options, so each is
         attached, walked, recorded and hosted exactly as a rule a user
         writes: ``.act(...)``, ``.tool_middleware(...)``,
         ``.message_middleware(...)`` or ``Cluster.policy(factory)``.
Role:    the face layer; built on the public names of ``helmlog.runtime``
         only (the verbs and the contexts).
Emits:   nothing itself; every decision is a row and a fact, as for any link.

Rules: ``PiiScrub`` (rewrite personal data out of messages and tool results,
and optionally arguments; regex detectors by default, any detector
pluggable), ``RateLimit`` (at most N calls per window), ``Budget`` (a total
to spend, per call or by an argument), ``ToolAllowList`` (which tools each
``tool_source`` may offer), ``ArgumentCeiling`` (a number an argument may
not exceed: denied, or asked about).

Laws: G2 (every rewrite says why: the count of each kind scrubbed, never a
value), G5 (none of them answers for a tool: they allow, rewrite, deny or
ask), G7 (a detector, key or cost function that raises is a denial: the
rules fail closed), G14 (a limit's denial stops the walk), G49 (a reason is
a fact watchers see, so no reason quotes an argument or a match), G78
(``ToolAllowList`` judges ``tool_source``), R17 (``RateLimit`` and
``Budget`` keep their state in the link, so one hosted by a ``PolicyActor``
is shared by every session on every host).

Why the limits count at before-tool: the walk cannot know whether a later
link or validation will refuse the call, and counting later would let a
burst through while the first calls are still running; a call the limit let
through is counted even if something after it refused the call.

Why the reasons say what to do next: the model reads a denial as the tool's
message (G15); "try again in 12 s" or "ask for at most 500" lets it recover
in one turn, where a bare "denied" invites the same call again.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any, Literal

from helmlog.runtime import (
    Allow,
    Ask,
    Deny,
    MessageContext,
    ToolCallContext,
    ToolResultContext,
    allow,
    ask,
    deny,
)

__all__ = [
    "PII_PATTERNS",
    "ArgumentCeiling",
    "Budget",
    "Detector",
    "PiiMatch",
    "PiiScrub",
    "RateLimit",
    "ToolAllowList",
    "default_detector",
    "luhn_valid",
    "regex_detector",
]


# -- PII scrub -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PiiMatch:
    """One piece of personal data a detector found: its kind and its span."""

    kind: str
    start: int
    end: int


Detector = Callable[[str], Iterable[PiiMatch]]
"""A function from text to the personal data in it (any order; overlaps allowed)."""

PII_PATTERNS: Mapping[str, str] = {
    "email": r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
    "card": r"(?<![\d-])(?<!\d )(?:\d[ -]?){12,18}\d(?![ -]?\d)",
    "ssn": r"(?<!\d)\d{3}-\d{2}-\d{4}(?!\d)",
    "phone": r"(?<![\w+])(?<!\d[ .()-])\+?(?:\d[ .()-]?){9,14}\d(?![ .()-]?\d)",
    "ipv4": r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}"
    r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])",
}
"""The default detector's patterns, by kind, in priority order (first wins)."""


def luhn_valid(text: str) -> bool:
    """Whether the digits of ``text`` pass the Luhn check (card numbers do)."""
    digits = [int(c) for c in text if c.isdigit()]
    if len(digits) < 13:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def regex_detector(
    patterns: Mapping[str, str | re.Pattern[str]],
    *,
    checks: Mapping[str, Callable[[str], bool]] | None = None,
) -> Detector:
    """A detector from ``{kind: pattern}``; ``checks`` confirm a kind's matches.

    Example: ``regex_detector({"order-ref": r"ORD-\\d{6}"})``.
    """
    compiled = [
        (kind, p if isinstance(p, re.Pattern) else re.compile(p))
        for kind, p in patterns.items()
    ]
    confirm = dict(checks or {})

    def detect(text: str) -> list[PiiMatch]:
        found: list[PiiMatch] = []
        for kind, pattern in compiled:
            check = confirm.get(kind)
            for m in pattern.finditer(text):
                if m.end() > m.start() and (check is None or check(m.group())):
                    found.append(PiiMatch(kind, m.start(), m.end()))
        return found

    return detect


def default_detector() -> Detector:
    """E-mail addresses, card numbers (Luhn-checked), US SSNs, phones, IPv4."""
    return regex_detector(PII_PATTERNS, checks={"card": luhn_valid})


class PiiScrub:
    """Rewrites personal data out of text, as a link (G2: says what, never which).

    Attach it where text flows: ``.act(input=[s], after_tool=[s],
    output=[s])``, or one of those. At a message moment the text is
    rewritten; after a tool, every string inside the result (nested lists
    and dicts included); before a tool, the arguments' strings, only when
    built with ``arguments=True`` (a tool that must send an e-mail needs the
    address).

    Args:
        name: the link's name, as rows and facts show it.
        detector: finds the data; default ``default_detector()``. Any
            function from text to ``PiiMatch`` spans will do (a
            named-entity model, a service); one that raises denies (G7).
        placeholder: what replaces a match; ``{kind}`` is the match's kind.
        messages: scrub at the input and output message moments.
        results: scrub tool results (after-tool).
        arguments: scrub tool arguments (before-tool).
    """

    def __init__(
        self,
        name: str = "pii-scrub",
        *,
        detector: Detector | None = None,
        placeholder: str = "[{kind}]",
        messages: bool = True,
        results: bool = True,
        arguments: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("PiiScrub needs a non-empty name")
        if not (messages or results or arguments):
            raise ValueError(
                f"PiiScrub '{name}' scrubs nothing: enable messages, results "
                "or arguments"
            )
        self.name = name
        self.detector = detector if detector is not None else default_detector()
        self.placeholder = placeholder
        self.on_message = self._on_message if messages else None
        self.on_tool_result = self._on_tool_result if results else None
        self.on_tool_call = self._on_tool_call if arguments else None

    def scrub(self, text: str) -> tuple[str, Counter[str]]:
        """The text with every match replaced, and how many of each kind.

        Raises:
            ValueError: the detector returned a span outside the text.
        """
        found = sorted(self.detector(text), key=lambda m: (m.start, -(m.end - m.start)))
        out: list[str] = []
        counts: Counter[str] = Counter()
        at = 0
        for m in found:
            if not (0 <= m.start < m.end <= len(text)):
                raise ValueError(
                    f"PiiScrub '{self.name}': the detector returned the span "
                    f"{m.start}..{m.end} of a text {len(text)} long"
                )
            if m.start < at:  # overlaps one already replaced
                continue
            out.append(text[at : m.start])
            out.append(self.placeholder.format(kind=m.kind))
            counts[m.kind] += 1
            at = m.end
        out.append(text[at:])
        return "".join(out), counts

    def _value(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            scrubbed, found = self.scrub(value)
            counts.update(found)
            return scrubbed
        if isinstance(value, Mapping):
            return {k: self._value(v, counts) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._value(v, counts) for v in value]
        return value

    def _verdict(self, value: Any) -> Allow:
        counts: Counter[str] = Counter()
        scrubbed = self._value(value, counts)
        if not counts:
            return allow()
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        return allow(scrubbed, f"scrubbed {kinds}")

    def _on_message(self, msg: MessageContext) -> Allow:
        return self._verdict(msg.content)

    def _on_tool_result(self, call: ToolResultContext) -> Allow:
        return self._verdict(call.result)

    def _on_tool_call(self, call: ToolCallContext) -> Allow:
        return self._verdict(call.args)


# -- limits: rate and budget ------------------------------------------------------

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


# -- which tools, and how much ------------------------------------------------------


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
