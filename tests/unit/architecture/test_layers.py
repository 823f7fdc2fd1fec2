"""Layers import downward only (ARCHITECTURE.md, STYLE.md "the shape of the house").

``events`` imports nothing of helmlog; ``runtime`` imports ``events``;
``sinks`` imports ``events`` only (R16); ``actors`` composes ``runtime``,
``events`` and ``sinks``; ``gateway`` sits on top; the ``helmlog`` face may
import every layer, and is checked too: through public names only (issue
25). ``runtime`` never imports Ray. The walk is static (``ast``), so an import
hidden inside a function is caught too. Cycles: test_no_cycles.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

ALLOWED: dict[str, set[str]] = {
    "events": set(),
    "runtime": {"events"},
    "sinks": {"events"},
    "actors": {"events", "runtime", "sinks"},
    "gateway": {"events", "runtime", "sinks", "actors"},
    # Beside the gateway, never on its insides (ARCHITECTURE.md).
    "integrations": {"events", "runtime", "sinks", "actors"},
    # The face may import every layer, through public names only.
    "helmlog": {"events", "runtime", "sinks", "actors", "gateway", "integrations"},
}
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "events": {"ray"},
    "runtime": {"ray", "redis"},
    # A framework is imported by its own integration module only.
    "integrations": {"ray"},
    "sinks": {"ray"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _violations(layer: str) -> list[str]:
    problems: list[str] = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for lineno, module in _imports(path):
            parts = module.split(".")
            where = f"{path.relative_to(ROOT)}:{lineno}"
            if parts[0] == "helmlog":
                target = parts[1] if len(parts) > 1 else "helmlog"
                if layer == "helmlog" and target not in ALLOWED:
                    continue  # the face's own modules (helmlog._commands, ...)
                if target not in ALLOWED[layer] and target != layer:
                    problems.append(f"{where} imports {module} (up or across a layer)")
                elif target != layer and any(p.startswith("_") for p in parts[2:]):
                    problems.append(
                        f"{where} imports {module}, another layer's private module "
                        "(build on its public names, e.g. helmlog.runtime.lowlevel)"
                    )
            elif parts[0] in FORBIDDEN_THIRD_PARTY.get(layer, set()):
                problems.append(f"{where} imports {module}, which {layer} must not use")
    return problems


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_downward_only(layer: str) -> None:
    """No module of a layer imports a layer above it (or the face), nor another
    layer's private module."""
    assert [] == _violations(layer)


def test_layer_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The walker itself finds an upward import (so the test above can fail)."""
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from helmlog.runtime import Agent\n")
    assert [(2, "helmlog.runtime")] == _imports(bad)
