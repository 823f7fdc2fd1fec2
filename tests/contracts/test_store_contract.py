"""The shipped event-store contract, run on every adapter of this repository.

Pattern: the contract suite of ``helmlog.events.testing``, star-imported as a
         third-party adapter would, over the ``make_store`` fixture of
         ``tests/contracts/conftest.py`` (memory, Redis, Redis Cluster).
Role:    tests/contracts; proves the shipped suite runs as documented, and
         that every adapter here passes it.
Emits:   nothing.

Laws: R11 (every adapter passes the same suite, on a real server, never a
fake), and the laws each imported test is named for.
"""

from __future__ import annotations

from helmlog.events.testing import *  # noqa: F403
