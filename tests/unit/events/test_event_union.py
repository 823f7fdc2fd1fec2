"""Every event type, whichever family module defines it, is in the one union (R13).

The types live by family (``events/_turn_events.py``, ``_pause_events.py``,
``_decision_events.py``, ``_proxy_events.py``) and the union that decodes a
stream is written once, in ``events/_types.py``; a type added to a family and
left out of the union would be recorded and then read back as unknown.
"""

from __future__ import annotations

import typing

from helmlog.events import (
    EVENT_CLASSES,
    EVENT_TYPES,
    AnyEvent,
    Event,
)


def _every_event_class() -> set[type[Event]]:
    found: set[type[Event]] = set()
    todo = list(Event.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return {c for c in found if c.__module__.startswith("helmlog.events.")}


def test_r13_every_event_class_of_every_family_is_in_the_union() -> None:
    """R13: the union, ``EVENT_CLASSES`` and every event class defined in the
    events package are the same set, and each tag is its class's ``type``."""
    union = set(typing.get_args(AnyEvent))
    assert _every_event_class() == union == set(EVENT_CLASSES)
    assert {c.__struct_config__.tag for c in EVENT_CLASSES} == EVENT_TYPES
    assert [c.type for c in EVENT_CLASSES] == [
        c.__struct_config__.tag for c in EVENT_CLASSES
    ]
