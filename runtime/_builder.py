"""Assembling an agent: ``Agent.create(...)`` → ``AgentBuilder`` → ``build()``.

Pattern: a builder whose every door checks everything before attaching
         anything, so a refused call leaves it exactly as it was.
Role:    runtime layer; ``AgentParts`` collects the parts and freezes them
         into the ``AgentConfig`` the loop runs (and the watchers' fan-out);
         ``AgentBuilder`` (``_agent.py``) is these doors plus ``build()``,
         which hands the frozen parts to the ``Agent`` constructor.
Emits:   nothing.

Laws: G9–G10 (the doors), G40 (which agents are output-governed: an
``output_type`` makes one, G92), G72–G77
(``.act()``: accepted keys, refusals in checking order, a refused bundle
changes nothing, the forwarding order, phase wrappers, hooks decide), G79
(one window strategy, two doors), G82–G83 (``.watch()``; ids must not
collide).

Why the doors live apart from ``build()``: the agent's module must import
the builder (``Agent.create`` returns one) and the builder must construct
the agent; with ``build()`` beside ``Agent`` the import points one way only
(the runtime package has no import circle, tests/unit/architecture).

Why ``.act()`` forwards to the doors rather than building its own chains:
there must be one way rules end up in a chain, so that the ledger, requests
and window records of the two spellings are equal by construction (G75).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Self

from helmlog.events import AgentBuildError, EventStore, MemoryEventStore

from ._clock import wall_clock_ms
from ._config import (
    DEFAULT_IDLE_S,
    DEFAULT_MAX_MODEL_CALLS,
    DEFAULT_MAX_RESIDENT,
    DEFAULT_MAX_TOOL_CALLS,
    AgentConfig,
)
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
from ._watchers import Listeners
from ._window import WindowStrategy
from .providers import Provider, ToolSpec

_BUCKET_HOOK = {
    "input": "on_message",
    "output": "on_message",
    "before_tool": "on_tool_call",
    "after_tool": "on_tool_result",
}


def uuid_ids() -> str:
    """A fresh session id."""
    return uuid.uuid4().hex


class AgentParts:
    """Collects an agent's parts; ``freeze()`` makes its configuration."""

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
        self._output: OutputType | None = (
            None if output_type is None else compile_output(output_type)
        )
        self._max_output_retries = max_output_retries
        self._limits = (
            max_model_calls,
            max_tool_calls,
            None if max_turn_s is None else max(1, round(max_turn_s * 1000)),
        )
        self._max_resident = max_resident
        self._idle_s = float(idle_s)
        self._provider = provider
        self._model = model
        self._redact = redact
        self._store = store
        self._clock = clock or wall_clock_ms
        self._ids = ids or uuid_ids
        self._traces = traces or random_traceparent
        if isinstance(credentials, Mapping):
            table = dict(credentials)
            self._credentials: CredentialResolver | None = table.get
        else:
            self._credentials = credentials
        self._system = ""
        self._tools: dict[str, Tool] = {}
        self._tool_links: list[Link] = []
        self._message_links: list[Link] = []
        self._window: WindowStrategy | None = None
        self._window_door = ""
        self._permissions: Callable[[Any], Any] | None = None
        self._watchers: list[Any] = []
        self._acted = False

    # -- parts ------------------------------------------------------------

    def system(self, prompt: str) -> Self:
        """Set the system prompt."""
        if not isinstance(prompt, str):
            raise AgentBuildError("system() takes a str")
        self._system = prompt
        return self

    def tool(self, *tools: Tool) -> Self:
        """Register tools, in order; a name may be registered once."""
        seen = set(self._tools)
        for t in tools:
            if not isinstance(t, Tool):
                raise AgentBuildError(
                    f"tool() takes Tool values (@tool or Tool(...)), got {t!r}"
                )
            if t.name in seen:
                raise AgentBuildError(f"a tool named '{t.name}' is already registered")
            seen.add(t.name)
        for t in tools:
            self._tools[t.name] = t
        return self

    tools = tool

    def permissions(self, checker: Callable[[Any], Any]) -> Self:
        """Install the permission gate (G54): ``checker(call) -> Allow | Deny``."""
        if not callable(checker):
            raise AgentBuildError("permissions() takes a callable checker")
        self._permissions = checker
        return self

    # -- the doors ----------------------------------------------------------

    def tool_middleware(self, *links: Any) -> Self:
        """Append tool links in order, after checking every one (G10)."""
        for obj in links:
            problem = tool_link_problem(obj)
            if problem:
                raise AgentBuildError(f"tool_middleware(): {problem}")
        self._tool_links.extend(as_tool_link(obj) for obj in links)
        return self

    def message_middleware(self, *links: Any) -> Self:
        """Append message links in order, after checking every one (G10)."""
        for obj in links:
            problem = message_link_problem(obj)
            if problem:
                raise AgentBuildError(f"message_middleware(): {problem}")
        self._message_links.extend(as_message_link(obj) for obj in links)
        return self

    def window(self, strategy: WindowStrategy) -> Self:
        """Set the window strategy (G79)."""
        self._check_window(strategy, ".window()")
        self._window, self._window_door = strategy, ".window()"
        return self

    def _check_window(self, strategy: Any, door: str) -> None:
        if self._window is not None:
            raise AgentBuildError(
                f"this agent already has a window strategy ('{self._window.name}'), "
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

    # -- .act() -------------------------------------------------------------

    def act(self, **keys: Any) -> Self:
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
            self._window, self._window_door = window, ".act(window=...)"
        inputs, outputs = lists.get("input", []), lists.get("output", [])
        for entry in inputs:
            both = any(entry is o for o in outputs)
            self._message_links.append(
                as_message_link(entry, None if both else "input")
            )
        for entry in outputs:
            if not any(entry is i for i in inputs):
                self._message_links.append(as_message_link(entry, "output"))
        befores, afters = lists.get("before_tool", []), lists.get("after_tool", [])
        self._tool_links.extend(as_tool_link(entry) for entry in befores)
        attached: list[Any] = list(befores)
        for entry in afters:
            if any(entry is a for a in attached):
                continue
            attached.append(entry)
            self._tool_links.append(as_tool_link(entry))
        return self

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

    # -- watching -------------------------------------------------------------

    def watch(self, *watchers: Any) -> Self:
        """Attach watchers at ``build()`` (G82); zero is allowed."""
        self._watchers.extend(watchers)
        return self

    # -- build ----------------------------------------------------------------

    def freeze(self) -> tuple[AgentConfig, Listeners]:
        """The frozen configuration and the watchers attached at build (G82)."""
        listeners = Listeners()
        for w in listeners.check_watchers(self._watchers):
            listeners.attach(w)
        tool_links = tuple(self._tool_links)
        message_links = tuple(self._message_links)
        config = AgentConfig(
            provider=self._provider,
            model=self._model,
            system=self._system,
            tools=dict(self._tools),
            tool_links=tool_links,
            message_links=message_links,
            window=self._window,
            permissions=self._permissions,
            store=self._store if self._store is not None else MemoryEventStore(),
            redact=self._redact,
            clock=self._clock,
            new_id=self._ids,
            credentials=self._credentials,
            tool_specs=tuple(
                ToolSpec(t.name, t.description, t.input_schema)
                for t in self._tools.values()
            ),
            has_call_hooks=any(link.on_tool_call is not None for link in tool_links),
            has_result_hooks=any(
                link.on_tool_result is not None for link in tool_links
            ),
            output_governed=self._output is not None
            or any(link.only_phase != "input" for link in message_links),
            policy_version=AgentConfig.posture_digest(
                tool_links, message_links, self._window, self._permissions
            ),
            max_resident=self._max_resident,
            idle_s=self._idle_s,
            new_traceparent=self._traces,
            max_model_calls=self._limits[0],
            max_tool_calls=self._limits[1],
            max_turn_ms=self._limits[2],
            output=self._output,
            max_output_retries=self._max_output_retries,
        )
        return config, listeners


def counter_ids(prefix: str = "session-") -> Callable[[], str]:
    """Deterministic ids for tests: ``session-1``, ``session-2``, …"""
    numbers = itertools.count(1)
    return lambda: f"{prefix}{next(numbers)}"
