"""Fixtures the integration tests of every framework share.

Pattern: plain fixtures over ``scenario.py``: the file tool executions are
         counted in (across processes, ``RUNS_ENV``) and the environment a
         second process (``helmlog approve``) runs with.
Role:    test support for ``tests/integration/integrations``.

Laws: issue 27 item 6 (an ask approved from a second process; the tool runs
exactly once, counted).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .scenario import APPROVER, RUNS_ENV

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def runs_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's tool executions are counted (here and in children)."""
    path = tmp_path / "runs.txt"
    monkeypatch.setenv(RUNS_ENV, str(path))
    return path


@pytest.fixture
def approver_env(runs_file: Path) -> dict[str, str]:
    """The environment of a ``helmlog approve`` subprocess: the approver, the
    repository on ``PYTHONPATH`` (``--agent tests...scenario:...``), the
    executions file."""
    return {
        **os.environ,
        "HELMLOG_APPROVER": APPROVER,
        "PYTHONPATH": str(ROOT),
        RUNS_ENV: str(runs_file),
    }
