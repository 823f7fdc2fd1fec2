"""The parts an ``AgentBuilder`` holds, each checking before it changes.

Pattern: the builder (``AgentBuilder``, ``_agent.py``) is a facade over three
         parts that own their state: ``Options`` (the checked keywords of
         ``Agent.create``), ``Toolset`` (tools, in order) and ``Rules`` (the
         governance wheel: links, window, permissions, ``.act()``); every door
         checks everything before attaching anything, so a refused call leaves
         the part exactly as it was. ``freeze`` makes the ``AgentConfig``.
Role:    runtime layer; nothing outside ``AgentBuilder`` holds these parts.

Laws: G9–G10 (the doors), G40 and G92 (which agents are output-governed),
G72–G77 (``.act()`` forwards to the doors, so both spellings make equal
chains, G75), G79 (one window strategy, two doors), G82–G83 (``.watch()``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from typing import Any

from helmlog.events import EventStore, HeadSigner, MemoryEventStore

from ._clock import wall_clock_ms
from ._config import (
    DEFAULT_IDLE_S,
    DEFAULT_MAX_MODEL_CALLS,
    DEFAULT_MAX_RESIDENT,
    DEFAULT_MAX_TOOL_CALLS,
    AgentConfig,
)
from ._errors import AgentBuildError
from ._links import (
    Link,
    as_message_link,
    as_tool_link,
    hook,
    link_name,
    message_link_problem,
    tool_link_problem,
)
from ._moments import ACT_KEYS
from ._output import DEFAULT_MAX_OUTPUT_RETRIES, OutputType, compile_output
from ._redaction import RedactionPolicy
from ._tools import CredentialResolver, Tool
from ._trace import random_traceparent
from ._window import WindowStrategy
from .providers import Provider, ToolSpec

_BUCKET_HOOK = {
    "input": "on_message",
    "output": "on_message",
    "before_tool": "on_tool_call",
    "after_tool": "on_tool_result",
}


def uuid_ids() -> str:
    """A fresh session id: a random (version 4) UUID's 32 hex digits, as
    ``uuid.uuid4().hex``, without building the ``UUID`` (one per turn)."""
    raw = int.from_bytes(os.urandom(16))
    return f"{raw & _UUID4_CLEAR | _UUID4_SET:032x}"


# RFC 4122 version 4: the version nibble 4 and the variant bits 10, as
# ``uuid.UUID(bytes=..., version=4)`` sets them.
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


# What Agent.create(signer=...) takes (issue 30).
SignerLike = Any


class Options:
    """The checked keywords of ``Agent.create``: provider, model, store, limits."""

    def __init__(
        self,
        provider: Provider,
        model: str,
        *,
        redact: RedactionPolicy | None = None,
        store: EventStore | None = None,
        clock: Callable[[], int] | None = None,
        ids: Callable[[], str] | None = None,
        credentials: CredentialResolver | Mapping[str, str] | None = None,
        max_resident: int = DEFAULT_MAX_RESIDENT,
        idle_s: float = DEFAULT_IDLE_S,
        traces: Callable[[], str] | None = None,
        max_model_calls: int = DEFAULT_MAX_MODEL_CALLS,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        max_turn_s: float | None = None,
        output_type: Any = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
        signer: SignerLike = None,
    ) -> None:
        if not callable(getattr(provider, "call", None)):
            raise AgentBuildError(
                "Agent.create(provider=...) needs a provider with a call() method, "
                "e.g. helmlog.runtime.providers.scripted([...])"
            )
        if not isinstance(model, str) or not model:
            raise AgentBuildError(
                "Agent.create(model=...) needs a non-empty model name"
            )
        if redact is not None and not isinstance(redact, RedactionPolicy):
            raise AgentBuildError(
                "redact= takes a RedactionPolicy (conversation_redaction())"
            )
        if (
            isinstance(max_resident, bool)
            or not isinstance(max_resident, int)
            or max_resident < 1
        ):
            raise AgentBuildError(
                f"max_resident= takes an int of at least 1, got {max_resident!r}"
            )
        if (
            isinstance(idle_s, bool)
            or not isinstance(idle_s, int | float)
            or not idle_s >= 0
        ):
            raise AgentBuildError(
                f"idle_s= takes a number of seconds, 0 or more, got {idle_s!r}"
            )
        if traces is not None and not callable(traces):
            raise AgentBuildError(
                f"traces= takes a callable returning a traceparent, got {traces!r}"
            )
        for option, count in (
            ("max_model_calls", max_model_calls),
            ("max_tool_calls", max_tool_calls),
        ):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise AgentBuildError(
                    f"{option}= takes an int of at least 1, got {count!r}"
                )
        if max_turn_s is not None and (
            isinstance(max_turn_s, bool)
            or not isinstance(max_turn_s, int | float)
            or not max_turn_s > 0
        ):
            raise AgentBuildError(
                f"max_turn_s= takes a number of seconds above 0, or None, got "
                f"{max_turn_s!r}"
            )
        if (
            isinstance(max_output_retries, bool)
            or not isinstance(max_output_retries, int)
            or max_output_retries < 0
        ):
            raise AgentBuildError(
                f"max_output_retries= takes an int of 0 or more, got "
                f"{max_output_retries!r}"
            )
        try:
            # Issue 30: a key, a key file, a key provider; else the environment.
            self.signer = HeadSigner.of(signer)
            self.env_signer = None if self.signer else HeadSigner.from_env()
        except (TypeError, ValueError, OSError) as exc:
            raise AgentBuildError(f"signer=: {exc}") from exc
        self.output: OutputType | None = (
            None if output_type is None else compile_output(output_type)
        )
        self.max_output_retries = max_output_retries
        self.max_model_calls = max_model_calls
        self.max_tool_calls = max_tool_calls
        self.max_turn_ms = (
            None if max_turn_s is None else max(1, round(max_turn_s * 1000))
        )
        self.max_resident = max_resident
        self.idle_s = float(idle_s)
        self.provider = provider
        self.model = model
        self.redact = redact
        self.store = store
        self.clock = clock or wall_clock_ms
        self.ids = ids or uuid_ids
        self.traces = traces or random_traceparent
        self.credentials: CredentialResolver | None = (
            dict(credentials).get if isinstance(credentials, Mapping) else credentials
        )


class Toolset:
    """The registered tools, in order; a name may be registered once."""

    def __init__(self) -> None:
        self.tools: dict[str, Tool] = {}

    def add(self, tools: tuple[Tool, ...]) -> None:
        """Register ``tools`` after checking every one."""
        seen = set(self.tools)
        for t in tools:
            if not isinstance(t, Tool):
                raise AgentBuildError(
                    f"tool() takes Tool values (@tool or Tool(...)), got {t!r}"
                )
            if t.name in seen:
                raise AgentBuildError(f"a tool named '{t.name}' is already registered")
            seen.add(t.name)
        for t in tools:
            self.tools[t.name] = t

    def specs(self) -> tuple[ToolSpec, ...]:
        """What the provider is told of each tool."""
        return tuple(
            ToolSpec(t.name, t.description, t.input_schema) for t in self.tools.values()
        )


class Rules:
    """The governance wheel: tool and message links, the window, permissions."""

    def __init__(self) -> None:
        self.tool_links: list[Link] = []
        self.message_links: list[Link] = []
        self.window: WindowStrategy | None = None
        self._window_door = ""
        self.permissions: Callable[[Any], Any] | None = None
        self._acted = False

    def set_permissions(self, checker: Callable[[Any], Any]) -> None:
        """Install the permission gate (G54)."""
        if not callable(checker):
            raise AgentBuildError("permissions() takes a callable checker")
        self.permissions = checker

    def add_tool_links(self, links: tuple[Any, ...]) -> None:
        """Append tool links in order, after checking every one (G10)."""
        for obj in links:
            problem = tool_link_problem(obj)
            if problem:
                raise AgentBuildError(f"tool_middleware(): {problem}")
        self.tool_links.extend(as_tool_link(obj) for obj in links)

    def add_message_links(self, links: tuple[Any, ...]) -> None:
        """Append message links in order, after checking every one (G10)."""
        for obj in links:
            problem = message_link_problem(obj)
            if problem:
                raise AgentBuildError(f"message_middleware(): {problem}")
        self.message_links.extend(as_message_link(obj) for obj in links)

    def set_window(self, strategy: WindowStrategy) -> None:
        """Set the window strategy (G79)."""
        self._check_window(strategy, ".window()")
        self.window, self._window_door = strategy, ".window()"

    def _check_window(self, strategy: Any, door: str) -> None:
        if self.window is not None:
            raise AgentBuildError(
                f"this agent already has a window strategy ('{self.window.name}'), "
                f"set by {self._window_door}"
            )
        name = getattr(strategy, "name", None)
        if (
            not isinstance(name, str)
            or not name
            or not callable(getattr(strategy, "plan", None))
        ):
            raise AgentBuildError(
                f"{door} takes a window strategy with a non-empty name and a plan() "
                f"method, e.g. sliding_window(keep_recent_turns=12); got {strategy!r}"
            )

    def act(self, keys: dict[str, Any]) -> None:
        """Declare the whole wheel in one place (G72–G77)."""
        if self._acted:
            raise AgentBuildError(
                ".act() was already called on this builder; add more rules with "
                ".tool_middleware(), .message_middleware() and .window()"
            )
        for key in keys:
            if key not in ACT_KEYS:
                raise AgentBuildError(
                    f".act(): unknown key '{key}'; the keys are {', '.join(ACT_KEYS)}"
                )
        lists: dict[str, list[Any]] = {}
        for key in ACT_KEYS:
            if key == "window" or key not in keys:
                continue
            value = keys[key]
            if not isinstance(value, list | tuple):
                raise AgentBuildError(f".act(): '{key}' expects a list of links")
            lists[key] = list(value)
        for key, entries in lists.items():
            for entry in entries:
                self._check_entry(key, entry)
        window = keys.get("window")
        if window is not None:
            self._check_window(window, ".act(window=...)")
        # Every check passed: forward to the doors (G75).
        self._acted = True
        if window is not None:
            self.window, self._window_door = window, ".act(window=...)"
        inputs, outputs = lists.get("input", []), lists.get("output", [])
        for entry in inputs:
            both = any(entry is o for o in outputs)
            self.message_links.append(as_message_link(entry, None if both else "input"))
        for entry in outputs:
            if not any(entry is i for i in inputs):
                self.message_links.append(as_message_link(entry, "output"))
        befores, afters = lists.get("before_tool", []), lists.get("after_tool", [])
        self.tool_links.extend(as_tool_link(entry) for entry in befores)
        attached: list[Any] = list(befores)
        for entry in afters:
            if any(entry is a for a in attached):
                continue
            attached.append(entry)
            self.tool_links.append(as_tool_link(entry))

    @staticmethod
    def _check_entry(key: str, entry: Any) -> None:
        name = link_name(entry)
        if name is None:
            raise AgentBuildError(
                f".act(): an entry under '{key}' needs a non-empty name"
            )
        needed = _BUCKET_HOOK[key]
        if hook(entry, needed) is not None:
            return
        hint = ""
        if key == "before_tool" and hook(entry, "on_tool_result"):
            hint = "; it only has on_tool_result, so it belongs under 'after_tool'"
        elif key == "after_tool" and hook(entry, "on_tool_call"):
            hint = "; it only has on_tool_call, so it belongs under 'before_tool'"
        raise AgentBuildError(
            f".act(): '{name}' under '{key}' has no {needed} hook{hint}"
        )


def freeze(
    options: Options, system: str, toolset: Toolset, rules: Rules
) -> AgentConfig:
    """The frozen configuration of these parts."""
    tool_links = tuple(rules.tool_links)
    message_links = tuple(rules.message_links)
    store = options.store if options.store is not None else MemoryEventStore()
    signer = options.signer
    if signer is None and getattr(store, "signer", None) is None:
        signer = options.env_signer
    if signer is not None:
        # The store carries the signer as it carries the chain key, so every
        # journal over it (loop, resume, serving) signs alike (issue 30).
        setattr(store, "signer", signer)  # noqa: B010 - not on the port
    return AgentConfig(
        provider=options.provider,
        model=options.model,
        system=system,
        tools=dict(toolset.tools),
        tool_links=tool_links,
        message_links=message_links,
        window=rules.window,
        permissions=rules.permissions,
        store=store,
        redact=options.redact,
        clock=options.clock,
        new_id=options.ids,
        credentials=options.credentials,
        tool_specs=toolset.specs(),
        has_call_hooks=any(link.on_tool_call is not None for link in tool_links),
        has_result_hooks=any(link.on_tool_result is not None for link in tool_links),
        output_governed=options.output is not None
        or any(link.only_phase != "input" for link in message_links),
        policy_version=AgentConfig.posture_digest(
            tool_links, message_links, rules.window, rules.permissions
        ),
        max_resident=options.max_resident,
        idle_s=options.idle_s,
        new_traceparent=options.traces,
        max_model_calls=options.max_model_calls,
        max_tool_calls=options.max_tool_calls,
        max_turn_ms=options.max_turn_ms,
        output=options.output,
        max_output_retries=options.max_output_retries,
    )


def counter_ids(prefix: str = "session-") -> Callable[[], str]:
    """Deterministic ids for tests: ``session-1``, ``session-2``, …"""
    numbers = itertools.count(1)
    return lambda: f"{prefix}{next(numbers)}"
