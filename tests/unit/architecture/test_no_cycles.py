"""No import cycle anywhere: every package and the face, lazy imports included.

Role:    architecture test over the source tree (``ast``, nothing imported).

Laws: issue 25 item 5 (no cycle anywhere, lazy and ``TYPE_CHECKING`` imports
included, checked over every package and the face).

Why the graph is of modules and counts every import: a cycle closed by an
import inside a function or under ``TYPE_CHECKING`` still ties two modules
into one concept a reader must hold at once. A module importing its own
package (``from helmlog.events import X`` inside ``events/``) is an edge to
that package's ``__init__``, which imports the module back: a cycle too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Folder on disk -> the package it installs as (pyproject's package-dir).
PACKAGES = {
    "events": "helmlog.events",
    "runtime": "helmlog.runtime",
    "sinks": "helmlog.sinks",
    "actors": "helmlog.actors",
    "gateway": "helmlog.gateway",
    "integrations": "helmlog.integrations",
    "helmlog": "helmlog",
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _targets(name: str, path: Path, node: ast.ImportFrom, known: set[str]) -> list[str]:
    if node.level:
        base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            base = base.rsplit(".", 1)[0]
        module = f"{base}.{node.module}" if node.module else base
    else:
        module = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        out.append(sub if sub in known else module)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (every import statement)."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                deps.update(_targets(name, path, node, known))
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = (deps & known) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_anywhere() -> None:
    """No module of any package or of the face imports itself back, through
    any ring of imports, lazy and ``TYPE_CHECKING`` ones included."""
    assert [] == cycles(import_graph())


def test_the_cycle_check_catches_a_lazy_ring() -> None:
    """The checker finds a ring closed by a function-level import."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [["a", "b", "c"]] == cycles(graph)
