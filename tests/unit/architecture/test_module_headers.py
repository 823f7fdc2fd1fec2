"""Every module opens with a short docstring that says what it is (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = (
    "events",
    "runtime",
    "sinks",
    "actors",
    "gateway",
    "integrations",
    "helmlog",
    "evidence",
    "bench",
)


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_opens_with_a_docstring(path: Path) -> None:
    """The module's first statement is a non-empty docstring."""
    tree = ast.parse(path.read_text(), filename=str(path))
    doc = ast.get_docstring(tree)
    assert doc, f"{path.relative_to(ROOT)} has no module docstring"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_header_is_short(path: Path) -> None:
    """A module header is about ten lines, at most 20 (issue 25 item 6)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""
    lines = len(doc.splitlines())
    assert lines <= 20, f"{path.relative_to(ROOT)}: header of {lines} lines"
