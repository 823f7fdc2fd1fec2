"""An agent's frozen configuration: what ``AgentBuilder.build`` produces.

Pattern: an immutable settings record shared by the loop and the face.
Role:    runtime layer; the loop reads it, nothing writes it after build.
Emits:   nothing.

Laws: R9 (``policy_version``: a digest of the governance posture — the
ordered link names and hooks of each chain, phase restrictions, the window
strategy's name, whether a permission checker is set), R21 (``max_resident``
and ``idle_s`` bound the sessions an agent keeps resident), G92 (``output``,
the compiled ``output_type``, and ``max_output_retries``).

Why the posture is hashed at build time: a checkpoint taken under one set of
rules must not be resumed under another without saying so (``policy-changed``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from helmlog.events import EventStore
from helmlog.events.lowlevel import digest

from ._links import Link
from ._output import DEFAULT_MAX_OUTPUT_RETRIES, OutputType
from ._redaction import RedactionPolicy
from ._tools import CredentialResolver, Tool
from ._trace import random_traceparent
from ._window import WindowStrategy
from .providers import Provider, ToolSpec

DEFAULT_MAX_RESIDENT = 10_000
"""Sessions an agent keeps resident unless built with ``max_resident=``."""

DEFAULT_IDLE_S = 600.0
"""Seconds without an operation after which a resident session is dropped."""

DEFAULT_MAX_MODEL_CALLS = 25
"""Model calls one turn may make unless built with ``max_model_calls=``."""

DEFAULT_MAX_TOOL_CALLS = 100
"""Tool calls one turn may make unless built with ``max_tool_calls=``."""


@dataclasses.dataclass(frozen=True, slots=True)
class AgentConfig:
    """Everything a built agent runs with."""

    provider: Provider
    model: str
    system: str
    tools: Mapping[str, Tool]
    tool_links: tuple[Link, ...]
    message_links: tuple[Link, ...]
    window: WindowStrategy | None
    permissions: Callable[[Any], Any] | None
    store: EventStore
    redact: RedactionPolicy | None
    clock: Callable[[], int]
    new_id: Callable[[], str]
    credentials: CredentialResolver | None
    tool_specs: tuple[ToolSpec, ...] = ()
    has_call_hooks: bool = False
    has_result_hooks: bool = False
    output_governed: bool = False
    policy_version: str = ""
    max_resident: int = DEFAULT_MAX_RESIDENT
    idle_s: float = DEFAULT_IDLE_S
    new_traceparent: Callable[[], str] = random_traceparent
    max_model_calls: int = DEFAULT_MAX_MODEL_CALLS
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    max_turn_ms: int | None = None  # max_turn_s, on the agent's clock
    output: OutputType | None = None  # output_type, compiled (G92)
    max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES

    @staticmethod
    def posture_digest(
        tool_links: tuple[Link, ...],
        message_links: tuple[Link, ...],
        window: WindowStrategy | None,
        permissions: object | None,
    ) -> str:
        """The ``policy_version`` of a governance posture (R9)."""
        return digest(
            {
                "tool": [
                    [
                        link.name,
                        link.on_tool_call is not None,
                        link.on_tool_result is not None,
                    ]
                    for link in tool_links
                ],
                "message": [[link.name, link.only_phase] for link in message_links],
                "window": getattr(window, "name", None),
                "permissions": permissions is not None,
            }
        )
