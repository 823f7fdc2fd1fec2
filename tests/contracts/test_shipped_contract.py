"""The shipped contract runs as its header says, outside this repository's fixtures.

Pattern: an end-to-end check of ``helmlog.events.testing``: a test module in
         a fresh directory (no ``tests/contracts/conftest.py`` in reach)
         star-imports the suite and defines only ``make_store``, as a
         third-party adapter's tests would; pytest runs it in a subprocess.
Role:    tests/contracts; keeps the documented usage true.
Emits:   nothing.

Laws: R11 (a third-party adapter can run the same suite as ours).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import helmlog.events.testing as contract

ADAPTER_TESTS = '''
import pytest_asyncio
from helmlog.events import MemoryEventStore
from helmlog.events.testing import *  # noqa: F403


class ThirdPartyStore(MemoryEventStore):
    """Another adapter, as far as the suite can tell."""


@pytest_asyncio.fixture(loop_scope="session")
async def make_store():
    opened = []

    def make(*, chain_key=None):
        store = ThirdPartyStore(chain_key=chain_key)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()
'''


@pytest.mark.slow
def test_r11_a_third_party_adapter_runs_the_shipped_suite(tmp_path: Path) -> None:
    """R11: a module that star-imports helmlog.events.testing and defines only
    ``make_store``, under pytest-asyncio's default (strict) mode, collects and
    passes every test of the contract."""
    (tmp_path / "test_third_party_store.py").write_text(ADAPTER_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    tests = {name for name in contract.__all__ if name.startswith("test_")}
    passed = set(re.findall(r"^PASSED \S+::(test_\w+)", done.stdout, re.M))
    assert (0, tests) == (done.returncode, passed), (
        done.stdout[-3000:] + done.stderr[-2000:]
    )
