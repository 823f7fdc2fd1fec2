"""The window moment: what of the history the model is sent at each iteration.

Pattern: strategy objects with a pure ``plan``; the loop records what they did.
Role:    runtime layer; the loop calls ``plan`` before each model call and
         files the ``window.compacted`` record when it engaged.

Laws: G79, G80 (its own record, never a row), G81 (what a sliding window
keeps).
Why no ledger row: the window is a view, not a rule deciding about a value;
the stream and checkpoints keep every message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

from helmlog.events import Message, WindowCompacted, WindowRefusal


@dataclasses.dataclass(frozen=True, slots=True)
class WindowPlan:
    """What to send, and the record to file when the strategy engaged."""

    messages: tuple[Message, ...]
    record: WindowCompacted | None = None


@runtime_checkable
class WindowStrategy(Protocol):
    """A named strategy with ``plan(messages, *, iteration, paused_call_ids)``."""

    name: str

    def plan(
        self,
        messages: tuple[Message, ...],
        *,
        iteration: int,
        paused_call_ids: frozenset[str] = frozenset(),
    ) -> WindowPlan:
        """Decide what the model is sent at this iteration."""
        ...


def _turns(messages: tuple[Message, ...]) -> list[list[int]]:
    """Group message indexes into turns: a user message, or an assistant
    message with the tool messages answering it."""
    turns: list[list[int]] = []
    for i, m in enumerate(messages):
        if m.role == "tool" and turns and messages[turns[-1][0]].role == "assistant":
            turns[-1].append(i)
        else:
            turns.append([i])
    return turns


def _chars(messages: tuple[Message, ...] | list[Message]) -> int:
    return sum(len(m.content) for m in messages)


class SlidingWindow:
    """Keep the most recent ``keep_recent_turns`` turns in the model's view."""

    name = "sliding-window"

    def __init__(self, keep_recent_turns: int) -> None:
        self.keep_recent_turns = keep_recent_turns

    def __repr__(self) -> str:
        return f"sliding_window(keep_recent_turns={self.keep_recent_turns})"

    def plan(
        self,
        messages: tuple[Message, ...],
        *,
        iteration: int,
        paused_call_ids: frozenset[str] = frozenset(),
    ) -> WindowPlan:
        turns = _turns(messages)
        n = self.keep_recent_turns
        if len(turns) <= n:
            return WindowPlan(messages)
        current = max(
            (i for i, m in enumerate(messages) if m.role == "user"), default=-1
        )
        keep: set[int] = set()
        refusals: list[WindowRefusal] = []
        for t_index, turn in enumerate(turns):
            if t_index >= len(turns) - n:
                keep.update(turn)
                continue
            head = messages[turn[0]]
            reason: str | None = None
            if turn[0] == current:
                reason = "current-request"
            elif head.role == "assistant" and head.tool_calls:
                answered = {messages[i].tool_call_id for i in turn[1:]}
                ids = {c.id for c in head.tool_calls}
                if ids & paused_call_ids:
                    reason = "paused-tool"
                elif not ids <= answered:
                    reason = "unresolved-tool-call"
            if reason is not None:
                keep.update(turn)
                refusals.append(
                    WindowRefusal(
                        reason=reason, turn_index=t_index, message_index=turn[0]
                    )
                )
        if len(keep) == len(messages):
            return WindowPlan(messages)
        kept = tuple(m for i, m in enumerate(messages) if i in keep)
        dropped: list[str] = []
        for i, m in enumerate(messages):
            if (
                i not in keep
                and m.role == "tool"
                and m.tool_name
                and m.tool_name not in dropped
            ):
                dropped.append(m.tool_name)
        record = WindowCompacted(
            strategy=self.name,
            iteration=iteration,
            keep_recent_turns=n,
            removed_message_count=len(messages) - len(kept),
            window_chars_before=_chars(messages),
            window_chars_after=_chars(kept),
            turns_before=len(turns),
            turns_after=len(_turns(kept)),
            refusals=tuple(refusals),
            dropped_observations=tuple(dropped),
        )
        return WindowPlan(kept, record)


_REQUIRED: Any = object()


def sliding_window(keep_recent_turns: int = _REQUIRED) -> SlidingWindow:
    """A window that keeps the last ``keep_recent_turns`` turns (G79, G81)."""
    if keep_recent_turns is _REQUIRED:
        raise ValueError("sliding_window(): keep_recent_turns is required")
    if (
        not isinstance(keep_recent_turns, int)
        or isinstance(keep_recent_turns, bool)
        or keep_recent_turns < 1
    ):
        raise ValueError("sliding_window(): keep_recent_turns must be an integer >= 1")
    return SlidingWindow(keep_recent_turns)
