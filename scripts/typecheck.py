"""Type-check the packages under the names they install as (``helmlog.*``).

Pattern: build a throwaway tree of symlinks that mirrors the installed
         layout, then run ``mypy --strict`` on it.
Role:    tooling; ``.ci/run`` and developers run it as ``uv run python
         scripts/typecheck.py``.
Emits:   mypy's report; exits with mypy's status.

Why a symlink tree: the root folders ``events/``, ``runtime/``, ... install
as ``helmlog.events``, ``helmlog.runtime``, ... through a package-dir mapping
that mypy cannot read; mirroring the installed layout lets mypy check the real
files under their real module names.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("events", "runtime", "sinks", "actors", "gateway", "integrations")


def build_tree() -> Path:
    """Create ``.mypy_tree/helmlog`` mirroring the installed package."""
    tree = ROOT / ".mypy_tree"
    if tree.exists():
        shutil.rmtree(tree)
    pkg = tree / "helmlog"
    pkg.mkdir(parents=True)
    for item in (ROOT / "helmlog").iterdir():
        if item.name != "__pycache__":
            (pkg / item.name).symlink_to(item)
    for layer in LAYERS:
        (pkg / layer).symlink_to(ROOT / layer)
    # The standalone verifier installs top-level (pyproject's package-dir).
    (tree / "helmlog_evidence").symlink_to(ROOT / "evidence")
    return tree


def main() -> int:
    tree = build_tree()
    cmd = [sys.executable, "-m", "mypy", "--strict", "-p", "helmlog"]
    cmd += ["-p", "helmlog_evidence"]
    return subprocess.call(cmd, cwd=ROOT, env={"MYPYPATH": str(tree), "PATH": ""})


if __name__ == "__main__":
    raise SystemExit(main())
