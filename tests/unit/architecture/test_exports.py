"""Each public name has one home: trio's rule for ``__all__``.

Role:    architecture test over every public namespace's ``__all__``.

Laws: issue 25 item 3 (each public name exported from exactly one namespace;
the face re-exports and builds nothing; errors live in the layer whose
concept they name).

Why the face is the one exception: ``import helmlog`` is the door API.md
promises, and every name it shows is re-exported from the one layer that
defines it (the same object), so a reader who finds a name on the face
finds its home by asking which layer exports it.
"""

from __future__ import annotations

import importlib
from collections import defaultdict

import pytest

import helmlog

# Every public namespace below the face.
NAMESPACES = (
    "helmlog.events",
    "helmlog.events.lowlevel",
    "helmlog.events.testing",
    "helmlog.runtime",
    "helmlog.runtime.lowlevel",
    "helmlog.runtime.providers",
    "helmlog.runtime.testing",
    "helmlog.sinks",
    "helmlog.actors",
    "helmlog.gateway",
    "helmlog.gateway.http",
    "helmlog.rules",
)
FACE_OWN = {"__version__"}


def homes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for space in NAMESPACES:
        for name in importlib.import_module(space).__all__:
            found[name].append(space)
    return found


def test_each_name_is_exported_by_one_namespace() -> None:
    """No name is in the ``__all__`` of two namespaces below the face."""
    assert {} == {name: at for name, at in homes().items() if len(at) > 1}


def test_the_face_only_re_exports() -> None:
    """Every name on the face is the very object one layer exports."""
    found = homes()
    orphans = [
        name
        for name in helmlog.__all__
        if name not in FACE_OWN
        and not any(
            getattr(importlib.import_module(space), name, None)
            is getattr(helmlog, name)
            for space in found.get(name, ())
        )
    ]
    assert [] == orphans


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("ClusterError", "helmlog.actors"),
        ("HostUnavailableError", "helmlog.actors"),
        ("AgentBuildError", "helmlog.runtime"),
        ("ProviderError", "helmlog.runtime"),
        ("StoreError", "helmlog.events"),
        ("CheckpointError", "helmlog.events"),
    ],
)
def test_errors_live_in_the_layer_they_name(name: str, layer: str) -> None:
    """A cluster's errors are the actors', the loop's the runtime's, the
    record's the events' (issue 25 item 3)."""
    assert [layer] == homes()[name]
