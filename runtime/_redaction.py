"""Redaction: rows survive, values do not.

Pattern: one policy (field names and a placeholder) applied by a generic walk
         over frozen structs.
Role:    runtime layer; the journal stores events in their stored form and
         delivers them served; ``last_snapshot`` is served form.

Laws: G85, G86 (every served record holds the placeholder for each named
field), G87 (the stream keeps values the session computes on), G88.
Why by field name: a policy enumerating event types would silently miss the
next one added; a field named ``content`` is content wherever it sits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from helmlog.events import (
    ConversationSeeded,
    MessageCommitted,
    PauseRequested,
    ToolDispatched,
)

CONVERSATION_FIELDS = (
    "before",
    "after",
    "why",
    "content",
    "final_content",
    "args",
    "result",
    "question",
    "detail",
    "note",
)

# Events the session must compute on to continue (G87): stored unredacted.
_KEPT_IN_STREAM = (MessageCommitted, ConversationSeeded, PauseRequested, ToolDispatched)


class RedactionPolicy:
    """Which fields to hide, and what to show in their place (G85)."""

    __slots__ = ("fields", "placeholder")

    def __init__(self, fields: Iterable[str], placeholder: str = "[redacted]") -> None:
        given = tuple(fields)
        for name in given:
            if not isinstance(name, str):
                raise ValueError(
                    f"RedactionPolicy: field names must be str, got {name!r}"
                )
        names = frozenset(given)
        if not isinstance(placeholder, str) or not placeholder:
            raise ValueError("RedactionPolicy: the placeholder must be a non-empty str")
        self.fields = names
        self.placeholder = placeholder

    def __repr__(self) -> str:
        fields = sorted(self.fields)
        return f"RedactionPolicy(fields={fields!r}, placeholder={self.placeholder!r})"

    def served(self, value: Any) -> Any:
        """``value`` with every named field, at any depth, replaced (G86)."""
        fields = self.fields
        if "content" in fields:
            # ``original_input`` is a copy of the user message's content (G33).
            fields = fields | {"original_input"}
        return _redact(value, fields, self.placeholder)

    def stored(self, event: Any) -> Any:
        """The form an event is kept in the stream (G87)."""
        if isinstance(event, PauseRequested):
            # G87: the pending call's arguments and question are computed on;
            # the ask's detail is not, so it is kept only as the placeholder.
            return _redact(event, self.fields & {"detail"}, self.placeholder)
        if isinstance(event, _KEPT_IN_STREAM):
            return event
        return _redact(event, self.fields, self.placeholder)


def conversation_redaction(*extra: str) -> RedactionPolicy:
    """The policy naming every field that carries conversation text or tool
    values, plus ``extra`` (G85)."""
    return RedactionPolicy((*CONVERSATION_FIELDS, *extra))


def _redact(value: Any, fields: frozenset[str], placeholder: str) -> Any:
    if isinstance(value, msgspec.Struct):
        changes: dict[str, Any] = {}
        for name in value.__struct_fields__:
            current = getattr(value, name)
            if name in fields:
                if current is not None and current != placeholder:
                    changes[name] = placeholder
                continue
            redacted = _redact(current, fields, placeholder)
            if redacted is not current:
                changes[name] = redacted
        return msgspec.structs.replace(value, **changes) if changes else value
    if isinstance(value, tuple) and value and isinstance(value[0], msgspec.Struct):
        items = tuple(_redact(v, fields, placeholder) for v in value)
        return (
            items
            if any(a is not b for a, b in zip(items, value, strict=True))
            else value
        )
    return value
