"""One tool-call pipeline: nothing but ``runtime/_pipeline.py`` walks a call's steps.

The steps of G51 that act on a call — the before-tool and after-tool walks,
credential resolution, ``execute`` — are called from the pipeline only, so
changing their order is one edit (issue 9 item 1). The walk is static
(``ast``): a call by any name bound to one of these functions counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = (
    "events",
    "runtime",
    "sinks",
    "actors",
    "gateway",
    "integrations",
    "helmlog",
)
STEPS = {"walk_tool_calls", "walk_tool_results", "with_credentials", "call_execute"}
# Where a step may be called from: the pipeline; a ToolExecutor runs the
# execute step of a call the pipeline dispatched, in its own process (G69).
ALLOWED = {
    "runtime/_pipeline.py": STEPS,
    "actors/_policy.py": {"call_execute"},
}


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name):
                names.add(fn.id)
            elif isinstance(fn, ast.Attribute):
                names.add(fn.attr)
    return names & STEPS


def test_g51_only_the_pipeline_calls_a_calls_steps() -> None:
    """G51: the walkers, credentials and execute are called by the pipeline only."""
    found = {
        str(p.relative_to(ROOT)): sorted(_calls(p) - ALLOWED.get(rel, set()))
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if (rel := str(p.relative_to(ROOT)))
    }
    assert {} == {path: names for path, names in found.items() if names}
