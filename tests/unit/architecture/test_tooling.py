"""The house tooling is clean: ruff lint, ruff format, mypy strict (STYLE.md).

Run inside the test suite so that ``.ci/run`` — which runs exactly the
README's test command — turns a lint or type error red like any failing test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint_is_clean() -> None:
    """``ruff check`` finds nothing."""
    out = _run(sys.executable, "-m", "ruff", "check", ".")
    assert 0 == out.returncode, out.stdout + out.stderr


def test_ruff_format_is_clean() -> None:
    """``ruff format --check`` would change nothing."""
    out = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert 0 == out.returncode, out.stdout + out.stderr


def test_mypy_strict_is_clean() -> None:
    """``mypy --strict`` over the installed layout (scripts/typecheck.py) passes."""
    out = _run(sys.executable, "scripts/typecheck.py")
    assert 0 == out.returncode, out.stdout + out.stderr
