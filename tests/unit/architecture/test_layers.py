"""Layers import downward only (ARCHITECTURE.md, STYLE.md "the shape of the house").

``events`` imports nothing of helmlog; ``runtime`` imports ``events``;
``sinks`` imports ``events`` only (R16); ``actors`` composes ``runtime``,
``events`` and ``sinks``; ``gateway`` sits on top; the ``helmlog`` face may
import everything. ``runtime`` never imports Ray. The walk is static (``ast``),
so an import hidden inside a function is caught too.
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
}
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "events": {"ray"},
    "runtime": {"ray", "redis"},
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


def _sibling_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports (relative imports, lazy ones too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def _cycles(package: Path) -> list[list[str]]:
    """Import circles among a package's modules (``__init__`` left out)."""
    graph = {
        p.stem: _sibling_imports(p)
        for p in sorted(package.glob("*.py"))
        if p.stem != "__init__"
    }
    cycles: list[list[str]] = []
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        if node in path:
            cycle = path[path.index(node) :]
            if min(cycle) == cycle[0]:  # report each circle once
                cycles.append([*cycle, node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, set()) & graph.keys()):
            walk(nxt, [*path, node])
        done.add(node)

    for start in sorted(graph):
        walk(start, [])
    return cycles


# Invariant: a package listed here has no import circle among its modules.
ACYCLIC = ("events", "runtime", "sinks")


@pytest.mark.parametrize("package", ACYCLIC)
def test_package_modules_import_no_circle(package: str) -> None:
    """No two modules of the package import each other, directly or round a
    ring, not even lazily inside a function (issue 8 item 9)."""
    assert [] == _cycles(ROOT / package)


def test_cycle_check_catches_a_lazy_circle(tmp_path: Path) -> None:
    """The cycle walker finds a circle closed by a function-level import."""
    (tmp_path / "_a.py").write_text("from ._b import x\n")
    (tmp_path / "_b.py").write_text("def f():\n    from ._a import y\n")
    assert [["_a", "_b", "_a"]] == _cycles(tmp_path)
